"""TV.EXP3.M: the adversarial bandit that picks categorical hyperparameters for PB2-Mult and PB2-Mix.

Exp3.M (Uchiya, Nakamura, Kudo, ALT 2010) plays ``k`` distinct arms of ``K`` per
round; its draw is DepRound (their Fig. 5, after Gandhi et al., JACM 2006),
dependent rounding with exact marginals. The Exp3.S fixed share (Auer et al.,
SIAM J. Comput. 2002) adds ``e * share / K`` of the total weight to every arm
each round, so an arm that fell behind recovers when the best category changes
as training goes on. Parker-Holder et al. (NeurIPS 2021) combine the two as
TV.EXP3.M to choose PB2's categories.

The weights are a pure function of the plays: :meth:`Exp3M.replay` rebuilds
them from uniform each round and never draws, so a resumed run and an MPI
coordinator reach the same weights. Only :func:`dep_round` draws, once per
round, from the round's generator.

Where this departs from the PB2 authors' code (``exp3.py``, ``deep_round.py``):

- DepRound there divides its input by its sum, so for ``k > 1`` an arm's chance
  is ``p_i``, not ``k p_i``; here the input sums to ``k`` and each arm is drawn
  with probability exactly ``p_i``.
- The share term there multiplies the exponential (``w *= exp(.) + share``, an
  operator-precedence slip) and reaches only the arms played; here it is added
  to every arm, as in Exp3.S.
- The reference draws one arm per exploring member independently, so two
  members can get the same category in one round; here the ``k`` members explored
  in a round get ``k`` distinct arms (all arms, as evenly as possible, when
  ``k >= K``).
- Both update once per member and round. Where the population ``B`` is below
  ``K`` the reference divides the reward by a probability it has already
  multiplied by ``B``, so each play moves the weights ``1/B`` of Exp3.M's step;
  here every play is Exp3.M's step. The reference weighs every play as drawn,
  and so does the default, ``exp3_plays: all``; ``drawn`` weighs a member that
  kept running at chance 1 (:data:`pbx.strategies.bayes.categorical.EXP3_PLAYS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
from scipy.optimize import brentq

INTEGRAL = 1e-9
"""A probability within this of 0 or 1 counts as decided in :func:`dep_round` (float round-off)."""


def dep_round(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct indices, index ``i`` drawn with probability exactly ``p[i]``.

    Args:
        p: (K,) inclusion probabilities in ``[0, 1]`` summing to ``k``.
        k: the number of indices to draw, ``1 <= k <= K``.
        rng: the only source of randomness: one uniform per step, at most ``K - 1`` steps.

    Each step takes two undecided entries and moves mass between them so that one
    becomes 0 or 1, keeping each entry's expectation (so the marginals) and the sum.
    """
    p = np.asarray(p, dtype=float)
    if not 1 <= k <= len(p) or np.any(p < -INTEGRAL) or np.any(p > 1 + INTEGRAL) or abs(p.sum() - k) > 1e-6 * k:
        raise ValueError(f"dep_round needs probabilities in [0, 1] summing to k={k}, got {p.tolist()}")
    q = p.tolist()  # plain floats: K is small, and Python's loop beats NumPy's call overhead here
    open_ = [i for i, v in enumerate(q) if INTEGRAL < v < 1 - INTEGRAL]
    while len(open_) >= 2:
        i, j = open_[0], open_[1]
        alpha, beta = min(1 - q[i], q[j]), min(q[i], 1 - q[j])
        if rng.uniform() < beta / (alpha + beta):
            q[i], q[j] = q[i] + alpha, q[j] - alpha
        else:
            q[i], q[j] = q[i] - beta, q[j] + beta
        open_ = [m for m in open_ if INTEGRAL < q[m] < 1 - INTEGRAL]
    # round-off may leave one entry a hair from 0 or 1: the k largest are the draw
    return np.sort(np.argsort(-np.array(q), kind="stable")[:k])


def exp3m_gamma(arms: int, plays: int, rounds: int) -> float:
    """Exp3.M's exploration rate for ``rounds`` rounds of ``plays`` arms of ``arms`` (Uchiya et al., Cor. 1).

    ``min(1, sqrt(K ln(K/k) / ((e - 1) k T)))``; ``k`` is capped at ``K - 1`` (at ``k >= K``
    every arm is played and the rate does not matter for the draw).
    """
    k = min(max(plays, 1), arms - 1)
    if k < 1:
        return 1.0
    return min(1.0, math.sqrt(arms * math.log(arms / k) / ((math.e - 1) * k * max(rounds, 1))))


