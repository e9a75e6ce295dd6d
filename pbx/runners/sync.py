"""The synchronous runner: every member in this process, one after another, then one decide step.

The round loop itself is :class:`~pbx.runners.loop.RoundLoop`; this module is
its :class:`LocalExecutor`: members are objects in this process, checkpoints
are files in the run folder, and an exploit loads the donor's file.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence

from pbx.config import RunConfig
from pbx.errors import UsageError
from pbx.history import RESULT_ROLE
from pbx.members import Diverged, Member, MemberContext, Stopped
from pbx.run_dir import RunDir
from pbx.runners.common import finite_or_nan, member_seed
from pbx.runners.loop import Executor, RoundLoop, Trained
from pbx.runners.partial import done_record, read_record, start_score_from, trained_from, write_record
from pbx.runners.stopping import RunStopped, StopClock, stop_message
from pbx.space import Config
from pbx.strategies import Decision


class LocalExecutor(Executor):
    """Members ``indices`` of the population as objects in this process, checkpointed into ``run_dir``.

    ``local_rank``: this process's index among the processes on its machine (members
    that use a GPU take GPU ``local_rank`` modulo the machine's count).
    """

    def __init__(self, cfg: RunConfig, run_dir: RunDir, indices: Sequence[int] | None = None,
                 local_rank: int = 0, clock: StopClock | None = None) -> None:
        self.cfg = cfg
        self.clock = clock if clock is not None else StopClock()
        """When the members stop inside a round (:mod:`pbx.runners.stopping`), saving it every
        ``checkpoint_minutes`` on the way."""
        self.clock.save_every_s = 60 * cfg.run.checkpoint_minutes
        self.run_dir = run_dir
        self.indices = list(range(cfg.most_members)) if indices is None else list(indices)
        """The members this process trains or trained (a first population's extra members stay, for pruning)."""
        self.local_rank = local_rank
        self.members: dict[int, Member] = {}
        self.tested = {i for i, role in enumerate(cfg.roles()) if role == RESULT_ROLE}
        """The members whose test score is a result (FIRE's parent sub-populations and evaluators' never is)."""
        self.current: int | None = None
        """The member being built, trained, saved or loaded (an error names it)."""

    def build(self, configs: Mapping[int, Config]) -> None:
        for i in self.indices:
            if i in configs:
                self._build(i, configs[i])
        self.current = None

    def _build(self, i: int, config: Config) -> Member:
        """Member ``i``, fresh, with ``config`` (its seed and folders the same whenever it is built)."""
        self.current = i
        context = MemberContext(env=self.cfg.run.env, index=i, seed=member_seed(self.cfg.run.seed, i),
                                device=self.cfg.run.device, log_dir=self.run_dir.tb / f"member_{i}",
                                local_rank=self.local_rank, env_settings=self.cfg.env_settings)
        self.members[i] = self.cfg.member_cls(context, self.cfg.member, config)
        return self.members[i]

    @property
    def owned(self) -> list[int]:
        return self.indices

    def retain(self, members: Collection[int]) -> None:
        for i in [i for i in self.members if i not in members]:
            self.members.pop(i).close()

    def restore(self, round_: int, steps: Mapping[int, int]) -> None:
        for i, member in self.members.items():
            self.current = i
            path = self.run_dir.checkpoint(i, round_)
            if not path.is_file():
                raise UsageError(f"{path}: missing, but history.csv says round {round_} finished; "
                                 f"the run cannot continue from this folder (start a new run)")
            member.load(path, own=True)
            if member.steps != steps[i]:
                raise UsageError(f"{path}: holds {member.steps:,} steps but history.csv says member {i} had "
                                 f"{steps[i]:,} after round {round_}: the folder is out of step (start a new run)")
        self.current = None

    def train_round(self, round_: int, until: int, test_seed: int | None, start_seed: int | None,
                    advance: Callable[[int], None]) -> list[Trained]:
        through, inside = self.train_members(round_, until, test_seed, start_seed, advance)
        if self.clock.reason is not None and len(through) < len(self.members):
            self.keep_through(round_, through)
            raise RunStopped(stop_message(self.clock.reason, round_, [t.member for t in through], inside,
                                          len(self.members)), self.run_dir.path)
        return through

    def train_members(self, round_: int, until: int, test_seed: int | None, start_seed: int | None,
                      advance: Callable[[int], None]) -> tuple[list[Trained], dict[int, int]]:
        """Train this process's members through the round, or as far as the run's clock lets them
        (:mod:`pbx.runners.stopping`); the reports of those through it and the steps of each member stopped inside
        it (saved there: :mod:`pbx.runners.partial`). A member not begun when the clock stops appears in neither.
        The caller keeps the reports of a round that stops (:meth:`keep_through`)."""
        through: list[Trained] = []
        inside: dict[int, int] = {}
        for i, member in self.members.items():
            trained = self._train_one(i, member, round_, until, test_seed, start_seed, advance, through)
            if trained is not None:
                through.append(trained)
            elif self.run_dir.part(i, round_).is_file():
                inside[i] = member.steps
        self.current = None
        return through, inside

    def _train_one(self, i: int, member: Member, round_: int, until: int, test_seed: int | None,
                   start_seed: int | None, advance: Callable[[int], None], through: Sequence[Trained]) -> Trained | None:
        """Member ``i``'s round: taken from disk where a stopped run had it through (``done.json``), continued where
        it was stopped inside it (``part.ckpt``), else trained; None where the clock stopped it first."""
        self.current, before = i, member.steps
        done = self.run_dir.done_record(i, round_)
        if done.is_file():
            member.load(self.run_dir.checkpoint(i, round_), own=True)
            advance(member.steps - before)
            return trained_from(read_record(done), done)
        part = self.run_dir.part(i, round_)
        if part.is_file():
            member.load(part, own=True)
            start_score = start_score_from(read_record(self.run_dir.part_record(i, round_)), part)
            before = member.steps
        elif self.clock.stopping:
            return None
        else:
            start_score = finite_or_nan(member.score_state(start_seed)) if start_seed is not None else float("nan")
        # The steps to the round's planned end in whole rollouts, at least one; none for a member already at or
        # past it (a rollout longer than t_ready, or a donor's steps), which skips the round (RunConfig.steps_due).
        steps = self.cfg.steps_due(member.steps, until, member.config)
        skipped = steps == 0
        try:
            if skipped:
                # Its state is the one scored in the round before: the loop carries that score (RoundLoop._rows).
                score, note, diverged, curve = float("nan"), _skip_note(member.steps, until), False, ()
            else:
                raw = self._train(i, member, round_, steps, start_score, through)
                if raw is None:
                    return None
                score, note, diverged = finite_or_nan(raw), "", False
                curve = tuple((int(at), float(value)) for at, value in member.curve() if math.isfinite(value))
                if math.isnan(score):
                    note = member.score_note()
            score100 = finite_or_nan(member.recent_score())
        except Diverged as err:
            # The member put its last good learner state back; a NaN score gets it replaced by a donor.
            score, note, curve, diverged = float("nan"), f"diverged ({err})", (), True
            score100 = float("nan")
        advance(member.steps - before)
        # A member that skipped is tested and saved as every member is: the round's test compares them all on the
        # same levels, and the round's checkpoints are what exploits copy and a resume starts from.
        due = test_seed is not None and i in self.tested
        test_score = finite_or_nan(member.evaluate(test_seed)) if due else float("nan")
        member.save(self.run_dir.checkpoint(i, round_))
        return Trained(member=i, steps=member.steps, score=score, test_score=test_score, config=member.config,
                       note=note, diverged=diverged, curve=curve, score100=score100, skipped=skipped,
                       start_score=start_score)

    def _train(self, i: int, member: Member, round_: int, steps: int, start_score: float,
               through: Sequence[Trained]) -> float | None:
        """``member.train(steps)``, saved inside the round wherever the clock says (:class:`Stopped`): to stop
        (None), or to bound what a kill loses and go on (the members through the round are kept with it)."""
        if not member.stops_inside:
            return member.train(steps)
        self.clock.member_started()
        while True:
            try:
                return member.train(steps, stop=self.clock.due)  # type: ignore[call-arg]
            except Stopped:
                began = time.monotonic()
                write_record(self.run_dir.part_record(i, round_), {"start_score": start_score, "steps": member.steps})
                member.save(self.run_dir.part(i, round_))
                self.keep_through(round_, through)
                self.clock.saved(time.monotonic() - began)
                if self.clock.stopping:
                    return None

    def keep_through(self, round_: int, through: Sequence[Trained]) -> None:
        """Write the report of each member through the round that has none on disk yet (``done.json``)."""
        for trained in through:
            path = self.run_dir.done_record(trained.member, round_)
            if not path.is_file():
                write_record(path, done_record(trained))

    def apply(self, decisions: Sequence[Decision], round_: int) -> None:
        self.apply_from(decisions, lambda donor: self.run_dir.checkpoint(donor, round_))

    def apply_from(self, decisions: Sequence[Decision], donor_file: Callable[[int], Path]) -> None:
        """Carry out the decisions of this process's members, reading each donor's checkpoint from
        ``donor_file(donor)``."""
        for d in decisions:
            if d.member not in self.indices:
                continue
            # a restart's candidate past pop_size is built for the round, then takes its donor's state, and with no
            # experience of its own, the donor's (an off-policy member's replay buffer: Member.load_experience)
            built = d.member not in self.members
            member = self._build(d.member, d.config) if built else self.members[d.member]
            self.current = d.member
            if d.copies:
                member.load(donor_file(d.donor), own=False)
                if built:
                    member.load_experience(donor_file(d.donor))
            if d.reset is not None:
                # the keyword only when set: a member written to the documented four-argument form still restarts
                extra = {"clear_optimizer": True} if d.reset.clear_optimizer else {}
                member.reset_weights(d.reset.kind, d.reset.seed, d.reset.shrink, d.reset.perturb, **extra)
            if d.changes:
                member.apply(d.config)
        self.current = None

    def close(self) -> None:
        for member in self.members.values():
            member.close()


def _skip_note(steps: int, until: int) -> str:
    """Why a member did not train in a round, for the round line: it was at or past the round's planned end."""
    return f"skipped the round: at {steps:,} steps, at or past its planned end ({until:,})"


class SyncRunner(RoundLoop):
    """The round loop with every member in this process (``clock``: when it stops inside a round)."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, write_config: bool = False,
                 clock: StopClock | None = None) -> None:
        super().__init__(cfg, run_dir, LocalExecutor(cfg, run_dir, clock=clock), write_config)
