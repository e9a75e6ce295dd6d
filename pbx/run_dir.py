"""The run folder: where a run's config, history, checkpoints and logs live.

    runs/<name>/config.yaml           resolved config (``--config`` rebuilds the run from it)
    runs/<name>/history.csv           one row per (member, round)
    runs/<name>/strategy.csv          the strategy's reasons, one row per decision that changes a member
    runs/<name>/checkpoints/          member_<i>.r<round>.ckpt, the latest finished round
    runs/<name>/tb/                   TensorBoard, one sub-folder per member plus ``population``
    runs/<name>/report/               plots and tables written by ``python -m pbx.report``

Checkpoints carry their round in the name so a kill while round r is being
saved leaves round r - 1's files whole: they are deleted only once round r is in
the history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pbx.errors import UsageError

_CKPT = re.compile(r"member_(\d+)\.r(\d+)\.ckpt$")


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def history(self) -> Path:
        return self.path / "history.csv"

    @property
    def strategy(self) -> Path:
        return self.path / "strategy.csv"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def tb(self) -> Path:
        return self.path / "tb"

    @property
    def report(self) -> Path:
        return self.path / "report"

    def create(self) -> None:
        if self.config.exists():
            raise UsageError(f"{self.path} already holds a run; continue it with --resume {self.path} "
                             "or pick another folder with --run-dir")
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.tb.mkdir(exist_ok=True)

    def require_run(self) -> None:
        """Raise unless this folder holds a run that can be resumed."""
        if not self.path.is_dir():
            raise UsageError(f"--resume {self.path}: no such folder")
        if not self.config.is_file() or not self.history.is_file():
            raise UsageError(f"--resume {self.path}: not a pbx run folder (needs config.yaml and history.csv)")

    def checkpoint(self, member: int, round_: int) -> Path:
        return self.checkpoints / f"member_{member}.r{round_}.ckpt"

    def prune_checkpoints(self, keep_round: int) -> None:
        """Delete every checkpoint not of ``keep_round`` (older ones, or newer ones a kill left half written)."""
        for f in self.checkpoints.iterdir():
            match = _CKPT.match(f.name)
            if (match and int(match.group(2)) != keep_round) or f.name.endswith(".tmp"):
                f.unlink(missing_ok=True)