class Play(NamedTuple):
    """One interval the bandit learns from: a member's round on one arm."""

    arm: int
    reward: float
    """In ``[0, 1]``."""
    drawn: bool = True
    """Whether the bandit drew the arm for this round; False: the member kept running on it, so it
    was played for sure and its reward is not importance-weighted."""


@dataclass(frozen=True)
class Exp3M:
    """Exp3.M with the Exp3.S fixed share over ``arms`` arms, ``plays`` arms drawn per round.

    ``gamma``: exploration rate (the uniform part of the distribution, and the scale
    of each update); ``share``: fixed share per round (Exp3.S's ``alpha``, ``1/T``
    for a run of ``T`` rounds). Weights are kept normalised to sum 1.

    In a population more arms are observed than drawn, and one round can play an
    arm several times (members on one category): :meth:`update` takes any number of
    :class:`Play`, each its own update as in the reference code, a drawn one weighed
    by its arm's probability under ``plays`` draws (at most ``K - 1``, so that not every
    arm is certain and the weights keep learning). Which intervals count as drawn is
    the caller's choice (:data:`pbx.strategies.bayes.categorical.EXP3_PLAYS`).
    """

    arms: int
    plays: int
    gamma: float
    share: float

    def __post_init__(self) -> None:
        if self.arms < 1 or self.plays < 1 or not 0 < self.gamma <= 1 or not 0 <= self.share < 1:
            raise ValueError(f"Exp3M needs arms >= 1, plays >= 1, gamma in (0, 1], share in [0, 1); got {self}")

    def uniform(self) -> np.ndarray:
        return np.full(self.arms, 1.0 / self.arms)

    def probabilities(self, weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exp3.M's inclusion probabilities for ``k`` plays (sum ``k``, each at most 1) and the capped arms.

        An arm whose weight would push its probability past 1 is capped at the weight
        ``alpha`` that solves ``alpha / sum_i min(w_i, alpha) = (1/k - gamma/K) / (1 - gamma)``;
        capped arms are played for sure and their weights are not updated that round.
        """
        K, gamma = self.arms, self.gamma
        if k >= K:
            return np.ones(K), np.ones(K, dtype=bool)
        w = np.asarray(weights, dtype=float)
        capped = np.zeros(K, dtype=bool)
        threshold = (1.0 / k - gamma / K) / (1.0 - gamma) if gamma < 1 else math.inf
        if w.max() >= threshold * w.sum():
            # alpha / sum min(w, alpha) is increasing in alpha between 0 and the largest weight
            alpha = brentq(lambda a: a - threshold * np.minimum(w, a).sum(), 1e-300, w.max(), xtol=1e-15,
                           rtol=1e-12)
            capped = w >= alpha
            w = np.where(capped, alpha, w)
        p = k * ((1.0 - gamma) * w / w.sum() + gamma / K)
        return np.minimum(p, 1.0), capped

    def update(self, weights: np.ndarray, plays: Sequence[Play]) -> np.ndarray:
        """The weights after one round of ``plays`` (an arm as often as it was played).

        Each play of an arm that is not capped multiplies its weight by ``exp(k gamma x /
        K)``, ``x`` its reward divided by the chance it had of being played: the arm's
        probability ``p`` under ``k = min(plays, K - 1)`` draws when drawn, else 1. ``p`` is
        the round's, from before its first play, so the order of the plays does not
        matter. Every arm then gets the fixed share ``e * share / K`` of the total.
        """
        w = np.asarray(weights, dtype=float)
        if not plays:
            return w
        k = max(min(self.plays, self.arms - 1), 1)
        p, capped = self.probabilities(w, k)
        estimate = np.zeros(self.arms)
        for arm, reward, drawn in plays:
            estimate[arm] += reward / p[arm] if drawn else reward
        grown = np.where(capped, w, w * np.exp(k * self.gamma * estimate / self.arms))
        new = grown + math.e * self.share / self.arms * w.sum()
        return new / new.sum()

    def replay(self, rounds: Sequence[Sequence[Play]]) -> np.ndarray:
        """The weights after ``rounds`` (oldest first), from uniform; draws nothing."""
        w = self.uniform()
        for rewards in rounds:
            w = self.update(w, rewards)
        return w

    def draw(self, weights: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
        """``k`` arms for one round: distinct by :func:`dep_round` while ``k < K``; beyond, every arm
        ``k // K`` times and the remaining ``k % K`` distinct by :func:`dep_round`. Shuffled, so the
        order of the round's recipients does not decide who gets which arm."""
        K = self.arms
        arms = [a for _ in range(k // K) for a in range(K)]
        if k % K:
            arms += [int(a) for a in dep_round(self.probabilities(weights, k % K)[0], k % K, rng)]
        return [arms[i] for i in rng.permutation(len(arms))]
