"""What every runner shares: seeds, the round's generator, and the record of a finished round.

Decisions for round ``r`` use a generator derived from ``(seed, r)`` alone, so a
resumed run, or the MPI runner's coordinator, makes exactly the decisions an
uninterrupted synchronous run makes. The test set is drawn from a seed of
``(seed, r)`` too, shared by every member of the round (common random numbers).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from pbx.config import RunConfig
from pbx.console import Console, round_line
from pbx.files import append_csv, fsync_dir
from pbx.history import History, HistoryLog, Row, restart_marks, steps_trained
from pbx.standings import best_rows
from pbx.run_dir import RunDir
from pbx.space import Categorical, Config
from pbx.strategies import Decision, Strategy
from pbx.tblog import ScalarWriter

STRATEGY_COLUMNS = ["round", "member", "donor", "explored", "ops", "info"]


def round_rng(seed: int, round_: int) -> np.random.Generator:
    """The generator for the decisions taken after ``round_`` (-1: the initial configs)."""
    return np.random.default_rng([seed, round_ + 1])


def member_seed(seed: int, member: int) -> int:
    """Each member's own seed: distinct across members, fixed by the run seed."""
    return int(np.random.SeedSequence([seed, member, 7919]).generate_state(1)[0])


def eval_seed(seed: int, round_: int) -> int:
    """The test-level seed of ``round_``: the same for every member, so their test scores compare."""
    return int(np.random.SeedSequence([seed, round_, 104729]).generate_state(1)[0])


def initial_configs(strategy: Strategy, cfg: RunConfig) -> list[Config]:
    """Each member's starting config, drawn with the run's pre-round generator and moved to one the members can
    train (:meth:`pbx.members.Member.feasible`; the history records the config each member trained with)."""
    return [cfg.member_cls.feasible(config, cfg.member, cfg.space)[0]
            for config in strategy.initial_configs(cfg.space, cfg.init_size, round_rng(cfg.run.seed, -1))]


@contextlib.contextmanager
def torch_state_kept() -> Iterator[None]:
    """Leave the process's global torch state as the run found it.

    A member may set process-wide torch state for its run (PPO's ``deterministic``:
    deterministic algorithms, cuDNN's flags, ``CUBLAS_WORKSPACE_CONFIG``; its thread
    count), which would otherwise carry over to the next run of an in-process sweep.
    Kept: those, the intra-op thread count and torch's global generator (the
    inter-op thread count can be set once per process only, and no member sets it).
    Without torch imported (the toy's runs) there is nothing to keep; a member's
    module that uses torch imports it when the run's config is resolved, before this.
    """
    if "torch" not in sys.modules:
        yield
        return
    import torch

    cudnn = torch.backends.cudnn
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    flags, threads, rng = (cudnn.deterministic, cudnn.benchmark), torch.get_num_threads(), torch.get_rng_state()
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        yield
    finally:
        if (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled()) != deterministic:
            # only when a member changed it: the call imports torch._inductor (seconds at every run's end)
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        cudnn.deterministic, cudnn.benchmark = flags
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace


def finite_or_nan(value: float) -> float:
    """A score as the history stores it: finite, or NaN for anything else (an overflowed return)."""
    value = float(value)
    return value if math.isfinite(value) else math.nan


