"""The run folder: where a run's config, history, checkpoints and logs live.

    runs/<name>/config.yaml           resolved config (``--config`` rebuilds the run from it)
    runs/<name>/history.csv           one row per (member, round)
    runs/<name>/curves.csv            the scores members took within each round (pbx.curves)
    runs/<name>/strategy.csv          the strategy's reasons, one row per decision that changes a member
    runs/<name>/checkpoints/          member_<i>.r<round>.ckpt, the latest finished round; while the round after it
                                      is in progress, member_<i>.r<round>.part.ckpt (stopped inside it) or
                                      .done.json (through it): :mod:`pbx.runners.partial`
    runs/<name>/kept/                 member_<i>.r<round>.ckpt, the best member's of each round that a restart
                                      (BG-PBT, IPBT) ended a generation after: ``--member kept`` picks among them
    runs/<name>/tb/                   TensorBoard, one sub-folder per member plus ``population``
    runs/<name>/report/               plots and tables written by ``python -m pbx.report``

Checkpoints carry their round in the name so a kill while round r is being
saved leaves round r - 1's files whole: they are deleted only once round r is in
the history.

A process training into a folder holds its ``.lock`` (an ``flock``, which the
kernel releases when the process dies, so a killed run leaves no stale lock):
a second ``--resume`` of the same folder, say a requeued cluster job, refuses
instead of writing the same history twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterator

from pbx.curves import CURVES_FILE
from pbx.errors import UsageError

_CKPT = re.compile(r"member_(\d+)\.r(\d+)\.(ckpt|part\.ckpt|part\.json|done\.json)$")
"""A member's file of a round: its checkpoint at the round's end (``ckpt``), and while the round is not in the
history, its state inside the round (``part.ckpt``, ``part.json``) or what it reported at the round's end
(``done.json``)."""
LOCK_TABLE = Path("/proc/locks")
"""The kernel's table of the file locks held on the machine (Linux): :meth:`RunDir.holder` reads it."""


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
    def curves(self) -> Path:
        return self.path / CURVES_FILE

    @property
    def strategy(self) -> Path:
        return self.path / "strategy.csv"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def kept(self) -> Path:
        return self.path / "kept"

    @property
    def tb(self) -> Path:
        return self.path / "tb"

    @property
    def report(self) -> Path:
        return self.path / "report"

    def written(self) -> tuple[Path, ...]:
        """Every file and folder a run writes at its top level (``report/`` is the report's; ``.lock``, the
        folder's lock, any pbx process may leave): a new run refuses a folder that holds any of them, so that
        whatever :meth:`discard` removes is the run's own."""
        return (self.config, self.history, self.curves, self.strategy, self.checkpoints, self.kept, self.tb)

    def _taken(self) -> list[str]:
        """The names of :meth:`written` the folder holds (a link counts, even one to nothing)."""
        return [p.name for p in self.written() if p.exists() or p.is_symlink()]

    def create(self) -> bool:
        """Make the folder for a new run; whether it was made (False: it existed, holding none of a run's files).

        A folder that holds a run is refused (continue it with ``--resume``), and so is one that holds any
        other file a run writes (:meth:`written`: a user's own ``checkpoints/`` or ``history.csv``), before
        anything is written: a run never mixes its files with ones it did not write, so it can remove its own
        (:meth:`discard`) without touching the user's.
        """
        if self.config.exists():
            with self.lock():  # names the process if one is training into the folder right now
                pass
            raise UsageError(f"{self.path} already holds a run; continue it with --resume {self.path} "
                             "or pick another folder with --run-dir")
        taken = self._taken()
        if taken:
            raise UsageError(f"{self.path} holds {', '.join(taken)}, which a new run would write, and no run "
                             f"(config.yaml): pick a new or empty folder with --run-dir")
        made = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        return made

    def begin(self) -> None:
        """Make a new run's folders, once the process holds the folder's lock (:meth:`lock`): a run refused before
        (bad input, a folder in use) leaves none of them behind, and a folder that another process filled since
        :meth:`create` looked is refused."""
        taken = self._taken()
        if taken:
            raise UsageError(f"{self.path} holds {', '.join(taken)} since this run looked at it (another run "
                             f"started there): pick another folder with --run-dir")
        self.checkpoints.mkdir()
        self.tb.mkdir()

    def discard(self, made: bool) -> None:
        """Remove what a new run wrote before a refusal ended it with no round in its history, so the name is
        free again: some refusals come only as the members are built or restored, after the folder is
        written. ``made``: whether the run made the folder (:meth:`create`), which then goes too if empty. Only
        the run's own files go: :meth:`create` refused a folder holding any of them before."""
        if self.history.is_file() and len(self.history.read_text().splitlines()) > 1:
            return  # a finished round: the run exists, and --resume continues it
        for f in (self.config, self.history, self.curves, self.strategy):
            f.unlink(missing_ok=True)
        for folder in (self.checkpoints, self.kept, self.tb):
            shutil.rmtree(folder, ignore_errors=True)
        if made:  # the lock file too (in a folder it did not make, a .lock may have been there before: it stays)
            (self.path / ".lock").unlink(missing_ok=True)
            if not any(self.path.iterdir()):
                self.path.rmdir()

    def require_run(self) -> None:
        """Raise unless this folder holds a run that can be resumed."""
        if not self.path.is_dir():
            raise UsageError(f"--resume {self.path}: no such folder")
        if not self.config.is_file() or not self.history.is_file():
            raise UsageError(f"--resume {self.path}: not a pbx run folder (needs config.yaml and history.csv)")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder for this process; raise :class:`UsageError` naming the process that holds it."""
        path = self.path / ".lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                raise UsageError(f"{self.path} is in use by process {holder} (another run or --resume of this "
                                 f"folder); wait for it to end or stop it first") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the flock

    def holder(self) -> int | None:
        """The process that holds the folder's lock (:meth:`lock`) now, or None; found without taking the lock or
        writing anything, so that a reader (:func:`pbx.load`) never stands in a resume's way.

        Where the kernel lists its file locks (Linux's ``/proc/locks``), the process holding a lock on the
        ``.lock`` file's inode (by inode alone: in a container the table may name another device for the file
        than ``stat`` does); elsewhere the process the file names, while one with that id lives. A holder on
        another machine (an MPI run's rank 0, on a shared file system) is not seen.
        """
        path = self.path / ".lock"
        try:
            inode, named = path.stat().st_ino, path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        try:
            table = LOCK_TABLE.read_text()
        except OSError:
            return int(named) if named.isascii() and named.isdigit() and _alive(int(named)) else None
        for line in table.splitlines():
            # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2221096 0 EOF"; a process waiting for a lock has "->" after "1:"
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rpartition(":")[2] == str(inode):
                return int(fields[4])
        return None

    def checkpoint(self, member: int, round_: int) -> Path:
        return self.checkpoints / f"member_{member}.r{round_}.ckpt"

    def part(self, member: int, round_: int) -> Path:
        """The member's checkpoint inside round ``round_`` (a stop or a periodic save: :mod:`pbx.runners.partial`)."""
        return self.checkpoints / f"member_{member}.r{round_}.part.ckpt"

    def part_record(self, member: int, round_: int) -> Path:
        """What the runner keeps beside :meth:`part` (the member's score before the round)."""
        return self.checkpoints / f"member_{member}.r{round_}.part.json"

    def done_record(self, member: int, round_: int) -> Path:
        """What the member reported at the end of round ``round_``, kept until the round is in the history."""
        return self.checkpoints / f"member_{member}.r{round_}.done.json"

    def kept_checkpoint(self, member: int, round_: int) -> Path:
        return self.kept / self.checkpoint(member, round_).name

    def keep(self, member: int, round_: int) -> None:
        """Keep ``member``'s checkpoint of ``round_`` past the prune, in ``kept/``: what ``--member kept`` loads,
        as a donor's (an off-policy member's replay segments beside it are its own training state, not needed).

        A hard link, so a kept member costs no disk (a checkpoint is only ever replaced by a rename, never
        written in place), made under a temporary name and renamed: the file is whole or absent.
        """
        self.kept.mkdir(exist_ok=True)
        final = self.kept_checkpoint(member, round_)
        partial = final.with_name(final.name + ".tmp")
        partial.unlink(missing_ok=True)
        try:
            os.link(self.checkpoint(member, round_), partial)
        except OSError:  # a file system without hard links
            shutil.copy2(self.checkpoint(member, round_), partial)
        os.replace(partial, final)

    def prune_checkpoints(self, keep_round: int, members: Collection[int] | None = None,
                          in_progress: bool = False) -> None:
        """Delete every member file but the checkpoints of ``keep_round`` (older ones, newer ones a kill left half
        written, and the round's files from inside it, which the history now holds).

        ``members``: only theirs. An MPI rank prunes its own members' files only: on a
        shared file system another rank may already be writing the next round's.
        ``in_progress``: keep the files of the round after ``keep_round`` too (a resume inside it).
        """
        for f, member, round_, kind in self._checkpoint_files():
            if members is not None and member not in members:
                continue
            if in_progress and round_ == keep_round + 1 and not f.name.endswith(".tmp"):
                continue
            if round_ != keep_round or kind != "ckpt" or f.name.endswith(".tmp"):
                f.unlink(missing_ok=True)

    def newest_checkpoint_round(self) -> int | None:
        """The latest round any checkpoint file (half-written ones included) is of; None without any.

        A resume checks it against the history: round r + 1's files exist only after
        round r is in history.csv, so files of a round past the one after its last mean
        the history lost finished rounds.
        """
        return max((round_ for _, _, round_, _ in self._checkpoint_files()), default=None)

    def _checkpoint_files(self) -> Iterator[tuple[Path, int, int, str]]:
        """(file, member, round, kind: ``ckpt``, ``part.ckpt``, ``part.json``, ``done.json``) of each member file
        in the folder, ``.tmp`` ones included."""
        if not self.checkpoints.is_dir():
            return
        for f in self.checkpoints.iterdir():
            match = _CKPT.match(f.name.removesuffix(".tmp"))
            if match is not None:
                yield f, int(match.group(1)), int(match.group(2)), match.group(3)


def _alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists (one of another user's counts)."""
    if pid <= 0:  # 0 would ask after this process's group
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def folder_part(value: Any) -> str:
    """A value as a part of a folder's name (a sweep's variant and run names)."""
    return re.sub(r"[^A-Za-z0-9._+=-]", "_", str(value)) or "_"
