"""An off-policy member's replay buffer on disk, beside its checkpoints, without a copy of it per round.

A replay buffer is the largest part of an off-policy member (a million BipedalWalker
transitions are about 0.2 GB) and most of it does not change in a round: a round of
``t_ready`` steps rewrites ``t_ready`` of its rows. The runner keeps round ``r - 1``'s
checkpoint until round ``r`` is in the history, so a buffer written whole into each
checkpoint would sit on disk twice and be rewritten every round. :class:`ReplayStore`
writes instead, at each save, one *segment* file with the rows added since the last
save (``member_3.replay.000012.npz``, beside ``member_3.r11.ckpt``); a checkpoint
lists the segments that rebuild its buffer, oldest first (later ones overwrite earlier
rows of the ring). A segment whose rows later ones all overwrote leaves the list.

Which files a save keeps. A save is a round's end (``member_3.r11.ckpt``) or a save inside the
round in progress (``member_3.r12.part.ckpt``, a stop or a periodic save: :mod:`pbx.runners.partial`,
replaced at each such save). While round ``r + 1`` is not in the history, a resume may read three of
the member's checkpoints: round ``r``'s, which it restores first, the round in progress's part,
which it goes on from, and round ``r + 1``'s once written (a member through the round). An exploit,
and a restart's candidate taking its donor's buffer, read the donor's round ``r`` checkpoint. So a
save keeps the segments listed by

- the checkpoint it writes,
- the save before it (a kill before this checkpoint is in place leaves that one: the part this one
  replaces, or the part a round's end follows, which a resume without the member's ``done.json``
  goes on from), and
- the checkpoint the round started from, the latest round's end: ``start``, which a save inside a
  round writes into its entry, so that a resume from the part keeps it too.

A round's end becomes the next round's start; files no list holds are deleted (a kill at any point
between writing a segment, a part, the round's checkpoint and the prune after the history leaves
every file those read). Without saves inside a round this is the two newest checkpoints. Disk
holds the buffer and one round's rows however often the round is saved inside, and a save writes
the rows since the last one.

Files are written with :func:`pbx.files.durable_write` before the checkpoint that lists
them. A resume may find segments of a save the kill interrupted: they carry numbers the
resumed member writes again (an atomic replace), or are deleted at its next save. A segment
the checkpoint lists that is missing or damaged (a full disk, a copy cut short) is one error
naming it, as a damaged checkpoint is (:meth:`ReplayStore.load`).

A buffer with SB3's ``optimize_memory_usage`` holds no ``next_observations``: a row's next
observation is the observation of the row after it, and SB3 writes it there at each add. The
row past the newest one (at ``pos``) is not in a segment: SB3 samples no row whose next
observation it holds before the next add, which first writes that row's observation again
(the envs' last one, which the checkpoint holds), so a resume continues exactly. A buffer taken
from another member (an exploit with ``copy_buffer``, :meth:`ReplayStore.take`) joins that
member's newest row to this member's next observation: one transition of the buffer whose
observations come from two members' envs.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.buffers import ReplayBuffer

from pbx.errors import UsageError
from pbx.files import durable_write

FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
"""The arrays of SB3's ``ReplayBuffer`` (without ``optimize_memory_usage``), each (rows, n_envs, ...)."""


def fields(buffer: ReplayBuffer) -> tuple[str, ...]:
    """The arrays ``buffer`` holds: with ``optimize_memory_usage`` no ``next_observations`` (a row's next observation
    is the next row's observation; see the module docstring)."""
    return tuple(name for name in FIELDS if not (buffer.optimize_memory_usage and name == "next_observations"))

_FIX = "the run folder is damaged: restore the file, or start a new run"
"""The way out a damaged file's message gives (:func:`pbx.members.sb3.checkpoint.read_checkpoint`'s)."""


