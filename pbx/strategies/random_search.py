"""``--search random``: each member's config is drawn once from the prior and never changed.

Random search with the same compute as the population: the baseline PBT and
PB2 must beat to show that changing hyperparameters during training pays.
"""

from __future__ import annotations

import numpy as np

from pbx.history import History
from pbx.space import Space
from pbx.strategies.base import Decision, Strategy, StrategySettings, keep_all


class RandomSearch(Strategy[StrategySettings]):
    name = "random"

    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        return keep_all(history)
