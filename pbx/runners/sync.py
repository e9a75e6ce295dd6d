"""The synchronous runner: every member in this process, one after another, then one decide step.

Per round: each member trains ``t_ready`` steps, is scored (train and test) and
checkpointed; the round's rows go into ``history.csv`` (fsynced: from here on a
kill loses nothing); then the strategy decides and the runner applies the
decisions (a recipient loads its donor's checkpoint and applies its new config).

Resume replays exactly that: load every member from the last finished round's
checkpoints and recompute that round's decisions (their generator depends on the
seed and round only), so a killed-and-resumed run ends with the history of an
uninterrupted one.
"""

from __future__ import annotations

import time

from pbx.config import RunConfig
from pbx.history import History, Row
from pbx.members import Member, MemberContext
from pbx.run_dir import RunDir
from pbx.runners.common import RunRecorder, initial_configs, member_seed, round_rng, round_steps
from pbx.strategies import Decision


class SyncRunner:
    def __init__(self, cfg: RunConfig, run_dir: RunDir) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.strategy = cfg.build_strategy()
        self.members: list[Member] = []
        # (parent, explored) of each member for the next row: set by the last decisions.
        self.lineage: list[tuple[int, bool]] = [(i, False) for i in range(cfg.run.pop_size)]

    def run(self) -> History:
        """Train from the start or from the last finished round in the run folder; returns the history."""
        recorder = RunRecorder(self.cfg, self.run_dir)
        try:
            self._build_members(recorder)
            first = recorder.history.last_round + 1
            if first > 0:
                self._restore(recorder, first - 1)
            # wall_s keeps counting across a resume: it is time spent on the run, not since this process began.
            offset = float(recorder.history.frame["wall_s"].max()) if first > 0 else 0.0
            start = time.perf_counter() - offset
            for r in range(first, self.cfg.run.rounds):
                history = recorder.round_done(self._train_round(r, start, recorder))
                self.run_dir.prune_checkpoints(keep_round=r)
                decisions = self._decide(history, r) if r + 1 < self.cfg.run.rounds else []
                recorder.decided(r, decisions)
                self._apply(decisions, r)
            return recorder.history
        finally:
            recorder.close()
            for m in self.members:
                m.close()

    def _build_members(self, recorder: RunRecorder) -> None:
        for i, config in enumerate(initial_configs(self.strategy, self.cfg)):
            context = MemberContext(env=self.cfg.run.env, index=i, seed=member_seed(self.cfg.run.seed, i),
                                    device=self.cfg.run.device, log_dir=recorder.member_log_dir(i))
            self.members.append(self.cfg.member_cls(context, self.cfg.member, config))

    def _restore(self, recorder: RunRecorder, last: int) -> None:
        self.run_dir.prune_checkpoints(keep_round=last)
        for i, member in enumerate(self.members):
            member.load(self.run_dir.checkpoint(i, last))
        if last + 1 < self.cfg.run.rounds:
            self._apply(self._decide(recorder.history, last), last)

    def _train_round(self, r: int, start: float, recorder: RunRecorder) -> list[Row]:
        rows = []
        for i, member in enumerate(self.members):
            before = member.steps
            score = member.train(round_steps(self.cfg, r))
            recorder.console.advance(member.steps - before)
            test_score = member.evaluate()
            member.save(self.run_dir.checkpoint(i, r))
            parent, explored = self.lineage[i]
            rows.append(Row(member=i, round=r, steps=member.steps, wall_s=time.perf_counter() - start,
                            score=score, test_score=test_score, parent=parent, explored=explored,
                            config=member.config))
        return rows

    def _decide(self, history: History, r: int) -> list[Decision]:
        return self.strategy.decide(history, self.cfg.space, round_rng(self.cfg.run.seed, r))

    def _apply(self, decisions: list[Decision], r: int) -> None:
        for d in decisions:
            member = self.members[d.member]
            if d.copies:
                member.load(self.run_dir.checkpoint(d.donor, r))
            if d.copies or d.explored:
                member.apply(d.config)
            self.lineage[d.member] = (d.donor, d.explored)
