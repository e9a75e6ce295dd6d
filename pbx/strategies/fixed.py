"""``--search none``: the fixed-hyperparameter baseline.

Every member trains with the space's default config (the ProcGen paper's PPO
settings for ``ppo_procgen.yaml``) and nothing is ever copied. Members differ
only by seed, so the spread across members is the seed variance of the baseline.
"""

from __future__ import annotations

import numpy as np

from pbx.history import History
from pbx.space import Config, Space
from pbx.strategies.base import Decision, Strategy, StrategySettings, keep_all


class Fixed(Strategy[StrategySettings]):
    name = "none"

    def initial_configs(self, space: Space, pop_size: int, rng: np.random.Generator) -> list[Config]:
        return [space.initial() for _ in range(pop_size)]

    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        return keep_all(history)
