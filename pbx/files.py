"""Durable file writes: a file that a run relies on is whole on disk, or the old one is.

``os.replace`` makes a write atomic for readers, but after a power or host
failure the directory entry can point at a file whose data never reached the
disk. :func:`durable_write` fsyncs the data before the rename and the folder
after it, so once it returns the file survives a crash. Runners rely on this
order: a round's checkpoints are durable before its history rows are written,
and only then are the previous round's files deleted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


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
