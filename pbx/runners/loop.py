"""The round loop, written once: train, record, decide, apply, prune, and resume.

Every runner runs this loop; they differ only in their :class:`Executor`, which
says where members train and how a checkpoint travels (the synchronous runner:
every member in this process, files on disk; the MPI runner: members spread
over ranks, checkpoint bytes sent between them), as SB3's ``DummyVecEnv`` and
``SubprocVecEnv`` differ only in how a step is carried out.

Per round ``r``: the executor trains each member to the round's planned end (:mod:`pbx.plan`: ``plan.trained_end(r)``
steps in all, in whole rollouts; a member already at or past it skips the round: ``RunConfig.steps_due``),
evaluates it when due, and saves it durably; the loop writes the round's curves to ``curves.csv`` and its rows
to ``history.csv`` (fsynced: from here on a kill loses nothing), deletes the other
rounds' checkpoints, asks the strategy for decisions with the round's generator
and has the executor apply them. The decisions say whether the next round
restarts the population, which may change its length (IPBT): the plan grows a
round at a time, and the run ends with the round that reaches ``max_budget``.
Before a restart re-makes the members, the generation's best member's checkpoint
is kept (``kept/``), as the reference BG-PBT and IPBT keep each generation's best
to answer with the best of them (``--member kept``). A strategy that starts more members than it keeps (:meth:`Strategy.initial_size`)
has them all train round 0; the decisions after it copy the kept ones into
members ``0 .. pop_size - 1``, and the executor drops the rest.

Resume replays exactly that: restore every member from the last finished round's
own checkpoints and recompute that round's decisions (their generator depends on
the seed and round only), so a killed-and-resumed run ends with the history of
an uninterrupted one. A run stopped inside a round (a signal, its time limit:
:mod:`pbx.runners.stopping`) left each member's part of that round on disk
(:mod:`pbx.runners.partial`); the executor takes it from there as the round trains.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Collection, ContextManager, Mapping, Sequence, TypeVar

from pbx.config import RunConfig
from pbx.errors import UsageError
from pbx.history import History, Row
from pbx.standings import best_rows
from pbx.plan import Plan
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
    start_score: float = float("nan")
    """The score of the state the member started the round from, taken before it trained, when the round asked
    for one (:meth:`pbx.members.Member.score_state`); NaN otherwise."""


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
        """The members this process trains or trained (and whose checkpoint files it writes and prunes)."""

    def share(self, compute: Callable[[], T]) -> T:
        """``compute()`` run on the coordinator (only), its value on every process."""
        return compute()

    def together(self) -> ContextManager[None]:
        """A block every process runs on its own, holding no exchange: an exception in it on one process is,
        when the run contains its failures, raised as :class:`RunFailed` on every process once all have
        finished the block. One process: the block as it is."""
        return contextlib.nullcontext()

    @abstractmethod
    def build(self, configs: Mapping[int, Config]) -> None:
        """Create this process's members among ``configs``' (a member id to its starting config: the first
        round's, or the members of the round a resume starts after)."""

    @abstractmethod
    def retain(self, members: Collection[int]) -> None:
        """Close this process's members not in ``members`` (the candidates a round 0 or a restart round trained
        past ``pop_size``, once cut); their checkpoint files go with the next prune (they stay in :attr:`owned`)."""

    @abstractmethod
    def restore(self, round_: int, steps: Mapping[int, int]) -> None:
        """Load this process's members from their own checkpoints of ``round_``; a missing, unreadable or
        out-of-step file (``steps``: each member's steps after ``round_`` by the history) is a
        :class:`~pbx.errors.UsageError` naming it."""

    @abstractmethod
    def train_round(self, round_: int, until: int, test_seed: int | None, start_seed: int | None,
                    advance: Callable[[int], None]) -> list[Trained]:
        """Score each of this process's members as it is (with ``start_seed``, when not None:
        :meth:`pbx.members.Member.score_state`), train it to ``until`` steps in all (the round's planned end; a
        member already at or past it does not train: :meth:`pbx.config.RunConfig.steps_due`), then score,
        evaluate (with ``test_seed``, when not None) and durably save it.

        ``advance(steps)`` reports progress as members finish. Returns, on the
        coordinator, one entry per member of the whole population in member order
        (every member's checkpoint is then on disk); elsewhere an empty list.
        """

    @abstractmethod
    def apply(self, decisions: Sequence[Decision], round_: int) -> None:
        """Carry out the decisions taken after ``round_``: build a member the decisions name that this process
        does not hold (a restart's candidate), copy donors' checkpoints (into a member so built, with the donor's
        experience: :meth:`pbx.members.Member.load_experience`), reset weights, apply configs."""

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
        # (parent, explored, restart) of each member for its next row: set by the last decisions.
        self.lineage: dict[int, tuple[int, bool, bool]] = {i: (i, False, False) for i in range(cfg.init_size)}
        self.plan: Plan = cfg.rules.plan()
        """The rounds planned so far (every process keeps its own, from the shared restart marks and decisions)."""

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

        def start() -> tuple[int, dict[int, int], float, list[bool]]:
            nonlocal recorder
            recorder = RunRecorder(cfg, self.run_dir)
            return self._start(recorder)

        try:
            # the coordinator's alone: it reads the history
            first, steps, offset, restarts = executor.share(start)
            self.plan = cfg.rules.plan(restarts)
            if self.plan.done:
                return recorder.history if recorder is not None else None  # finished already: nothing to build
            configs = initial_configs(self.strategy, cfg)
            # a resume builds the members of its last finished round (each then loads its own checkpoint)
            executor.build({i: configs[i] for i in (steps if first else range(len(configs)))})
            restart = self._restore(recorder, first - 1, steps) if first > 0 else False
            executor.share(self._write_config)  # every rank takes part; only the coordinator writes
            start_time = time.perf_counter() - offset
            r = first
            self.plan.add(restart)
            while True:
                if recorder is not None:
                    recorder.round_starts(r, self.plan.rounds_estimate())
                advance = recorder.console.advance if recorder is not None else _ignore
                trained = executor.train_round(r, self.plan.trained_end(r), self._test_seed(r),
                                               self._start_seed(r, restart), advance)

                # Shared only once the round is in the history: from then on its checkpoints are
                # what a resume starts from, and the older ones can go.
                wall_s = time.perf_counter() - start_time
                decisions, keep = executor.share(lambda: self._record(recorder, r, trained, wall_s))
                with executor.together():
                    self.run_dir.prune_checkpoints(keep_round=r, members=executor.owned)
                if self.plan.is_last(r):
                    return recorder.history if recorder is not None else None
                restart = self._apply(decisions, r, keep)
                r += 1
                self.plan.add(restart)
        finally:
            if recorder is not None:
                recorder.close()
            executor.close()

    def _start(self, recorder: RunRecorder) -> tuple[int, dict[int, int], float, list[bool]]:
        """The first round to train, each member's steps after the round before it, the wall time so far
        (``wall_s`` keeps counting across a resume: it is time spent on the run, not since this process began),
        and each finished round's restart mark (the plan so far)."""
        history = recorder.history
        first = history.last_round + 1
        newest = self.run_dir.newest_checkpoint_round()
        if newest is not None and newest > first:
            kept = f"its last whole round is {first - 1}" if first else "it holds no whole round"
            raise UsageError(f"{self.run_dir.history}: {kept}, but checkpoints/ holds round {newest}'s: the history "
                             f"has lost finished rounds (restore it, or start a new run)")
        if first == 0:
            return first, {}, 0.0, []
        rows = history.round(first - 1)
        restarts = [bool(history.round(r)["restart"].iloc[0]) for r in range(first)]
        return (first, dict(zip(map(int, rows["member"]), map(int, rows["steps"]))),
                float(history.frame["wall_s"].max()), restarts)

    def _write_config(self) -> None:
        if self.write_config:
            self.cfg.write(self.run_dir.config)

    def _test_seed(self, r: int) -> int | None:
        """The round's shared evaluation seed when the test score is due (every ``eval_every`` and the last round)."""
        due = (r + 1) % self.cfg.run.eval_every == 0 or self.plan.is_last(r)
        return eval_seed(self.cfg.run.seed, r) if due else None

    def _start_seed(self, r: int, restart: bool) -> int | None:
        """The seed each member's state is scored with before round ``r`` trains, or None: only a generation's
        first round (round 0, a restart round, ``restart``) of a strategy that asks (:meth:`Strategy.scores_start`)
        is scored, once per member, as the reference BG-PBT and IPBT evaluate each candidate before it trains.
        A resume that repeats the round scores the same states again with the same seed."""
        due = (r == 0 or restart) and self.strategy.scores_start()
        return eval_seed(self.cfg.run.seed, r) if due else None

    def _restore(self, recorder: RunRecorder | None, last: int, steps: Mapping[int, int]) -> bool:
        """Members back as they were after round ``last`` (not the run's last), that round's decisions taken
        again and applied; whether they restart the population."""
        with self.executor.together():
            # the round after it may be in progress: its members' files are where it goes on (pbx.runners.partial)
            self.run_dir.prune_checkpoints(keep_round=last, members=self.executor.owned, in_progress=True)
        self.executor.restore(last, steps)
        decisions, keep = self.executor.share(lambda: self._redecide(recorder, last))
        return self._apply(decisions, last, keep)

    def _record(self, recorder: RunRecorder | None, r: int, trained: Sequence[Trained],
                wall_s: float) -> tuple[list[Decision], int | None]:
        """Write round ``r`` to the history and print its line; the decisions taken after it and the member to
        keep (:func:`_kept`; coordinator only)."""
        assert recorder is not None
        history = recorder.round_done(self._rows(recorder.history, r, trained, wall_s))
        decisions = [] if self.plan.is_last(r) else self._decide(history, r)
        notes = {t.member: t.note for t in trained if t.note}
        for row in history.round(r).itertuples():
            if row.carried:
                notes[row.member] = "; ".join(filter(None, (notes.get(row.member), "its last score carried")))
        recorder.decided(r, decisions, notes, self.plan.rounds_estimate())
        return decisions, _kept(history, r, decisions)

    def _redecide(self, recorder: RunRecorder | None, last: int) -> tuple[list[Decision], int | None]:
        """The decisions taken after round ``last``, again, for a resume, and the member to keep (coordinator
        only)."""
        assert recorder is not None
        decisions = self._decide(recorder.history, last)
        recorder.record_decisions(last, decisions)
        return decisions, _kept(recorder.history, last, decisions)

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
            parent, explored, restart = self.lineage[t.member]
            score, carried = t.score, False
            if t.skipped and before is not None:
                score, carried = float(before[parent]), True
            elif math.isnan(score) and not t.diverged and before is not None and math.isfinite(before[parent]):
                score, carried = float(before[parent]), True
            rows.append(Row(member=t.member, round=r, steps=t.steps, wall_s=wall_s, score=score,
                            test_score=t.test_score, parent=parent, explored=explored, config=t.config,
                            role=roles[t.member], carried=carried, curve=t.curve, score100=t.score100,
                            restart=restart, start_score=t.start_score))
        return rows

    def _decide(self, history: History, r: int) -> list[Decision]:
        """The strategy's decisions, each new config moved to one the members can train (:meth:`Member.feasible`),
        the move added to its operations."""
        cfg = self.cfg
        decisions = []
        for d in self.strategy.decide(history, cfg.space, round_rng(cfg.run.seed, r)):
            if d.changes:
                config, moves = cfg.member_cls.feasible(d.config, cfg.member, cfg.space)
                if moves:
                    d = dataclasses.replace(d, config=config, ops=(*d.ops, *moves))
            decisions.append(d)
        return decisions

    def _apply(self, decisions: Sequence[Decision], r: int, keep: int | None) -> bool:
        """Keep member ``keep``'s checkpoint of round ``r`` (when not None) and carry out the decisions taken after
        the round; whether they restart the population."""
        if keep is not None:
            with self.executor.together():
                if keep in self.executor.owned:  # the process that wrote the file (on MPI, maybe another disk)
                    self.run_dir.keep(keep, r)
        self.executor.apply(decisions, r)
        # The decisions name every member of the next round: a larger population's cut (round 0, a restart)
        # drops the others; a restart's candidates past pop_size were built by the apply.
        self.executor.retain({d.member for d in decisions})
        restart = any(d.restart for d in decisions)
        self.lineage = {d.member: (d.donor, d.explored, restart) for d in decisions}
        return restart


def _kept(history: History, r: int, decisions: Sequence[Decision]) -> int | None:
    """The member whose checkpoint of round ``r`` outlives the prune: when the decisions after the round restart
    the population, the generation ends, and its best member on train score is kept, as the reference's BG-PBT
    and IPBT keep each generation's best to answer with the best of them (``--member kept``)."""
    if not any(d.restart for d in decisions):
        return None
    return int(best_rows(history.round(r)).iloc[0]["member"])


def _ignore(steps: int) -> None:
    """Progress of a process that draws no bar."""
