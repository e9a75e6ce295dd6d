"""Scalar TensorBoard logging without torch or TensorFlow.

Writes the event files TensorBoard reads with its own protobufs, so a toy run
never imports torch (seconds matter there). One writer per folder: each member
gets its own folder under ``tb/``, so TensorBoard overlays members as runs.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Mapping

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class ScalarWriter:
    def __init__(self, logdir: Path) -> None:
        self._writer = EventFileWriter(str(logdir))

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Log ``tag -> value`` at ``step`` (env steps); NaN values are skipped, not plotted as gaps."""
        summary = Summary(value=[
            Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items() if not math.isnan(float(v))
        ])
        self._writer.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
