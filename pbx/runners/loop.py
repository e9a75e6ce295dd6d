"""The round loop, written once: train, record, decide, apply, prune, and resume.

Every runner runs this loop; they differ only in their :class:`Executor`, which
says where members train and how a checkpoint travels (the synchronous runner:
every member in this process, files on disk; the MPI runner: members spread
over ranks, checkpoint bytes sent between them), as SB3's ``DummyVecEnv`` and
``SubprocVecEnv`` differ only in how a step is carried out.

Per round ``r``: the executor trains each member to the round's planned end (``round_end(r)`` steps in all,
in whole rollouts; a member already at or past it skips the round: ``RunConfig.steps_due``),
evaluates it when due, and saves it durably; the loop writes the round's curves to ``curves.csv`` and its rows
to ``history.csv`` (fsynced: from here on a kill loses nothing), deletes the other
rounds' checkpoints, asks the strategy for decisions with the round's generator
and has the executor apply them.

Resume replays exactly that: restore every member from the last finished round's
own checkpoints and recompute that round's decisions (their generator depends on
the seed and round only), so a killed-and-resumed run ends with the history of
an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ContextManager, Mapping, Sequence, TypeVar

from pbx.config import RunConfig
from pbx.errors import UsageError
from pbx.history import History, Row
from pbx.run_dir import RunDir
from pbx.runners.common import RunRecorder, eval_seed, initial_configs, round_rng, torch_state_kept
from pbx.space import Config
from pbx.strategies import Decision, Strategy

T = TypeVar("T")


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
    diverged: bool = False
    """Whether the member's numbers went non-finite (its score stays NaN, the worst; otherwise a NaN score is
    carried over from the round before: :meth:`RoundLoop._rows`)."""
    curve: tuple[tuple[int, float], ...] = ()
    """The scores taken within the round, ``(steps, score)`` (:meth:`pbx.members.Member.curve`), finite ones."""
    score100: float = float("nan")
    """The running mean of the member's last 100 training episodes (:meth:`pbx.members.Member.recent_score`)."""
    skipped: bool = False
    """Whether the member did not train in the round, being already at or past its planned end
    (:meth:`pbx.config.RunConfig.steps_due`): its score is carried over from the round before, whatever it was."""


