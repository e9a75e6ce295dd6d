"""How PBT and PB2 choose categorical hyperparameters: ``--cat_exp`` (Parker-Holder et al., NeurIPS 2021).

- ``random`` (the default; PB2-Rand): as PBT, each categorical value is redrawn
  uniformly with probability 0.5 after a copy.
- ``fixed``: every categorical hyperparameter is held at one value for the whole
  run: ``--fixed_cat_val`` where it is one of its choices, else the space's default.
- ``exp3_dep`` (= ``exp3``; PB2-Mult), ``exp3_indep`` and ``cocabo`` (PB2-Mix):
  TV.EXP3.M (:mod:`pbx.strategies.bayes.exp3`) picks the categories, one bandit per
  categorical hyperparameter, its arms the choices. They differ in PB2's GP
  (see :mod:`pbx.strategies.pb2`).

The bandit's plays are the history's intervals, each its own update as in the
reference code, its reward the interval's improvement rate min-max normalised
over PB2's window. Which intervals are plays is :data:`EXP3_PLAYS`. The
reference code draws categories with
``round(U * (K - 1))``, which gives the first and last choice half the chance of
the others; every draw here is uniform (:meth:`pbx.space.Categorical.sample`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from pbx.errors import UsageError
from pbx.space import Categorical, Config, Space, Value
from pbx.strategies.bayes.exp3 import Exp3M, Play, exp3m_gamma

CAT_EXPS = ("random", "fixed", "exp3_dep", "exp3_indep", "cocabo")
"""The ``--cat_exp`` values (the reference code's names)."""
ALIASES = {"exp3": "exp3_dep"}
BANDITS = ("exp3_dep", "exp3_indep", "cocabo")
"""The values whose categories EXP3 picks."""
EXP3_PLAYS = ("all", "drawn")
"""The values of PB2's ``exp3_plays``: which of the bandit's plays count as drawn.

Every member's round is a play of the category it ran, its own update. ``all``
(the reference code's) weighs each by the chance the round's draw had of its
category, as if the bandit had drawn it. ``drawn`` does so only for the members
explored at the round's start, whose category the bandit did draw; a member
that kept running was certain to run its category, so its round counts at
chance 1. Weighed as if drawn, those rounds inflate the categories the
population already holds (Exp3.M's estimate is unbiased only for drawn plays).
"""
SHARE_PER_ROUND = 0.1
"""Exp3.S's fixed share is ``SHARE_PER_ROUND / rounds``, the reference code's rate. Exp3.S's bound
takes ``1 / rounds``; on an 8-arm problem of 200 rounds with one clearly best arm that pulls the
weights back to uniform faster than they learn: the best arm's share of the picks in the last
quarter was 0.23 against 0.68 at a tenth of it (tests/test_exp3.py, 20 seeds)."""


def canonical_cat_exp(value: str, allowed: tuple[str, ...], search: str) -> str:
    """The registry spelling of a ``--cat_exp`` value; a one-line error for one ``search`` cannot do."""
    key = ALIASES.get(str(value).lower(), str(value).lower())
    if key not in CAT_EXPS:
        raise UsageError(f"unknown cat_exp {value!r}; choose from fixed, random, exp3 (= exp3_dep), exp3_indep, "
                         f"cocabo")
    if key not in allowed:
        raise UsageError(f"cat_exp {value!r} needs --search PB2; --search {search} takes {' or '.join(allowed)}")
    return key


def check_space(cat_exp: str, fixed_cat_val: str | None, space: Space) -> None:
    """Refuse a ``--cat_exp`` / ``--fixed_cat_val`` that has nothing to act on in ``space``."""
    if cat_exp in BANDITS and not space.categorical:
        raise UsageError(f"cat_exp {cat_exp} picks categorical hyperparameters, and the search space has none "
                         f"({', '.join(space.names)}); use a space with one: --env toy-cat, or on a ProcGen game "
                         f"--space ppo_procgen_mix.yaml")
    if fixed_cat_val is None:
        return
    if cat_exp != "fixed":
        raise UsageError(f"fixed_cat_val applies to cat_exp fixed, not {cat_exp}")
    if not any(fixed_cat_val in _texts(space.params[name]) for name in space.categorical):
        choices = "; ".join(f"{n}: {', '.join(_texts(space.params[n]))}" for n in space.categorical) or "none"
        raise UsageError(f"fixed_cat_val {fixed_cat_val!r} is not a choice of any categorical hyperparameter "
                         f"(choices: {choices})")


def _texts(param: object) -> list[str]:
    assert isinstance(param, Categorical)
    return [str(c) for c in param.choices]


def fixed_values(space: Space, fixed_cat_val: str | None) -> Config:
    """The categorical values ``fixed`` holds: ``fixed_cat_val`` where it is a choice, else the default."""
    held: Config = {}
    for name in space.categorical:
        param = space.params[name]
        assert isinstance(param, Categorical)
        by_text = {str(c): c for c in param.choices}
        held[name] = by_text[fixed_cat_val] if fixed_cat_val in by_text else param.initial()
    return held


def codes(space: Space, rows: Mapping[str, Sequence[Value]], n: int) -> np.ndarray:
    """(n, m) the categorical values of ``n`` rows as indices of their choices, in ``space.categorical`` order."""
    out = np.zeros((n, len(space.categorical)))
    for column, name in enumerate(space.categorical):
        param = space.params[name]
        assert isinstance(param, Categorical)
        index = {str(c): i for i, c in enumerate(param.choices)}
        out[:, column] = [index[str(v)] for v in rows[name]]
    return out


def config_codes(space: Space, config: Mapping[str, Value]) -> np.ndarray:
    """(m,) the categorical values of one config as choice indices."""
    return codes(space, {name: [config[name]] for name in space.categorical}, 1)[0]


@dataclass(frozen=True)
class CategoryBandits:
    """One TV.EXP3.M per categorical hyperparameter, with its weights replayed from the window."""

    space: Space
    bandits: dict[str, Exp3M]
    weights: dict[str, np.ndarray]

    @classmethod
    def replay(cls, space: Space, rounds: np.ndarray, cats: np.ndarray, rate: np.ndarray, explored: np.ndarray,
               run_rounds: int, plays: int, exp3_plays: str) -> CategoryBandits:
        """The bandits after the window's intervals.

        Args:
            rounds, cats, rate: each interval's round (n,), category codes (n, m) and improvement rate (n,).
            explored: (n,) whether the interval's config was chosen by an explore at its start (its
                categories drawn by the bandits).
            run_rounds: the run's planned rounds (``T`` of the exploration and share rates).
            plays: members explored per round by the selection (``k`` of Exp3.M).
            exp3_plays: which plays count as drawn (:data:`EXP3_PLAYS`).
        """
        low, high = (float(rate.min()), float(rate.max())) if len(rate) else (0.0, 0.0)
        reward = (rate - low) / (high - low) if high > low else np.zeros(len(rate))
        drawn = np.asarray(explored, dtype=bool) if exp3_plays == "drawn" else np.ones(len(rate), dtype=bool)
        by_round = [np.flatnonzero(rounds == r) for r in np.unique(rounds)]
        bandits, weights = {}, {}
        for column, name in enumerate(space.categorical):
            arms = len(space.params[name].choices)  # type: ignore[union-attr]
            bandit = Exp3M(arms, plays, exp3m_gamma(arms, plays, run_rounds), SHARE_PER_ROUND / max(run_rounds, 1))
            history = [[Play(int(cats[i, column]), float(reward[i]), bool(drawn[i])) for i in at] for at in by_round]
            bandits[name], weights[name] = bandit, bandit.replay(history)
        return cls(space, bandits, weights)

    def draw(self, k: int, rng: np.random.Generator) -> list[Config]:
        """The categorical values of the round's ``k`` recipients, distinct per hyperparameter (up to its
        number of choices)."""
        picks: list[Config] = [{} for _ in range(k)]
        for name, bandit in self.bandits.items():
            choices = self.space.params[name].choices  # type: ignore[union-attr]
            for config, arm in zip(picks, bandit.draw(self.weights[name], k, rng)):
                config[name] = choices[arm]
        return picks

    def info(self) -> dict[str, float]:
        """Each arm's chance per pick (the distribution of one draw), as ``exp3.<name>.<choice>``."""
        out = {}
        for name, bandit in self.bandits.items():
            p, _ = bandit.probabilities(self.weights[name], 1)
            choices = self.space.params[name].choices  # type: ignore[union-attr]
            out |= {f"exp3.{name}.{choice}": float(q) for choice, q in zip(choices, p)}
        return out
