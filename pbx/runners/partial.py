"""A round in progress on disk: what a run stopped inside a round keeps, so that a resume continues that round.

A finished round is in ``history.csv``; until then, each member's part of the round in progress
is in files of its own beside its checkpoints (:class:`~pbx.run_dir.RunDir`), written by the
process that trains it (an MPI rank, on its own disk if need be):

- ``member_<i>.r<round>.done.json``: the member is through the round; its report (:class:`Trained`), written
  after its round's checkpoint ``member_<i>.r<round>.ckpt``. A resume takes both and does not train it again.
- ``member_<i>.r<round>.part.ckpt``: the member stopped inside the round (a stop, or a periodic save), between
  two rollouts; the checkpoint holds the round's own count (:meth:`pbx.members.Member.train`), and
  ``.part.json`` beside it what the runner measured before the round trained (its start score) and the steps
  the save holds (what a report counts without loading the checkpoint). A resume loads
  it and goes on to the round's end.
- neither: the member had not begun the round; a resume trains it from the round before, as it would have.

Once the round is in the history, the loop's prune deletes them all. A kill while one is written leaves the
one before it whole (each is replaced atomically), so a ``kill -9`` loses at most what was trained since the
member's last save.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.runners.loop import Trained

_FIX = "the run folder is damaged: delete the file to train that member's round again, or restore it"


def write_record(path: Path, record: dict[str, Any]) -> None:
    """``record`` as JSON at ``path``, durably (NaN as JSON's ``NaN``, which Python's reader takes)."""
    durable_write(path, lambda tmp: tmp.write_text(json.dumps(record)))


def read_record(path: Path) -> dict[str, Any]:
    """A record :func:`write_record` wrote; anything unreadable is one :class:`UsageError` naming the file."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{path}: unreadable ({type(err).__name__}); {_FIX}") from None
    if not isinstance(record, dict):
        raise UsageError(f"{path}: not a record of a round in progress; {_FIX}")
    return record


def done_record(trained: Trained) -> dict[str, Any]:
    """A member's report at its round's end, as ``done.json`` holds it."""
    return dataclasses.asdict(trained)


def trained_from(record: dict[str, Any], path: Path) -> Trained:
    """The report a ``done.json`` holds."""
    try:
        fields = {f.name: record[f.name] for f in dataclasses.fields(Trained)}
        fields["curve"] = tuple((int(at), float(value)) for at, value in fields["curve"])
        return Trained(**fields)
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: not a member's report of a round; {_FIX}") from None


def start_score_from(record: dict[str, Any], path: Path) -> float:
    """The start score a ``part.json`` holds (NaN where the round asked for none)."""
    value = record.get("start_score")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise UsageError(f"{path}: not a record of a member inside a round; {_FIX}")
    return float(value) if math.isfinite(value) else math.nan
