"""Durable file writes: a file that a run relies on is whole on disk, or the old one is.

``os.replace`` makes a write atomic for readers, but after a power or host
failure the directory entry can point at a file whose data never reached the
disk. :func:`durable_write` fsyncs the data before the rename and the folder
after it, so once it returns the file survives a crash. Runners rely on this
order: a round's checkpoints are durable before its history rows are written,
and only then are the previous round's files deleted.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence


def fsync_dir(folder: Path) -> None:
    """Make the folder's entries (renames, new and deleted files) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` through ``write(tmp)`` into ``path.tmp``, fsync it, rename it over ``path``, fsync the folder."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def append_csv(path: Path, rows: Iterable[Sequence[str]]) -> None:
    """Append ``rows`` to the CSV file ``path`` (created if missing), flushed and fsynced: on disk when this
    returns. A kill inside the write leaves at most a torn last line, which the append-only logs' readers drop."""
    with open(path, "a", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
        f.flush()
        os.fsync(f.fileno())


def write_csv(path: Path, rows: Iterable[Sequence[str]]) -> None:
    """Replace the CSV file ``path`` with ``rows``, durably (:func:`durable_write`): the old file or the new one."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)

    durable_write(path, write)
