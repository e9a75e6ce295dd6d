"""What every runner shares: seeds, the round's generator, and the record of a finished round.

Decisions for round ``r`` use a generator derived from ``(seed, r)`` alone, so a
resumed run, or the MPI runner's coordinator, makes exactly the decisions an
uninterrupted synchronous run makes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from pbx.config import RunConfig
from pbx.console import Console, round_line
from pbx.history import History, HistoryLog, Row
from pbx.run_dir import RunDir
from pbx.space import Categorical, Config
from pbx.strategies import Decision, Strategy
from pbx.tblog import ScalarWriter


def round_rng(seed: int, round_: int) -> np.random.Generator:
    """The generator for the decisions taken after ``round_`` (-1: the initial configs)."""
    return np.random.default_rng([seed, round_ + 1])


def member_seed(seed: int, member: int) -> int:
    """Each member's own seed: distinct across members, fixed by the run seed."""
    return int(np.random.SeedSequence([seed, member, 7919]).generate_state(1)[0])


def initial_configs(strategy: Strategy, cfg: RunConfig) -> list[Config]:
    """Each member's starting config, drawn with the run's pre-round generator."""
    return strategy.initial_configs(cfg.space, cfg.run.pop_size, round_rng(cfg.run.seed, -1))


def round_steps(cfg: RunConfig, round_: int) -> int:
    """Steps each member trains in ``round_`` (the last round takes the remainder of the budget)."""
    assert cfg.run.t_ready is not None and cfg.run.max_budget is not None
    return min(cfg.run.t_ready, cfg.run.max_budget - round_ * cfg.run.t_ready)


class RunRecorder:
    """Writes a finished round everywhere it goes: history (fsynced), TensorBoard, the terminal."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.log = HistoryLog(run_dir.history, cfg.space.names)
        done = int(self.log.history.frame.groupby("member")["steps"].max().sum()) if len(self.log.history) else 0
        assert cfg.run.max_budget is not None
        self.console = Console(cfg.run.pop_size * cfg.run.max_budget, done, desc=f"{cfg.run.env} {cfg.run.search}")
        self._writers: dict[str, ScalarWriter] = {}

    @property
    def history(self) -> History:
        return self.log.history

    def member_log_dir(self, member: int) -> Path:
        return self.run_dir.tb / f"member_{member}"

    def round_done(self, rows: Sequence[Row]) -> History:
        """Persist a finished round (the point after which a kill cannot lose it)."""
        history = self.log.append(rows)
        self._tensorboard(rows)
        best = max((r.score for r in rows if not math.isnan(r.score)), default=math.nan)
        self.console.best(best)
        return history

    def decided(self, round_: int, decisions: Sequence[Decision]) -> None:
        """Print the round's line, with the exploit/explore decisions taken after it."""
        self.console.line(round_line(round_, self.cfg.run.rounds, self.history.round(round_), decisions))

    def close(self) -> None:
        self.console.close()
        for w in self._writers.values():
            w.close()

    def _writer(self, name: str) -> ScalarWriter:
        if name not in self._writers:
            self._writers[name] = ScalarWriter(self.run_dir.tb / name)
        return self._writers[name]

    def _tensorboard(self, rows: Sequence[Row]) -> None:
        for row in rows:
            values = {"pbx/score": row.score, "pbx/test_score": row.test_score}
            for name, value in row.config.items():
                param = self.cfg.space.params[name]
                # TensorBoard plots numbers only: a categorical value is logged as its choice index.
                values[f"hp/{name}"] = param.choices.index(value) if isinstance(param, Categorical) else float(value)
            writer = self._writer(f"member_{row.member}")
            writer.scalars(values, row.steps)
            writer.flush()
        scores = [r.score for r in rows if not math.isnan(r.score)]
        tests = [r.test_score for r in rows if not math.isnan(r.test_score)]
        population = {
            "pbx/best_score": max(scores, default=math.nan),
            "pbx/mean_score": sum(scores) / len(scores) if scores else math.nan,
            "pbx/best_test_score": max(tests, default=math.nan),
        }
        writer = self._writer("population")
        writer.scalars(population, max(r.steps for r in rows))
        writer.flush()
