"""The synchronous runner: every member in this process, one after another, then one decide step.

The round loop itself is :class:`~pbx.runners.loop.RoundLoop`; this module is
its :class:`LocalExecutor`: members are objects in this process, checkpoints
are files in the run folder, and an exploit loads the donor's file.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from pbx.config import RunConfig
from pbx.errors import UsageError
from pbx.history import History
from pbx.members import Diverged, Member, MemberContext
from pbx.run_dir import RunDir
from pbx.runners.common import finite_or_nan, member_seed
from pbx.runners.loop import Executor, RoundLoop, Trained
from pbx.space import Config
from pbx.strategies import Decision


class LocalExecutor(Executor):
    """Members ``indices`` of the population as objects in this process, checkpointed into ``run_dir``."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, indices: Sequence[int] | None = None) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.indices = list(range(cfg.run.pop_size)) if indices is None else list(indices)
        self.members: dict[int, Member] = {}

    def build(self, configs: Sequence[Config]) -> None:
        for i in self.indices:
            context = MemberContext(env=self.cfg.run.env, index=i, seed=member_seed(self.cfg.run.seed, i),
                                    device=self.cfg.run.device, log_dir=self.run_dir.tb / f"member_{i}")
            self.members[i] = self.cfg.member_cls(context, self.cfg.member, configs[i])

    def restore(self, round_: int, history: History) -> None:
        steps = dict(zip(history.round(round_)["member"], history.round(round_)["steps"]))
        for i, member in self.members.items():
            path = self.run_dir.checkpoint(i, round_)
            if not path.is_file():
                raise UsageError(f"{path}: missing, but history.csv says round {round_} finished; "
                                 f"the run cannot continue from this folder (start a new run)")
            member.load(path, own=True)
            if member.steps != steps[i]:
                raise UsageError(f"{path}: holds {member.steps:,} steps but history.csv says member {i} had "
                                 f"{steps[i]:,} after round {round_}: the folder is out of step (start a new run)")

    def train_round(self, round_: int, steps: int, test_seed: int | None,
                    advance: Callable[[int], None]) -> list[Trained]:
        return [self._train_one(i, member, round_, steps, test_seed, advance) for i, member in self.members.items()]

    def _train_one(self, i: int, member: Member, round_: int, steps: int, test_seed: int | None,
                   advance: Callable[[int], None]) -> Trained:
        before = member.steps
        try:
            score, note = finite_or_nan(member.train(steps)), ""
            if math.isnan(score):
                note = member.score_note()
        except Diverged as err:
            # The member put its last good learner state back; a NaN score gets it replaced by a donor.
            score, note = float("nan"), f"diverged ({err})"
        advance(member.steps - before)
        test_score = finite_or_nan(member.evaluate(test_seed)) if test_seed is not None else float("nan")
        member.save(self.run_dir.checkpoint(i, round_))
        return Trained(member=i, steps=member.steps, score=score, test_score=test_score, config=member.config,
                       note=note)

    def apply(self, decisions: Sequence[Decision], round_: int) -> None:
        for d in decisions:
            if d.member not in self.members:
                continue
            member = self.members[d.member]
            if d.copies:
                member.load(self.run_dir.checkpoint(d.donor, round_), own=False)
            if d.copies or d.explored:
                member.apply(d.config)

    def close(self) -> None:
        for member in self.members.values():
            member.close()


class SyncRunner(RoundLoop):
    """The round loop with every member in this process."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir) -> None:
        super().__init__(cfg, run_dir, LocalExecutor(cfg, run_dir))