class CountingReplayBuffer(ReplayBuffer):
    """SB3's ``ReplayBuffer`` that counts the rows it was given, so a save knows which rows are new."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.added = 0
        """Rows added since the buffer was built (one row holds a transition of every env)."""

    def add(self, *args: Any, **kwargs: Any) -> None:
        super().add(*args, **kwargs)
        self.added += 1


def rows(buffer: ReplayBuffer, start: int, count: int) -> dict[str, np.ndarray]:
    """Copies of ``count`` rows of the ring from row ``start`` on (wrapping), field by field."""
    index = (start + np.arange(count)) % buffer.buffer_size
    return {name: getattr(buffer, name)[index] for name in fields(buffer)}


def put_rows(buffer: ReplayBuffer, start: int, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` (as :func:`rows` gives them) into the ring from row ``start`` on."""
    index = (start + np.arange(len(arrays["rewards"]))) % buffer.buffer_size
    for name in fields(buffer):
        getattr(buffer, name)[index] = arrays[name]


def whole(buffer: ReplayBuffer) -> dict[str, Any]:
    """The buffer as one checkpoint entry (``copy_buffer``): its filled rows, as tensors (``torch.save`` writes
    their bytes as they are; a NumPy array it pickles, half as large again), and where the ring stands."""
    filled = buffer.buffer_size if buffer.full else buffer.pos
    return {"rows": {name: torch.from_numpy(array) for name, array in rows(buffer, 0, filled).items()},
            "pos": buffer.pos, "full": buffer.full}


def set_whole(buffer: ReplayBuffer, entry: dict[str, Any], path: Path) -> None:
    """Take the buffer :func:`whole` wrote into the checkpoint ``path`` (the rows past its filled ones are never
    read before written); rows that do not fit the buffer are a :class:`UsageError` naming the checkpoint."""
    filled = buffer.buffer_size if entry["full"] else entry["pos"]
    arrays = {name: entry["rows"][name].numpy() for name in fields(buffer) if name in entry["rows"]}
    problem = _misfit(buffer, arrays, filled)
    if problem:
        raise UsageError(f"{path}: its replay buffer {problem}; {_FIX}")
    put_rows(buffer, 0, arrays)
    buffer.pos, buffer.full = entry["pos"], entry["full"]


class ReplayStore:
    """The segment files of one member's replay buffer (see the module docstring)."""

    def __init__(self, buffer: CountingReplayBuffer) -> None:
        self.buffer = buffer
        self.segments: list[tuple[str, int, int]] = []
        """(file name, first row, row count) of the segments the last checkpoint lists, oldest first."""
        self.start: list[tuple[str, int, int]] = []
        """... and those the checkpoint of the latest round's end lists (where a resume restores the round from)."""
        self.number = 0
        """The next segment's number."""
        self.saved_at = 0
        """``buffer.added`` at the last save or load."""

    def save(self, path: Path, inside: bool) -> dict[str, Any]:
        """Write the rows added since the last save beside the checkpoint ``path``, of a round's end or, ``inside``,
        of the round in progress; the checkpoint's entry."""
        buffer, folder = self.buffer, path.parent
        stem = path.name.split(".")[0]
        new = min(buffer.added - self.saved_at, buffer.buffer_size)
        segments = self.segments
        if new:
            name = f"{stem}.replay.{self.number:06d}.npz"
            arrays = rows(buffer, (buffer.pos - new) % buffer.buffer_size, new)
            durable_write(folder / name, lambda tmp: _write_npz(tmp, arrays))
            segments = _needed([*segments, (name, (buffer.pos - new) % buffer.buffer_size, new)], buffer.buffer_size)
            self.number += 1
        keep = {name for name, _, _ in [*segments, *self.segments, *self.start]}
        for old in folder.glob(f"{stem}.replay.*.npz*"):
            if re.fullmatch(rf"{re.escape(stem)}\.replay\.\d+\.npz(\.tmp)?", old.name) and old.name not in keep:
                old.unlink(missing_ok=True)
        self.segments = segments
        if not inside:
            self.start = segments
        self.saved_at = buffer.added
        entry = {"segments": list(segments), "pos": buffer.pos, "full": buffer.full, "number": self.number}
        return {**entry, "start": list(self.start)} if inside else entry

    def load(self, path: Path, entry: dict[str, Any]) -> None:
        """Rebuild the buffer from the segments a checkpoint at ``path`` lists (its :meth:`save` entry).

        A segment that is missing, unreadable (truncated, empty, not a segment) or does not fit (fields,
        shapes, dtypes other than the buffer's, another row count than the checkpoint lists) is one
        :class:`UsageError` naming its file, as a damaged checkpoint is (``read_checkpoint``): the buffer it
        would rebuild is not the one the checkpoint was saved with, and a run resumed on another buffer would
        no longer continue bit for bit, so nothing is guessed.
        """
        self._fill(path, entry)
        self.segments = [tuple(s) for s in entry["segments"]]  # type: ignore[misc]
        self.start = [tuple(s) for s in entry.get("start", self.segments)]  # type: ignore[misc]
        self.number = entry["number"]
        self.saved_at = self.buffer.added

    def take(self, path: Path, entry: dict[str, Any]) -> None:
        """Rebuild the buffer from another member's checkpoint at ``path`` (its :meth:`save` entry), as this
        member's own rows: the next save writes the whole buffer into a segment of this member's, so its
        checkpoints never list the other member's files, which that member deletes as it goes and which may be on
        another machine (the MPI runner sends them into a temporary folder). Damage is :meth:`load`'s error."""
        self._fill(path, entry)
        self.segments = self.start = []
        self.saved_at = self.buffer.added - (self.buffer.buffer_size if self.buffer.full else self.buffer.pos)

    def _fill(self, path: Path, entry: dict[str, Any]) -> None:
        buffer = self.buffer
        for name, start, count in entry["segments"]:
            put_rows(buffer, start, _read_segment(path.parent / name, path, buffer, count))
        buffer.pos, buffer.full = entry["pos"], entry["full"]


