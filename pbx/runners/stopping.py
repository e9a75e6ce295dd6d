"""When a run stops inside a round: a signal, a wall-clock limit, or a periodic save that bounds what a kill loses.

A round of ProcGen PB2 is minutes of a GPU; a cluster job's time limit or a preemption ends it anywhere. So a run
stops at the next *rollout boundary* of the member training (never inside an update; an off-policy agent's is
between two collections of ``train_freq`` steps), saves what a resume needs
to continue that very round (:mod:`pbx.runners.partial`), and exits with :data:`STOPPED_EXIT`:

- a signal: SIGTERM (a scheduler's end of job), SIGINT (Ctrl-C) or SIGUSR1 (Slurm's ``--signal=USR1@120``
  warning). A second SIGINT or SIGTERM interrupts at once (the finished rounds stay, the round in progress since
  the last save is lost), for a user who will not wait for a rollout;
- a wall-clock limit (``--time-limit``): stop while one more rollout and the save still fit before it;
- every ``checkpoint_minutes`` the member training saves its round in progress and goes on (a ``kill -9``
  gives no warning: this bounds what it can lose).

Members ask :meth:`StopClock.due` at each rollout boundary (through the runner); the clock holds no member and
does no I/O. The signals' handlers only set a flag, so a signal never lands inside a save.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence

from pbx.errors import UsageError

STOPPED_EXIT = 75
"""The exit code of a run stopped before its end, with all its work saved (BSD's ``EX_TEMPFAIL``: try again, here
with ``--resume``); 0 means finished, 2 bad input, 130 interrupted at once."""

SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")
"""The signals that stop a run at its next rollout boundary."""

SAVE_RESERVE_S = 2.0
"""Seconds a time limit keeps for the save before any save has been measured (a bigfish member's mid-round save at
the shipped setting took 0.04 s and 12.8 MB on a 2-core CPU: ``benchmarks/bench_stops.py``); after one, twice the
slowest save seen plus half a second."""


class RunStopped(Exception):
    """A run stopped before its end (a signal or its time limit) with everything it trained saved; the command
    exits with :data:`STOPPED_EXIT` after the message: :attr:`summary` (why, how far its round got) and, given the
    run's ``path``, how to go on."""

    def __init__(self, summary: str, path: Path | None = None) -> None:
        super().__init__(summary if path is None else f"{summary}: continue with --resume {path}")
        self.summary = summary


def stop_message(reason: str, round_: int, through: Sequence[int], inside: Mapping[int, int], members: int) -> str:
    """What a stopped run says of itself (:attr:`RunStopped.summary`): why, and how far its round got."""
    parts = [f"member{'s' * (len(through) > 1)} {_ids(sorted(through))} through it"] if through else []
    parts += [f"member {i} saved inside it at {steps:,} steps" for i, steps in sorted(inside.items())]
    begun = len(through) + len(inside)
    if begun < members:
        parts.append(f"{members - begun} not begun" if begun else "no member begun")
    return f"stopped by {reason} in round {round_} ({'; '.join(parts)})"


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids)) if len(ids) < 6 else f"{ids[0]}-{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) \
        else ", ".join(map(str, ids[:5])) + ", ..."


def check_time_limit(value: Any, name: str = "--time-limit") -> float | None:
    """``value`` as seconds of wall clock (None: no limit); :class:`UsageError` for anything but a positive
    finite number."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return seconds


class Peers(Protocol):
    """The other processes of a run, which stop with this one (:class:`pbx.runners.ranks.RankStops`)."""

    def tell(self, reason: str) -> None: ...

    def poll(self) -> str | None: ...


@dataclass
class StopClock:
    """Whether the member training is to stop, or to save and go on, at its next rollout boundary.

    Args:
        time_limit: seconds from now after which no more rollouts start (None: none).
        save_every_s: seconds between two saves of a round in progress (None or 0: none).
    """

    time_limit: float | None = None
    save_every_s: float | None = None
    reason: str | None = None
    """Why the run stops (``"SIGTERM"``, ``"time limit"``), once it is to."""
    started: float = field(default_factory=time.monotonic)
    _last_boundary: float | None = None
    _rollout_s: float = 0.0
    _save_s: float | None = None
    _saved_at: float = field(default_factory=time.monotonic)
    peers: Peers | None = None
    """The other processes of the run (MPI ranks), told of a stop here and asked for theirs at each boundary."""
    _told: bool = False

    @property
    def deadline(self) -> float | None:
        return None if self.time_limit is None else self.started + self.time_limit

    def request(self, reason: str, told: bool = False) -> None:
        """Stop at the next boundary (the first reason stays); ``told``: the other processes know already."""
        if self.reason is None:
            self.reason, self._told = reason, told

    @property
    def stopping(self) -> bool:
        """Whether the run is to stop now: asked to (here or, told through :attr:`peers`, elsewhere), or past the
        point where another rollout and a save fit before the time limit."""
        if self.reason is None and self.deadline is not None:
            reserve = self._rollout_s + (SAVE_RESERVE_S if self._save_s is None else 2 * self._save_s + 0.5)
            if time.monotonic() + reserve >= self.deadline:
                self.request(f"its time limit of {self.time_limit:g} s")
        if self.peers is not None:
            if self.reason is None:
                self.reason = self.peers.poll()
                self._told = self.reason is not None  # the one that stopped told every process
            elif not self._told:
                self._told = True
                self.peers.tell(self.reason)
        return self.reason is not None

    def due(self) -> bool:
        """At a member's rollout boundary: whether it stops here, for good (:attr:`stopping`) or to be saved and
        go on (the periodic save, never before a rollout has been trained since the member began or was saved).
        Measures the rollouts between two boundaries for the time limit's reserve."""
        now = time.monotonic()
        first = self._last_boundary is None
        if not first:
            self._rollout_s = max(self._rollout_s, now - self._last_boundary)  # type: ignore[operator]
        self._last_boundary = now
        if self.stopping:
            return True
        return not first and bool(self.save_every_s) and now - self._saved_at >= self.save_every_s  # type: ignore

    def member_started(self) -> None:
        """A member begins (or goes on with) its round: the time since the last boundary is not a rollout's."""
        self._last_boundary = None

    def saved(self, seconds: float) -> None:
        """A round in progress was saved, in ``seconds``: the next periodic save counts from now."""
        self._save_s = max(self._save_s or 0.0, seconds)
        self._saved_at = time.monotonic()
        self._last_boundary = None  # the save's time is no rollout's

    @contextlib.contextmanager
    def on_signals(self) -> Iterator[StopClock]:
        """Route :data:`SIGNALS` to :meth:`request` while the block runs (in the main thread; elsewhere nothing
        is routed). A second SIGINT or SIGTERM raises KeyboardInterrupt: the user will not wait for a rollout."""
        def handler(signum: int, frame: Any) -> None:
            name = signal.Signals(signum).name
            if self.reason is not None and name != "SIGUSR1":
                raise KeyboardInterrupt
            self.request(name)

        previous = {}
        try:
            for name in SIGNALS:
                previous[name] = signal.signal(getattr(signal, name), handler)
        except ValueError:  # not the main thread: the caller's handlers stay
            pass
        try:
            yield self
        finally:
            for name, old in previous.items():
                signal.signal(getattr(signal, name), old)
