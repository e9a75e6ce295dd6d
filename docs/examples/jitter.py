"""A worked example of a new strategy (docs/add-a-strategy.md): PBT's exploit with a log-uniform jitter.

After a member copies its donor, every continuous hyperparameter is multiplied by
a factor drawn log-uniformly from [1/spread, spread] and clipped to its bounds;
categorical ones are kept. The whole strategy is this file: settings (the
``strategy`` section of config.yaml, ``-m spread=3``), and one ``explore`` hook
that :class:`~pbx.strategies.ExploitExplore` calls for each member that copied.

    python docs/examples/jitter.py --env toy --search jitter --seed 0 -m spread=3
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from pbx.errors import UsageError
from pbx.strategies import ExploitExplore, Explored, RoundContext, StrategySettings, register
from pbx.space import Config


@dataclass
class JitterSettings(StrategySettings):
    spread: float = 2.0
    """The largest factor a value is multiplied (or divided) by."""

    def __post_init__(self) -> None:
        if self.spread <= 1:
            raise UsageError(f"spread must be above 1, got {self.spread}")


@register
class Jitter(ExploitExplore[JitterSettings]):
    name = "jitter"
    settings_cls = JitterSettings
    settings: JitterSettings

    def explore(self, donor: int, donor_config: Config, round_: RoundContext, rng: np.random.Generator) -> Explored:
        new, ops = dict(donor_config), []
        for name in round_.space.continuous:
            factor = math.exp(rng.uniform(-1.0, 1.0) * math.log(self.settings.spread))
            new[name] = round_.space.params[name].clip(float(donor_config[name]) * factor)
            ops.append(f"{name} * {factor:.3g}")
        return new, ops, {}


if __name__ == "__main__":
    from pbx.train import main

    sys.exit(main())