def _read_segment(file: Path, path: Path, buffer: ReplayBuffer, count: int) -> dict[str, np.ndarray]:
    """The ``count`` rows of the segment ``file`` that the checkpoint ``path`` lists; any damage is one
    :class:`UsageError` naming the file."""
    if not file.is_file():
        raise UsageError(f"{file}: missing replay buffer segment, listed by {path.name}; {_FIX}")
    try:
        with np.load(file, allow_pickle=False) as data:
            arrays = {field: data[field] for field in fields(buffer)}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as err:
        # np.load gives EOFError on an empty file, BadZipFile on a truncated one, KeyError for a missing field
        first = (str(err).splitlines() or [""])[0][:80]
        reason = "empty file" if file.stat().st_size == 0 else f"{type(err).__name__}: {first}"
        raise UsageError(f"{file}: unreadable replay buffer segment ({reason}), listed by {path.name}; "
                         f"{_FIX}") from None
    problem = _misfit(buffer, arrays, count)
    if problem:
        raise UsageError(f"{file}: replay buffer segment {problem}, listed by {path.name}; {_FIX}")
    return arrays


def _misfit(buffer: ReplayBuffer, arrays: dict[str, np.ndarray], count: int) -> str:
    """What keeps ``arrays`` from being ``count`` rows of ``buffer`` ("" when nothing does)."""
    for name in fields(buffer):
        if name not in arrays:
            return f"lacks {name}"
        array, field = arrays[name], getattr(buffer, name)
        need = (count, *field.shape[1:])
        if array.shape != need:
            return f"holds {name} of shape {array.shape}, the buffer needs {need}"
        if array.dtype != field.dtype:
            return f"holds {name} of dtype {array.dtype}, the buffer needs {field.dtype}"
    return ""


def _needed(segments: list[tuple[str, int, int]], size: int) -> list[tuple[str, int, int]]:
    """``segments`` less those whose rows the later ones all overwrite."""
    covered = np.zeros(size, dtype=bool)
    kept = []
    for name, start, count in reversed(segments):
        index = (start + np.arange(count)) % size
        if not covered[index].all():
            kept.append((name, start, count))
        covered[index] = True
    return kept[::-1]


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as f:  # a file object: np.savez would add ".npz" to the temporary name
        np.savez(f, **arrays)