class RunFailed(Exception):
    """The run failed on one of its processes: raised on every process of a run whose failures are contained
    (a sweep's run under MPI), so that all of them leave the run together and can take the next one."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
        """The exit code the failure gives: 2 for bad input or a damaged run folder, 1 for anything else."""


class Executor(ABC):
    """Where members live and train: the one part that differs between runners.

    Every process of a run runs the loop with its executor. One of them, the
    *coordinator*, also records rounds and takes the decisions; :meth:`share` hands
    its values to the others (the synchronous runner has one process, which is
    the coordinator, and sharing is the identity). Between two exchanges each
    process works on its own; :meth:`together` is where they learn of each other's
    failures, so none is left waiting for a process that has given up.
    """

    coordinator: bool = True
    """Whether this process records the run and takes the decisions."""

    @property
    @abstractmethod
    def owned(self) -> list[int]:
        """The members this process trains (and whose checkpoint files it writes and prunes)."""

    def share(self, compute: Callable[[], T]) -> T:
        """``compute()`` run on the coordinator (only), its value on every process."""
        return compute()

    def together(self) -> ContextManager[None]:
        """A block every process runs on its own, holding no exchange: an exception in it on one process is,
        when the run contains its failures, raised as :class:`RunFailed` on every process once all have
        finished the block. One process: the block as it is."""
        return contextlib.nullcontext()

    @abstractmethod
    def build(self, configs: Sequence[Config]) -> None:
        """Create this process's members with their starting configs (``configs``: the whole population's)."""

    @abstractmethod
    def restore(self, round_: int, steps: Mapping[int, int]) -> None:
        """Load this process's members from their own checkpoints of ``round_``; a missing, unreadable or
        out-of-step file (``steps``: each member's steps after ``round_`` by the history) is a
        :class:`~pbx.errors.UsageError` naming it."""

    @abstractmethod
    def train_round(self, round_: int, until: int, test_seed: int | None,
                    advance: Callable[[int], None]) -> list[Trained]:
        """Train each of this process's members to ``until`` steps in all (the round's planned end; a member
        already at or past it does not train: :meth:`pbx.config.RunConfig.steps_due`), then score, evaluate
        (with ``test_seed``, when not None) and durably save it.

        ``advance(steps)`` reports progress as members finish. Returns, on the
        coordinator, one entry per member of the whole population in member order
        (every member's checkpoint is then on disk); elsewhere an empty list.
        """

    @abstractmethod
    def apply(self, decisions: Sequence[Decision], round_: int) -> None:
        """Carry out the decisions taken after ``round_``: copy donors' checkpoints, apply configs."""

    @abstractmethod
    def close(self) -> None:
        """Release the members."""


class RoundLoop:
    """Runs a population to its budget (or resumes it) through an :class:`Executor`."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, executor: Executor, write_config: bool = False) -> None:
        """``write_config``: write ``cfg`` to the folder's config.yaml once the folder has been read and its
        members built or restored, before the first round trains: a resume that the folder refuses (a damaged
        checkpoint, a history that lost rounds) leaves the stored config as it was."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.executor = executor
        self.write_config = write_config
        self.strategy: Strategy = cfg.build_strategy()
        # (parent, explored) of each member for its next row: set by the last decisions.
        self.lineage: list[tuple[int, bool]] = [(i, False) for i in range(cfg.run.pop_size)]

    def run(self) -> History | None:
        """Train from the start or from the last finished round in the run folder.

        Returns the history on the coordinator, None on the other processes. The
        process's global torch state is as it was before (:func:`torch_state_kept`), so
        the next run of an in-process sweep starts clean.
        """
        with torch_state_kept():
            return self._run()

    def _run(self) -> History | None:
        cfg, executor = self.cfg, self.executor
        recorder: RunRecorder | None = None

        def start() -> tuple[int, dict[int, int], float]:
            nonlocal recorder
            recorder = RunRecorder(cfg, self.run_dir)
            return self._start(recorder)

        try:
            first, steps, offset = executor.share(start)  # the coordinator's alone: it reads the history
            if first >= cfg.run.rounds:
                return recorder.history if recorder is not None else None  # finished already: nothing to build
            executor.build(initial_configs(self.strategy, cfg))
            if first > 0:
                self._restore(recorder, first - 1, steps)
            executor.share(self._write_config)  # every rank takes part; only the coordinator writes
            start_time = time.perf_counter() - offset
            for r in range(first, cfg.run.rounds):
                advance = recorder.console.advance if recorder is not None else _ignore
                trained = executor.train_round(r, cfg.round_end(r), self._test_seed(r), advance)

                # Shared only once the round is in the history: from then on its checkpoints are
                # what a resume starts from, and the older ones can go.
                wall_s = time.perf_counter() - start_time
                decisions = executor.share(lambda: self._record(recorder, r, trained, wall_s))
                with executor.together():
                    self.run_dir.prune_checkpoints(keep_round=r, members=executor.owned)
                self._apply(decisions, r)
            return recorder.history if recorder is not None else None
        finally:
            if recorder is not None:
                recorder.close()
            executor.close()

    def _start(self, recorder: RunRecorder) -> tuple[int, dict[int, int], float]:
        """The first round to train, each member's steps after the round before it, and the wall time so far
        (``wall_s`` keeps counting across a resume: it is time spent on the run, not since this process began)."""
        history = recorder.history
        first = history.last_round + 1
        newest = self.run_dir.newest_checkpoint_round()
        if newest is not None and newest > first:
            kept = f"its last whole round is {first - 1}" if first else "it holds no whole round"
            raise UsageError(f"{self.run_dir.history}: {kept}, but checkpoints/ holds round {newest}'s: the history "
                             f"has lost finished rounds (restore it, or start a new run)")
        if first == 0:
            return first, {}, 0.0
        rows = history.round(first - 1)
        return first, dict(zip(map(int, rows["member"]), map(int, rows["steps"]))), float(history.frame["wall_s"].max())

    def _write_config(self) -> None:
        if self.write_config:
            self.cfg.write(self.run_dir.config)

    def _test_seed(self, r: int) -> int | None:
        """The round's shared evaluation seed when the test score is due (every ``eval_every`` and the last round)."""
        due = (r + 1) % self.cfg.run.eval_every == 0 or r + 1 == self.cfg.run.rounds
        return eval_seed(self.cfg.run.seed, r) if due else None

    def _restore(self, recorder: RunRecorder | None, last: int, steps: Mapping[int, int]) -> None:
        with self.executor.together():
            self.run_dir.prune_checkpoints(keep_round=last, members=self.executor.owned)
        self.executor.restore(last, steps)
        if last + 1 < self.cfg.run.rounds:
            self._apply(self.executor.share(lambda: self._redecide(recorder, last)), last)

    def _record(self, recorder: RunRecorder | None, r: int, trained: Sequence[Trained],
                wall_s: float) -> list[Decision]:
        """Write round ``r`` to the history and print its line; the decisions taken after it (coordinator only)."""
        assert recorder is not None
        history = recorder.round_done(self._rows(recorder.history, r, trained, wall_s))
        decisions = self._decide(history, r) if r + 1 < self.cfg.run.rounds else []
        notes = {t.member: t.note for t in trained if t.note}
        for row in history.round(r).itertuples():
            if row.carried:
                notes[row.member] = "; ".join(filter(None, (notes.get(row.member), "its last score carried")))
        recorder.decided(r, decisions, notes)
        return decisions

    def _redecide(self, recorder: RunRecorder | None, last: int) -> list[Decision]:
        """The decisions taken after round ``last``, again, for a resume (coordinator only)."""
        assert recorder is not None
        decisions = self._decide(recorder.history, last)
        recorder.record_decisions(last, decisions)
        return decisions

    def _rows(self, history: History, r: int, trained: Sequence[Trained], wall_s: float) -> list[Row]:
        """The round's history rows. A member that scored NaN without diverging (no training episode both
        started and ended in the round: a policy whose episodes outlast it) carries the score its state had,
        its parent's in the round before, so that a member too good to finish an episode is not taken for the
        worst; a member that diverged keeps NaN, the worst. A member that skipped the round holds the very
        state that score was taken of, and carries it whatever it was (a NaN stays NaN); its row's steps, its
        parent's of the round before, tell the two kinds of carried row apart (:mod:`pbx.history`)."""
        before = history.round(r - 1).set_index("member")["score"] if r > 0 else None
        rows = []
        roles = self.cfg.roles()
        for t in trained:
            parent, explored = self.lineage[t.member]
            score, carried = t.score, False
            if t.skipped and before is not None:
                score, carried = float(before[parent]), True
            elif math.isnan(score) and not t.diverged and before is not None and math.isfinite(before[parent]):
                score, carried = float(before[parent]), True
            rows.append(Row(member=t.member, round=r, steps=t.steps, wall_s=wall_s, score=score,
                            test_score=t.test_score, parent=parent, explored=explored, config=t.config,
                            role=roles[t.member], carried=carried, curve=t.curve, score100=t.score100))
        return rows

    def _decide(self, history: History, r: int) -> list[Decision]:
        """The strategy's decisions, each new config moved to one the members can train (:meth:`Member.feasible`),
        the move added to its operations."""
        cfg = self.cfg
        decisions = []
        for d in self.strategy.decide(history, cfg.space, round_rng(cfg.run.seed, r)):
            if d.copies or d.explored:
                config, moves = cfg.member_cls.feasible(d.config, cfg.member, cfg.space)
                if moves:
                    d = dataclasses.replace(d, config=config, ops=(*d.ops, *moves))
            decisions.append(d)
        return decisions

    def _apply(self, decisions: Sequence[Decision], r: int) -> None:
        self.executor.apply(decisions, r)
        self.lineage = [(i, False) for i in range(self.cfg.run.pop_size)]
        for d in decisions:
            self.lineage[d.member] = (d.donor, d.explored)


def _ignore(steps: int) -> None:
    """Progress of a process that draws no bar."""