class RunRecorder:
    """Writes a finished round everywhere it goes: history (fsynced), TensorBoard, the terminal,
    and the strategy's reasons (``strategy.csv``, one row per decision that changes a member)."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.log = HistoryLog(run_dir.history, cfg.space, cfg.run.pop_size, cfg.rules.size)
        frame = self.log.history.frame
        # A larger first population's or restart's candidates train as many steps as they add; restarts to come
        # leave the total as it is, up to rounding (a round of k x pop_size members takes k times its length of
        # the budget).
        total = cfg.rules.planned(restart_marks(frame)).member_steps()
        self.console = Console(total, steps_trained(frame), desc=f"{cfg.run.env} {cfg.run.search}")
        self._writers: dict[str, ScalarWriter] = {}
        self._keep_strategy_rows(before=self.log.history.last_round)

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

    def round_starts(self, round_: int, rounds: int) -> None:
        """Round ``round_`` begins (``rounds``: the run's rounds as now planned): expected to take as long as the one
        before it, by the history's clock (which counts on across a resume)."""
        ends = self.history.frame.groupby("round")["wall_s"].max()
        expected = float(ends[round_ - 1] - ends.get(round_ - 2, 0.0)) if round_ - 1 in ends.index else None
        self.console.round_starts(round_, rounds, expected)

    def decided(self, round_: int, decisions: Sequence[Decision], notes: Mapping[int, str], rounds: int) -> None:
        """Record the decisions taken after ``round_`` and print the round's line (``notes``: why a score is NaN;
        ``rounds``: the run's rounds as now planned, :meth:`pbx.plan.Plan.rounds_estimate`)."""
        self.record_decisions(round_, decisions)
        self.console.line(round_line(round_, rounds, self.history.round(round_), decisions, notes))

    def record_decisions(self, round_: int, decisions: Sequence[Decision]) -> None:
        """Write the reasons of the decisions taken after ``round_`` (also those a resume recomputes, whose
        round line the stopped run already printed)."""
        changed = [d for d in decisions if d.changes or d.info]
        if not changed:
            return
        path = self.run_dir.strategy
        header = [] if path.exists() else [STRATEGY_COLUMNS]
        append_csv(path, header + [[str(round_), str(d.member), str(d.donor), str(d.explored), "; ".join(d.ops),
                                    json.dumps(dict(d.info))] for d in changed])
        steps = int(self.history.round(round_)["steps"].max())
        for d in changed:
            if d.info:
                writer_ = self._writer(f"member_{d.member}")
                writer_.scalars({f"strategy/{key}": value for key, value in d.info.items()}, steps)
                writer_.flush()

    def close(self) -> None:
        self.console.close()
        for w in self._writers.values():
            w.close()

    def _keep_strategy_rows(self, before: int) -> None:
        """Drop rows of rounds ``>= before``: a resume recomputes those decisions and records them again."""
        path = self.run_dir.strategy
        if not path.exists():
            return
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        kept = frame[pd.to_numeric(frame["round"], errors="coerce") < before]
        tmp = path.with_name(path.name + ".tmp")
        kept.to_csv(tmp, index=False)
        tmp.replace(path)
        fsync_dir(path.parent)

    def _writer(self, name: str) -> ScalarWriter:
        if name not in self._writers:
            self._writers[name] = ScalarWriter(self.run_dir.tb / name)
        return self._writers[name]

    def _tensorboard(self, rows: Sequence[Row]) -> None:
        for row in rows:
            values = {"pbx/score": row.score, "pbx/test_score": row.test_score, "pbx/score100": row.score100}
            for name, value in row.config.items():
                param = self.cfg.space.params[name]
                # TensorBoard plots numbers only: a categorical value is logged as its choice index.
                values[f"hp/{name}"] = param.choices.index(value) if isinstance(param, Categorical) else float(value)
            writer = self._writer(f"member_{row.member}")
            for steps, score in row.curve:  # the scores within the round, at the steps each was taken
                writer.scalars({"pbx/curve": score}, steps)
            writer.scalars(values, row.steps)
            writer.flush()
        frame = self.history.round(rows[0].round)
        best = best_rows(frame).iloc[0]
        scores = frame["score"].dropna()
        population = {
            "pbx/best_score": float(best["score"]),
            "pbx/mean_score": float(scores.mean()) if len(scores) else math.nan,
            # The test score of the best member on *train* score: the test set never selects.
            "pbx/best_member_test_score": float(best["test_score"]),
        }
        writer = self._writer("population")
        writer.scalars(population, max(r.steps for r in rows))
        writer.flush()
