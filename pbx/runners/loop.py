"""The round loop, written once: train, record, decide, apply, prune, and resume.

Every runner runs this loop; they differ only in their :class:`Executor`, which
says where members train and how a checkpoint travels (the synchronous runner:
every member in this process, files on disk; the MPI runner: members spread
over ranks, checkpoint bytes sent between them), as SB3's ``DummyVecEnv`` and
``SubprocVecEnv`` differ only in how a step is carried out.

Per round ``r``: the executor trains each member ``round_steps(r)`` steps,
evaluates it when due, and saves it durably; the loop writes the round's rows to
``history.csv`` (fsynced: from here on a kill loses nothing), deletes the other
rounds' checkpoints, asks the strategy for decisions with the round's generator
and has the executor apply them.

Resume replays exactly that: restore every member from the last finished round's
own checkpoints and recompute that round's decisions (their generator depends on
the seed and round only), so a killed-and-resumed run ends with the history of
an uninterrupted one.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Sequence

from pbx.config import RunConfig
from pbx.history import History, Row
from pbx.run_dir import RunDir
from pbx.runners.common import RunRecorder, eval_seed, initial_configs, round_rng
from pbx.space import Config
from pbx.strategies import Decision, Strategy


@dataclass(frozen=True)
class Trained:
    """What the executor reports of one member after a round (the loop adds lineage and wall time)."""

    member: int
    steps: int
    score: float
    test_score: float
    config: Config
    note: str = ""
    """Why ``score`` is NaN (no episode to score, diverged), for the round line."""


class Executor(ABC):
    """Where members live and train: the one part that differs between runners."""

    @abstractmethod
    def build(self, configs: Sequence[Config]) -> None:
        """Create the members (the executor's share of them) with their starting configs."""

    @abstractmethod
    def restore(self, round_: int, history: History) -> None:
        """Load every member from its own checkpoint of ``round_``; a missing, unreadable or
        out-of-step file is a :class:`~pbx.errors.UsageError` naming it."""

    @abstractmethod
    def train_round(self, round_: int, steps: int, test_seed: int | None,
                    advance: Callable[[int], None]) -> list[Trained]:
        """Train, score, evaluate (with ``test_seed``, when not None) and durably save every member.

        ``advance(steps)`` reports progress as members finish. Returns one entry per
        member of the whole population, in member order.
        """

    @abstractmethod
    def apply(self, decisions: Sequence[Decision], round_: int) -> None:
        """Carry out the decisions taken after ``round_``: copy donors' checkpoints, apply configs."""

    @abstractmethod
    def close(self) -> None:
        """Release the members."""


class RoundLoop:
    """Runs a population to its budget (or resumes it) through an :class:`Executor`."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, executor: Executor) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.executor = executor
        self.strategy: Strategy = cfg.build_strategy()
        # (parent, explored) of each member for its next row: set by the last decisions.
        self.lineage: list[tuple[int, bool]] = [(i, False) for i in range(cfg.run.pop_size)]

    def run(self) -> History:
        """Train from the start or from the last finished round in the run folder; returns the history."""
        cfg = self.cfg
        recorder = RunRecorder(cfg, self.run_dir)
        try:
            first = recorder.history.last_round + 1
            if first >= cfg.run.rounds:
                return recorder.history  # finished already: nothing to build
            self.executor.build(initial_configs(self.strategy, cfg))
            if first > 0:
                self._restore(recorder, first - 1)
            # wall_s keeps counting across a resume: it is time spent on the run, not since this process began.
            offset = float(recorder.history.frame["wall_s"].max()) if first > 0 else 0.0
            start = time.perf_counter() - offset
            for r in range(first, cfg.run.rounds):
                trained = self.executor.train_round(r, cfg.round_steps(r), self._test_seed(r),
                                                    recorder.console.advance)
                history = recorder.round_done(self._rows(r, trained, time.perf_counter() - start))
                self.run_dir.prune_checkpoints(keep_round=r)
                decisions = self._decide(history, r) if r + 1 < cfg.run.rounds else []
                recorder.decided(r, decisions, {t.member: t.note for t in trained if t.note})
                self._apply(decisions, r)
            return recorder.history
        finally:
            recorder.close()
            self.executor.close()

    def _test_seed(self, r: int) -> int | None:
        """The round's shared evaluation seed when the test score is due (every ``eval_every`` and the last round)."""
        due = (r + 1) % self.cfg.run.eval_every == 0 or r + 1 == self.cfg.run.rounds
        return eval_seed(self.cfg.run.seed, r) if due else None

    def _restore(self, recorder: RunRecorder, last: int) -> None:
        self.run_dir.prune_checkpoints(keep_round=last)
        self.executor.restore(last, recorder.history)
        if last + 1 < self.cfg.run.rounds:
            decisions = self._decide(recorder.history, last)
            recorder.replayed(last, decisions)
            self._apply(decisions, last)

    def _rows(self, r: int, trained: Sequence[Trained], wall_s: float) -> list[Row]:
        rows = []
        for t in trained:
            parent, explored = self.lineage[t.member]
            rows.append(Row(member=t.member, round=r, steps=t.steps, wall_s=wall_s, score=t.score,
                            test_score=t.test_score, parent=parent, explored=explored, config=t.config))
        return rows

    def _decide(self, history: History, r: int) -> list[Decision]:
        return self.strategy.decide(history, self.cfg.space, round_rng(self.cfg.run.seed, r))

    def _apply(self, decisions: Sequence[Decision], r: int) -> None:
        self.executor.apply(decisions, r)
        self.lineage = [(i, False) for i in range(self.cfg.run.pop_size)]
        for d in decisions:
            self.lineage[d.member] = (d.donor, d.explored)
