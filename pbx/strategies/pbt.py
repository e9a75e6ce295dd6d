"""PBT: population-based training with random explore (Jaderberg et al., 2017, arXiv:1711.09846).

Explore after copying a donor: each continuous hyperparameter is, with
probability ``resample_prob``, drawn afresh from the prior, else multiplied by
0.8 or 1.2 (a discount on the horizon scale: its horizon ``1 / (1 - gamma)``) and
clipped to its bounds; each categorical one is redrawn with
probability 0.5 (``cat_exp random``), or held at one value for the whole run
(``cat_exp fixed``, as the PB2 authors' PBT does). The bandit values of
``cat_exp`` need PB2's GP (:mod:`pbx.strategies.pb2`). PB2 reuses :func:`perturb`
for its categorical part and as its fallback when the GP fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np

from pbx.errors import UsageError
from pbx.space import Categorical, Config, Integer, Space
from pbx.strategies.base import ExploitExplore, Explored, RoundContext, StrategySettings
from pbx.strategies.bayes.categorical import canonical_cat_exp, check_space, fixed_values

FACTORS = (0.8, 1.2)
CATEGORICAL_RESAMPLE_PROB = 0.5


@dataclass
class PBTSettings(StrategySettings):
    cat_exps: ClassVar[tuple[str, ...]] = ("random", "fixed")
    """The ``cat_exp`` values this strategy takes."""

    resample_prob: float = 0.25
    """Probability that a continuous hyperparameter is redrawn from the prior instead of perturbed."""
    cat_exp: str = "random"
    """How categorical hyperparameters are explored (``--cat_exp``, :mod:`pbx.strategies.bayes.categorical`):
    ``random`` or ``fixed``; PB2 also ``exp3`` (= ``exp3_dep``), ``exp3_indep`` and ``cocabo``."""
    fixed_cat_val: str | None = None
    """With ``cat_exp fixed``: the choice every categorical hyperparameter that has it is held at (the
    others, and all of them when None, at the space's default)."""

    def __post_init__(self) -> None:
        if not 0 <= self.resample_prob <= 1:
            raise UsageError(f"resample_prob must be in [0, 1], got {self.resample_prob}")
        self.cat_exp = canonical_cat_exp(self.cat_exp, self.cat_exps, type(self).__name__.removesuffix("Settings"))


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
            new[name] = param.scaled(float(config[name]), factor)
            if isinstance(param, Integer) and new[name] == config[name]:
                # rounding undid the move (2 * 1.2 is 2): step one whole number the factor's way
                new[name] = param.clip(int(config[name]) + (1 if factor > 1 else -1))
            ops.append(f"{name}{' horizon' if param.horizon else ''} * {factor}")
    return new, ops


PBTSettingsT = TypeVar("PBTSettingsT", bound=PBTSettings)


class PBT(ExploitExplore[PBTSettingsT]):
    name = "PBT"
    settings_cls = PBTSettings

    @classmethod
    def validate(cls, settings: PBTSettingsT, space: Space) -> None:
        check_space(settings.cat_exp, settings.fixed_cat_val, space)

    def initial_configs(self, space: Space, pop_size: int, rng: np.random.Generator) -> list[Config]:
        """Draws from the prior; ``cat_exp fixed`` holds the categories from the start."""
        configs = super().initial_configs(space, pop_size, rng)
        if self.settings.cat_exp == "fixed":
            held = fixed_values(space, self.settings.fixed_cat_val)
            configs = [{**config, **held} for config in configs]
        return configs

    def explore(self, donor: int, donor_config: Config, round_: RoundContext, rng: np.random.Generator) -> Explored:
        space = round_.space
        if self.settings.cat_exp == "fixed":
            config = {**donor_config, **fixed_values(space, self.settings.fixed_cat_val)}
            return *perturb(config, space, rng, self.settings.resample_prob, names=space.continuous), {}
        return *perturb(donor_config, space, rng, self.settings.resample_prob), {}
