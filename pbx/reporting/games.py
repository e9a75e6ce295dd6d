"""Scores across games: min-max normalisation ranges, and the published baseline where it applies.

Results over several games are aggregated on normalised scores, (R - R_min) /
(R_max - R_min), so each game weighs alike. ProcGen's easy-mode ranges are built in
(:data:`EASY_RANGES`, from ``openai/train-procgen``'s ``constants.py``, the ranges
rliable's ProcGen examples use); any other game needs the range the user gives
(``--range GAME=MIN,MAX``), and without one its raw scores are reported on their own.

:data:`PUBLISHED_PPO` holds train-procgen's PPO at 25M steps (Cobbe et al. 2020;
easy, 200 training levels, 3 seeds), computed from its stored logs. It is set beside
pbx's numbers only for runs of the same protocol and budget (:func:`published_for`):
a published number next to a run of another budget or level set would compare
different experiments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from pbx.errors import UsageError
from pbx.reporting.runs import Run

EASY_RANGES: dict[str, tuple[float, float]] = {
    "bigfish": (1, 40), "bossfight": (0.5, 13), "caveflyer": (3.5, 12), "chaser": (0.5, 13),
    "climber": (2, 12.6), "coinrun": (5, 10), "dodgeball": (1.5, 19), "fruitbot": (-1.5, 32.4),
    "heist": (3.5, 10), "jumper": (1, 10), "leaper": (1.5, 10), "maze": (5, 10), "miner": (1.5, 13),
    "ninja": (3.5, 10), "plunder": (4.5, 30), "starpilot": (2.5, 64),
}
"""ProcGen easy mode's (R_min, R_max) per game: train-procgen ``EASY_GAME_RANGES`` (Cobbe et al. 2020)."""

PUBLISHED_PPO: dict[str, tuple[float, float, float, float]] = {
    "bigfish": (12.8, 2.0, 5.2, 0.4), "bossfight": (7.8, 0.8, 7.5, 1.2), "caveflyer": (7.5, 0.7, 5.8, 0.7),
    "chaser": (7.1, 0.9, 6.0, 0.8), "climber": (8.6, 0.5, 5.4, 0.2), "coinrun": (9.4, 0.1, 8.7, 0.5),
    "dodgeball": (5.1, 0.6, 2.0, 0.5), "fruitbot": (29.6, 1.2, 25.7, 0.5), "heist": (8.0, 0.3, 2.9, 0.4),
    "jumper": (8.4, 0.3, 5.5, 0.6), "leaper": (6.5, 1.5, 6.1, 0.5), "maze": (9.1, 0.0, 6.2, 0.2),
    "miner": (12.9, 0.1, 9.4, 0.2), "ninja": (7.0, 0.1, 5.5, 1.0), "plunder": (5.4, 0.4, 4.8, 1.0),
    "starpilot": (33.0, 4.3, 24.2, 3.6),
}
"""train-procgen's PPO per game: (train mean, sd, test mean, sd) over 3 seeds of ``eprewmean`` at the first
logged step >= 25M (``results/easy-200-run{0,1,2}``, commit 1a2ae21)."""
PUBLISHED_SETTING = {"distribution_mode": "easy", "num_levels": 200, "start_level": 0}
"""The env settings of train-procgen's protocol; its budget is :data:`PUBLISHED_BUDGET` steps."""
PUBLISHED_BUDGET = 25_000_000
PUBLISHED_LABEL = "PPO, published"
PUBLISHED_NOTE = (
    f"{PUBLISHED_LABEL}: train-procgen's PPO (Cobbe et al. 2020; openai/train-procgen, 3 seeds, mean ± sd), "
    "easy, 200 training levels, 25M steps, 64 envs, the ProcGen paper's hyperparameters. Its protocol differs "
    "from pbx's: train is the running mean of the last 100 training episodes, test a concurrent worker on "
    "all levels; one agent, not the best member of a population.")


@dataclass(frozen=True)
class Ranges:
    """Normalisation ranges: the user's (``--range``) over the built-in ones."""

    given: Mapping[str, tuple[float, float]]

    def of(self, runs: Sequence[Run]) -> tuple[float, float] | None:
        """The (min, max) of the game ``runs`` are on: the user's, else ProcGen's easy range when every run
        plays ProcGen's easy mode; None without one."""
        env = runs[0].env
        if env in self.given:
            return self.given[env]
        if env in EASY_RANGES and all(run.env_settings.get("distribution_mode") == "easy" for run in runs):
            return EASY_RANGES[env]
        return None

    @classmethod
    def parse(cls, items: Sequence[str]) -> Ranges:
        """``GAME=MIN,MAX`` items (``--range``) -> ranges; a bad item is a :class:`UsageError` naming it."""
        given = {}
        for item in items:
            game, _, bounds = item.partition("=")
            try:
                low, high = (float(v) for v in bounds.split(","))
            except ValueError:
                raise UsageError(f"--range {item!r}: expected GAME=MIN,MAX, e.g. toy=0,1.2") from None
            if not game or not np.isfinite([low, high]).all() or high <= low:
                raise UsageError(f"--range {item!r}: needs a game and finite MIN < MAX")
            given[game] = (low, high)
        return cls(given)


def normalise(values: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Min-max normalised scores: 0 at the range's minimum, 1 at its maximum."""
    low, high = bounds
    return (values - low) / (high - low)


def published_for(runs: Sequence[Run]) -> tuple[float, float, float, float] | None:
    """train-procgen's PPO on the game of ``runs`` when every run follows its protocol and budget (ProcGen
    easy, 200 levels from level 0, 25M steps per member), else None."""
    env = runs[0].env
    if env not in PUBLISHED_PPO:
        return None
    same = all(int(run.config["run"].get("max_budget") or 0) == PUBLISHED_BUDGET
               and all(run.env_settings.get(key) == value for key, value in PUBLISHED_SETTING.items()) for run in runs)
    return PUBLISHED_PPO[env] if same else None
