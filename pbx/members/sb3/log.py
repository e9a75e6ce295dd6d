"""SB3's logger for a member: its losses and rollout statistics in the member's TensorBoard folder.

SB3's own TensorBoard output is torch's ``SummaryWriter``, which writes through a thread that
a Ctrl-C or a scheduler's SIGTERM can leave asleep, so that closing it never returned
(:mod:`pbx.tblog`); this output writes the same scalars in the calling thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.logger import KVWriter, Logger

from pbx.tblog import ScalarWriter


class TensorBoardOutput(KVWriter):
    """The numbers of each SB3 ``dump`` as TensorBoard scalars at its step, as SB3's ``tensorboard`` format
    writes them (keys excluded from ``tensorboard`` left out; SB3's text and histogram values, which the
    members do not log, too)."""

    def __init__(self, folder: Path) -> None:
        self._writer = ScalarWriter(folder)

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        numbers = {key: float(value) for key, value in key_values.items()
                   if isinstance(value, (bool, int, float, np.number)) and not isinstance(value, np.complexfloating)
                   and "tensorboard" not in (key_excluded.get(key) or ())}
        if numbers:
            self._writer.scalars(numbers, step)
            self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def member_logger(folder: Path | None) -> Logger:
    """SB3's logger writing to TensorBoard in ``folder``; None: one that writes nothing."""
    if folder is None:
        return Logger(folder=None, output_formats=[])
    return Logger(folder=str(folder), output_formats=[TensorBoardOutput(folder)])
