"""A member's discovered schedule, read off a run folder, and the config of a run that replays it.

A member's *lineage* is the chain of states it holds: in the last finished round,
its own row; before that, the row of the ``parent`` it started each round from
(:mod:`pbx.history`). The schedule is the config of the lineage's row in each
round, switched at the step count where that round began; only the changes are
kept, as Ray Tune's PBT replay keeps them (:mod:`pbx.strategies.schedule`).

The replay is the original run with ``--search replay`` and one member: the same
env, space, member settings, ``t_ready`` and ``max_budget`` (so its rounds end at
the lineage's step counts), and by default the same seed. The seed gives the
replay's member the learner seed of the original's member 0 (seeds derive from
the run seed and the member index, :func:`pbx.runners.common.member_seed`) and the
original's test levels in every round (:func:`~pbx.runners.common.eval_seed`), so
its test scores compare with the population's on common random numbers. A run
that ``--resume`` extended past a last round shorter than ``t_ready`` (a
``max_budget`` it did not divide) ended that round early: the replay trains to
that budget and resumes to the next, as the run did (:attr:`Replay.budgets`). A fresh
PPO agent cannot repeat the lineage's training bit for bit in any case: a member
that copies a donor takes its weights but keeps its own envs and random streams.
The toy has no randomness, and its replay repeats the lineage exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pbx.config import RunConfig, resolve
from pbx.settings import load_yaml
from pbx.errors import UsageError
from pbx.history import BASE_COLUMNS, RESULT_ROLE, History, complete_rounds, read_csv
from pbx.standings import member_row, results
from pbx.plan import Plan, Rules
from pbx.run_dir import RunDir
from pbx.space import Config

@dataclass(frozen=True)
class Replay:
    """What :func:`plan_replay` found: the replay's config layer and the lineage it follows."""

    layer: dict[str, Any]
    """The replay's config (``run``, ``strategy``, ``member``, ``space``), for :func:`pbx.config.resolve`."""
    name: str
    """The replay's run name: ``<original name>-replay-m<member>``."""
    member: int
    lineage: pd.DataFrame
    """The original history's rows along the member's lineage, one per finished round."""
    rounds: int
    """Rounds the original run is planned to last (the lineage may hold fewer: a run still going)."""
    budgets: tuple[int, ...] = ()
    """The ``max_budget`` of each ``--resume`` after the replay's first stage (the layer's is the first): where
    the original ended a short last round and was resumed past it; empty for a run trained to one budget."""

    @property
    def changes(self) -> int:
        """Config changes along the lineage (the schedule's change points after the first)."""
        return len(self.layer["strategy"]["schedule"]) - 1


def plan_replay(path: Path, member: str | int = "best", seed: int | None = None) -> Replay:
    """Read the run in ``path`` and build the replay of ``member`` (an id, or ``best``: the best member of the
    last finished round); ``seed`` overrides the original's. Raises :class:`UsageError` for a missing or
    damaged folder, an unknown member, or a run with no finished round."""
    folder = RunDir(path)
    if not path.is_dir():
        raise UsageError(f"{path}: no such run folder")
    missing = [f.name for f in (folder.config, folder.history) if not f.is_file()]
    if missing:
        raise UsageError(f"{path}: not a pbx run folder (no {' or '.join(missing)})")
    stored = load_yaml(folder.config)
    try:
        cfg = resolve([stored])
    except UsageError as err:
        raise UsageError(f"{folder.config}: {err}") from None
    frame = complete_rounds(read_csv(folder.history, cfg.space), cfg.run.pop_size, str(folder.history), cfg.rules.size)
    if list(frame.columns) != BASE_COLUMNS + cfg.space.names:
        raise UsageError(f"{folder.history}: columns {list(frame.columns)} do not match the run's "
                         f"{BASE_COLUMNS + cfg.space.names}")
    if frame.empty:
        raise UsageError(f"{folder.history}: no finished round yet, so no schedule to replay")
    if frame["restart"].any():
        raise UsageError(f"{folder.history}: the population restarted (--search {cfg.run.search}): a restart re-makes "
                         f"the weights and may change the rounds' length, which a schedule of configs cannot replay")
    row = member_row(frame, member)
    chosen = int(row["member"])
    if row["role"] != RESULT_ROLE:
        kept = sorted(set(results(frame)["member"].astype(int)))
        raise UsageError(f"--member {chosen} has the role {row['role']} in --search {cfg.run.search}, whose scores are "
                         f"not results: replay one of members {kept[0]} to {kept[-1]} (or best)")
    rows = lineage(frame, chosen, folder.history)
    budgets = _check_steps(rows, cfg, folder.history)
    name = f"{cfg.run.name or path.name}-replay-m{chosen}"
    layer = _layer(cfg, schedule(rows, History(cfg.space.names)), name, seed)
    layer["run"]["max_budget"] = budgets[0]
    return Replay(layer, name, chosen, rows, cfg.rules.fixed_rounds, tuple(budgets[1:]))


