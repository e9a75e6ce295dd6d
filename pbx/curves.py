"""The scores members take within a round: ``curves.csv``, beside the history.

A round's history row holds one score per member; an improvement rate needs more.
Members report the scores they took on the way (:meth:`pbx.members.Member.curve`:
the toys after every step, PPO after every rollout in which an episode ended), and
the runner stores them here, one row per point:

- ``member``, ``round``: the history row the point belongs to;
- ``steps``: the member's cumulative env steps when the score was taken;
- ``score``: the score (finite: a point with no score is not a point).

A round's points are written and fsynced *before* its history rows, so every
round in the history has its points on disk; on reopen, points of rounds the
history does not hold (a kill between the two writes, or inside one) are dropped,
as the history drops a partial round. So strategies that read curves (FIRE) stay
functions of the run's files, and a resumed or MPI run writes the file an
uninterrupted synchronous run writes. A run folder without the file (written
before curves were kept) reads as one without points: each round's score is then
its curve's only point.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from pbx.errors import UsageError
from pbx.files import append_csv, write_csv

CURVES_FILE = "curves.csv"
CURVE_COLUMNS = ["member", "round", "steps", "score"]

Point = tuple[int, float]
"""``(steps, score)``: one score a member took within a round."""


def points_frame(points: Iterable[tuple[int, int, int, float]] = ()) -> pd.DataFrame:
    """A curves table of ``(member, round, steps, score)`` tuples, typed as :func:`read_curves` returns it."""
    frame = pd.DataFrame(list(points), columns=CURVE_COLUMNS)
    return frame.astype({"member": np.int64, "round": np.int64, "steps": np.int64, "score": np.float64})


def read_curves(path: Path | str, last_round: int | None = None) -> pd.DataFrame:
    """Read a ``curves.csv``: no file reads as no points, a torn last line is left out, and so are points of
    rounds after ``last_round`` (the history's last whole round). A row that does not parse means the file is
    damaged: a :class:`UsageError` naming it."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return points_frame()
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: not a readable pbx curves file ({err})") from None
    rows = list(csv.reader(io.StringIO(text[:text.rfind("\n") + 1])))
    if not rows or rows[0] != CURVE_COLUMNS:
        raise UsageError(f"{path}: not a pbx curves file (its header is not {','.join(CURVE_COLUMNS)})")
    try:
        points = [(int(m), int(r), int(s), float(v)) for m, r, s, v in rows[1:]]
    except ValueError as err:
        raise UsageError(f"{path}: a row does not parse ({err}); the file is damaged (restore it, or delete it "
                         f"to compare rounds by their scores alone)") from None
    frame = points_frame(points)
    return frame[frame["round"] <= last_round].reset_index(drop=True) if last_round is not None else frame


class CurveLog:
    """The append-only ``curves.csv`` of a run, kept to the rounds of its history (see the module docstring)."""

    def __init__(self, path: Path, last_round: int) -> None:
        self.path = Path(path)
        self.frame = read_curves(self.path, last_round)
        # Rewrite so the file holds exactly the points kept: later appends then follow whole rounds.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_csv(self.path, [CURVE_COLUMNS] + [_fields(p) for p in self.frame.itertuples(index=False)])

    def append(self, points: Iterable[tuple[int, int, int, float]]) -> None:
        """Append one round's points ``(member, round, steps, score)``; they are on disk when this returns."""
        append_csv(self.path, [_fields(p) for p in points])


def _fields(point: Iterable[object]) -> list[str]:
    member, round_, steps, score = point
    # repr() of a float is its shortest exact form: a resumed FIRE run reads back the same bits.
    return [str(int(member)), str(int(round_)), str(int(steps)), repr(float(score))]
