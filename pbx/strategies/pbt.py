"""PBT: population-based training with random explore (Jaderberg et al., 2017, arXiv:1711.09846).

Explore after copying a donor: each continuous hyperparameter is, with
probability ``resample_prob``, drawn afresh from the prior, else multiplied by
0.8 or 1.2 and clipped to its bounds; each categorical one is redrawn with
probability 0.5. PB2 reuses :func:`perturb` for its categorical part and as its
fallback when the GP fails.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from pbx.errors import UsageError
from pbx.space import Categorical, Config, Space
from pbx.strategies.base import ExploitExplore, Explored, RoundContext, StrategySettings

FACTORS = (0.8, 1.2)
CATEGORICAL_RESAMPLE_PROB = 0.5


@dataclass
class PBTSettings(StrategySettings):
    resample_prob: float = 0.25
    """Probability that a continuous hyperparameter is redrawn from the prior instead of perturbed."""

    def __post_init__(self) -> None:
        if not 0 <= self.resample_prob <= 1:
            raise UsageError(f"resample_prob must be in [0, 1], got {self.resample_prob}")


def perturb(
    config: Config, space: Space, rng: np.random.Generator, resample_prob: float, names: list[str] | None = None
) -> tuple[Config, list[str]]:
    """PBT's explore on ``names`` (default: every parameter). Returns the new config and its operations."""
    new = dict(config)
    ops = []
    for name in space.names if names is None else names:
        param = space.params[name]
        if isinstance(param, Categorical):
            if rng.uniform() < CATEGORICAL_RESAMPLE_PROB:
                new[name] = param.sample(rng)
                ops.append(f"{name} resample")
        elif rng.uniform() < resample_prob:
            new[name] = param.sample(rng)
            ops.append(f"{name} resample")
        else:
            factor = FACTORS[int(rng.integers(2))]
            new[name] = param.clip(float(config[name]) * factor)
            ops.append(f"{name} * {factor}")
    return new, ops


class PBT(ExploitExplore):
    name = "PBT"
    settings_cls = PBTSettings
    settings: PBTSettings

    def explore(self, donor: int, donor_config: Config, round_: RoundContext, rng: np.random.Generator) -> Explored:
        return *perturb(donor_config, round_.space, rng, self.settings.resample_prob), {}
