"""Scalar TensorBoard logging without torch, TensorFlow or a writer thread.

Writes the event files TensorBoard reads with its own protobufs, so a toy run never
imports torch (seconds matter there). One writer per folder: each member gets its own
folder under ``tb/``, so TensorBoard overlays members as runs.

The events are written in the calling thread. TensorBoard's ``EventFileWriter`` (and
torch's ``SummaryWriter`` on top of it) hands them to a thread through a queue: the
``KeyboardInterrupt`` a Ctrl-C or a scheduler's SIGTERM raises in the main thread can land
inside that queue's locking and leave the writer thread asleep, and closing the writer then
waited on it forever (a stopped run hung instead of printing its resume hint). A few events
a round need no thread.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import time
from pathlib import Path
from typing import Mapping

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter

_files = itertools.count()
"""Tells apart the event files one process opens in one second (TensorBoard's own naming)."""


class ScalarWriter:
    def __init__(self, logdir: Path) -> None:
        logdir = Path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_files)}"
        self._writer = RecordWriter(open(logdir / name, "wb"))
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Log ``tag -> value`` at ``step`` (env steps); NaN values are skipped, not plotted as gaps."""
        summary = Summary(value=[
            Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items() if not math.isnan(float(v))
        ])
        self._write(Event(wall_time=time.time(), step=int(step), summary=summary))

    def _write(self, event: Event) -> None:
        self._writer.write(event.SerializeToString())

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
