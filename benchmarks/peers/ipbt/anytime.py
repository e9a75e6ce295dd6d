"""How close a side-by-side run came to the optimum along its budget: the measures ``compare.py`` sets beside the
final answer on the noisy toy.

On ``toy-plain-noisy`` a run's final answer is one member picked by noisy scores, and where its restarts fall
moves it a lot: its log distance spreads by 0.3 to 1.0 over seeds, so a side-by-side of 8 seeds can tell apart
only large differences by it. Two measures read the whole run instead, each from the noise-free score of every
member every round trained (pbx: its test score in ``history.csv``; the reference: ``true_fitness.jsonl``):

- **area**: at every ``t_ready`` of the budget, the log distance of the best noise-free score any member of any
  generation had reached by then (the run's best so far), averaged over the budget: how soon the run came close
  and how much of its budget it spent there;
- **budget to the threshold**: the share of the budget spent when the best so far first reached
  :func:`threshold`, the log distance the greedy schedule (``lr`` at its lower bound from the first step) reaches
  at half the budget: a run that needs the whole budget to get where the best schedule gets in half.

Both sides count the budget as the reference does (a round of more members than the population costs in
proportion, :mod:`pbx.plan`): pbx's round ends from its plan, the reference's from its calls (a round ends where
the next one starts, the last at ``t_max``). The two clocks agree: a run of either side that restarts at the same
rounds has the same round ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from pbx.config import StoredRun
from pbx.history import restart_marks
from toy_plain import F32, THETA0, fitness, step

OPTIMUM = 1.2
"""Both toys' best score (theta = 0)."""
LR_LOW = 1e-4
"""ToyPlain's lowest ``lr`` (``toy_plain_space.yaml``): the greedy schedule's."""


def log_distance(scores: np.ndarray) -> np.ndarray:
    """``log(1.2 - score)``: lower is closer to the optimum."""
    return np.log(OPTIMUM - np.asarray(scores, dtype=float))


@cache
def threshold(budget: int) -> float:
    """The log distance the greedy schedule reaches after half of ``budget`` steps, as the toy computes it."""
    theta = THETA0
    for _ in range(budget // 2):
        theta = step(theta, F32(LR_LOW))
    return float(log_distance(np.array([fitness(theta)]))[0])


@dataclass(frozen=True)
class Rounds:
    """A run's rounds on the budget's clock."""

    ends: np.ndarray
    """The budget spent at each round's end, ascending."""
    best: np.ndarray
    """The best noise-free score among each round's trained members."""
    t_ready: int
    budget: int

    def so_far(self) -> np.ndarray:
        """The log distance of the best so far at every ``t_ready`` of the budget (before the first round ends,
        the first round's: both sides' first rounds cost the same)."""
        grid = np.arange(self.t_ready, self.budget + 1, self.t_ready)
        index = np.maximum(np.searchsorted(self.ends, grid, side="right") - 1, 0)
        return log_distance(np.maximum.accumulate(self.best)[index])

    def area(self) -> float:
        return float(self.so_far().mean())

    def budget_to_threshold(self) -> float:
        """The share of the budget at which the best so far first reached :func:`threshold`; a run that never
        did counts as one round past its budget."""
        reached = np.flatnonzero(self.so_far() <= threshold(self.budget))
        steps = (reached[0] + 1) * self.t_ready if len(reached) else self.budget + self.t_ready
        return steps / self.budget


def pbx_rounds(frame: pd.DataFrame, config: dict) -> Rounds:
    """A pbx run's rounds: the ends its plan gives its restart marks, the best test score of each round."""
    stored = StoredRun.read(config)
    ends = stored.rules.plan(restart_marks(frame)).nominal_ends
    best = frame.groupby("round", sort=True)["test_score"].max().to_numpy(dtype=float)
    return Rounds(np.array(ends), best, int(stored.run.t_ready or 0), int(stored.run.max_budget or 0))


def reference_rounds(true_scores: str, config: dict) -> Rounds:
    """A reference run's rounds from its ``true_fitness.jsonl`` (each training call's start ``t`` and noise-free
    score; the eval-only calls left out) and its ``config.yaml`` (``t_step``, ``t_max``)."""
    calls = [json.loads(line) for line in true_scores.splitlines() if line.strip()]
    frame = pd.DataFrame([c for c in calls if not c["eval"]])
    best = frame.groupby("t", sort=True)["true"].max()
    budget = int(config["algo"]["t_max"])
    ends = np.append(best.index.to_numpy()[1:], budget)
    return Rounds(ends, best.to_numpy(dtype=float), int(config["algo"]["t_step"]), budget)