def lineage(frame: pd.DataFrame, member: int, source: Path | str = "history") -> pd.DataFrame:
    """The rows of ``member``'s lineage, one per round from the first: its own in the last round, and before
    each round the row of the member it started that round from."""
    rows = frame.set_index(["round", "member"], drop=False)
    picked = []
    for r in range(int(frame["round"].max()), -1, -1):
        if (r, member) not in rows.index:
            raise UsageError(f"{source}: no row of member {member} in round {r}, which its lineage passes "
                             f"through: the file is damaged")
        row = rows.loc[(r, member)]
        picked.append(row)
        member = int(row["parent"])
    return pd.DataFrame(picked[::-1]).reset_index(drop=True)


def schedule(rows: pd.DataFrame, history: History) -> list[dict[str, Any]]:
    """The lineage's configs as change points ``{steps, config}``: each config from the steps its round began at.

    A round the lineage skipped (its member began it at or past the plan, :meth:`RunConfig.steps_due`) trained
    no step, so its config was in force at none: the next round's, which begins at the same steps, replaces it.
    """
    points: list[dict[str, Any]] = []
    start = 0
    for _, row in rows.iterrows():
        config = history.config_of(row)
        if points and points[-1]["steps"] == start:
            points.pop()
        if not points or config != points[-1]["config"]:
            points.append({"steps": start, "config": config})
        start = int(row["steps"])
    return points


def _check_steps(rows: pd.DataFrame, cfg: RunConfig, source: Path) -> list[int]:
    """The lineage's steps must be the run's round boundaries: the replay, with the same ``t_ready``, switches
    configs at its own boundaries. Each round ends where a member with the round's config ends it (a member
    trains to the round's planned end, in whole rollouts of its own length where a search changes it, or skips
    a round it begins at or past that end: :meth:`RunConfig.steps_due`), so the boundaries follow from the
    configs along the lineage. A lineage trained before pbx skipped such rounds (its members trained a rollout
    ahead instead) is told so: a replay by this pbx would not end its rounds where the lineage did.

    A round that ended short of the plan where a ``max_budget`` of its steps would have made it the run's
    last, as a run that ``--resume`` extended ends the last round it had trained, is a budget the run was
    trained to. Returns those budgets in order, then the run's ``max_budget``: the replay's stages."""
    history = History(cfg.space.names)
    found = rows["steps"].to_numpy()
    budgets: list[int] = []
    expected, unskipped, done, ahead = [], [], 0, 0  # this pbx's boundaries, and the earlier rule's
    plan = _replay_plan(cfg, cfg.run.max_budget)
    for r, (_, row) in enumerate(rows.iterrows()):
        config = history.config_of(row)
        start, done = done, done + cfg.steps_due(done, plan.trained_end(r), config)
        if found[r] < done and _ended_at(cfg, r, start, int(found[r]), config):
            budgets.append(done := int(found[r]))
        ahead += cfg.member_cls.steps_trained(cfg.member, config, max(plan.trained_end(r) - ahead, 1))
        expected.append(done)
        unskipped.append(ahead)
    wrong = np.flatnonzero(found != expected)
    if len(wrong):
        r = int(wrong[0])
        why = "the history does not match its config.yaml"
        if list(found) == unskipped:
            why = ("the lineage was trained before pbx let a member skip a round it began at or past the round's "
                   "planned end (it trained one rollout ahead instead): replay it with the pbx that trained it "
                   "(its config.yaml's pbx.commit)")
        raise UsageError(f"{source}: the lineage has {found[r]:,} steps after round {r}, but the run's t_ready and "
                         f"max_budget give {expected[r]:,}: {why}")
    return [*budgets, cfg.run.max_budget]


def _ended_at(cfg: RunConfig, round_: int, start: int, steps: int, config: Config) -> bool:
    """Whether a run of ``cfg`` with ``max_budget`` ``steps`` ends at ``round_`` with a member that began it at
    ``start`` ending it at ``steps``."""
    if steps <= start or steps < cfg.run.t_ready:
        return False
    short = _replay_plan(cfg, steps)
    return short.rounds == round_ + 1 and start + cfg.steps_due(start, short.trained_end(round_), config) == steps


def _replay_plan(cfg: RunConfig, max_budget: int) -> Plan:
    """The rounds of the replay of a run of ``cfg`` trained to ``max_budget``: one member, rounds of
    ``t_ready`` to the budget (a replay never restarts, :meth:`pbx.strategies.Strategy` defaults)."""
    return Rules(max_budget, cfg.run.t_ready or 0, chunk=cfg.rules.chunk).planned()


def _layer(cfg: RunConfig, points: list[dict[str, Any]], name: str, seed: int | None) -> dict[str, Any]:
    """The original's resolved config with one member following ``points`` (MPI settings left at their defaults:
    a population of one runs in one process)."""
    layer = cfg.to_dict()
    run = {k: v for k, v in layer["run"].items() if k not in ("runner", "comm")}
    run.update(search="replay", pop_size=1, name=name, seed=cfg.run.seed if seed is None else seed)
    member = layer["member"]
    if member.get("init", "space") != "space":  # the toys' own starting h (by index, or drawn), not the schedule's
        member["init"] = "space"
    return {**layer, "run": run, "strategy": {"schedule": points}, "member": member}
