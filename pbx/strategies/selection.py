"""Exploit step: which members copy whom.

Members are ranked by :func:`pbx.standings.rank_best_first` (NaN last, ties in
member order). Copying needs information, so every rule follows one policy:

- a NaN member (diverged, or no score yet; a round without an episode to score carries the last one,
  :mod:`pbx.history`) is never a donor;
- a member copies only a donor with a better score, by more than the replace
  margin (:class:`ExploitRules`; none by default: strictly better), so tied or
  all-NaN scores copy nothing (the member id must never decide a copy);
- every NaN member is replaced while a finite donor exists, not only those that
  fall in the bottom quantile: a diverged member must not train on.

Three rules pick the pairs: truncation (the bottom quantile copies the top
quantile; Jaderberg et al. 2017), winner-takes-all, and sigma (underperformers
below mean - k std copy leaders above mean + k std, as Isaac Lab's PBT cuts).
:class:`ExploitRules` adds the guards every rule shares: no exploit before
``burn_in`` steps (Ray Tune's ``burn_in_period``), the replace margin (Sample
Factory's ``--pbt_replace_reward_gap`` and ``..._absolute``), and what a member
tied with its donor does (``tied``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pbx.errors import UsageError
from pbx.settings import check_choices
from pbx.standings import rank_best_first

TIED = ("keep", "explore")


@dataclass(frozen=True)
class ExploitRules:
    """Guards on every exploit, whatever rule picks the pairs; the defaults change nothing."""

    burn_in: int = 0
    """Env steps every member must have trained before the first exploit (Ray Tune's ``burn_in_period``):
    early scores say little about where a config leads."""
    margin_rel: float = 0.0
    """A donor must beat the recipient by more than this fraction of the recipient's absolute score
    (Sample Factory's ``pbt_replace_reward_gap``), so noise does not drive exploits."""
    margin_abs: float = 0.0
    """... and by more than this many score units (``pbt_replace_reward_gap_absolute``); both must hold."""
    tied: str = "keep"
    """A recipient whose drawn donor has exactly its score: ``keep`` (copy nothing, change nothing) or
    ``explore`` its own config without copying (a deterministic population that has converged to one config
    and one set of weights otherwise stops searching for good)."""

    def __post_init__(self) -> None:
        if self.burn_in < 0:
            raise UsageError(f"burn_in must be a number of env steps >= 0, got {self.burn_in}")
        for name in ("margin_rel", "margin_abs"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be >= 0 (0: any better donor may be copied), got {value}")
        check_choices(self, tied=TIED)

    def ready(self, steps: np.ndarray) -> bool:
        """Whether members with these step counts may exploit: all past ``burn_in``."""
        return bool(len(steps) and np.min(steps) >= self.burn_in)

    def better(self, scores: np.ndarray, donor: int, recipient: int) -> bool:
        """Whether ``donor`` may be copied into ``recipient``: finite, and above the recipient's score by more
        than both margins (any finite donor beats a NaN recipient)."""
        if not np.isfinite(scores[donor]):
            return False
        if np.isnan(scores[recipient]):
            return True
        gap = scores[donor] - scores[recipient]
        return bool(gap > 0 and gap > self.margin_abs and gap > self.margin_rel * abs(scores[recipient]))

    def tied_with(self, scores: np.ndarray, donor: int, recipient: int) -> bool:
        """Whether ``recipient`` explores its own config because ``donor`` has exactly its (finite) score."""
        return self.tied == "explore" and bool(np.isfinite(scores[donor]) and scores[donor] == scores[recipient])


class Selection(ABC):
    """Maps the latest scores to ``{recipient: donor}`` for the members that copy.

    A recipient mapped to itself explores its own config without copying (a tie, :attr:`ExploitRules.tied`).
    """

    name: ClassVar[str]

    def __init__(self, rules: ExploitRules | None = None) -> None:
        self.rules = rules if rules is not None else ExploitRules()

    @abstractmethod
    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        """Args: scores, one per position. Returns recipient -> donor positions (empty: no exploit)."""

    @abstractmethod
    def recipients(self, pop_size: int) -> int:
        """How many members copy in a round whose scores are finite and distinct (at most)."""

    def _pair(self, pairs: dict[int, int], scores: np.ndarray, donor: int, recipient: int) -> None:
        if self.rules.better(scores, donor, recipient):
            pairs[recipient] = donor
        elif recipient != donor and self.rules.tied_with(scores, donor, recipient):
            pairs[recipient] = recipient


def nan_members(scores: np.ndarray) -> list[int]:
    return [int(m) for m in np.flatnonzero(np.isnan(scores))]


class Truncation(Selection):
    """The bottom ``quantile`` of the population copies a random member of the top ``quantile``.

    The quantile holds ``ceil(quantile * n)`` members, so a population of two
    still exploits (one copies the other), as in Jaderberg et al. (2017).
    """

    name = "truncation"

    def __init__(self, quantile: float = 0.25, rules: ExploitRules | None = None) -> None:
        super().__init__(rules)
        if not 0 < quantile <= 0.5:
            raise UsageError(f"quantile must be in (0, 0.5], got {quantile}")
        self.quantile = quantile

    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        order = rank_best_first(scores)
        k = self.recipients(len(scores))
        top = [int(m) for m in order[:k] if np.isfinite(scores[m])]
        if not top:
            return {}
        bottom = list(dict.fromkeys([int(m) for m in order[len(order) - k:]] + nan_members(scores)))
        pairs: dict[int, int] = {}
        for m in bottom:
            donor = top[int(rng.integers(len(top)))]  # drawn for every recipient, so skips shift no later draw
            self._pair(pairs, scores, donor, m)
        return pairs

    def recipients(self, pop_size: int) -> int:
        return min(math.ceil(self.quantile * pop_size), pop_size // 2)


class WinnerTakesAll(Selection):
    """Every member but the best copies the best."""

    name = "wta"

    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        best = int(rank_best_first(scores)[0])
        pairs: dict[int, int] = {}
        for m in range(len(scores)):
            if m != best:
                self._pair(pairs, scores, best, m)
        return pairs

    def recipients(self, pop_size: int) -> int:
        return pop_size - 1


class Sigma(Selection):
    """Underperformers (below mean - k std of the finite scores) copy a random leader (above mean + k std).

    With no leader nobody copies, whatever the spread below: Isaac Lab's PBT cuts,
    which copy only a member that stands out. The exception is the NaN policy: a NaN
    member copies a random leader, or the best member when there is none.
    """

    name = "sigma"

    def __init__(self, k: float = 1.0, rules: ExploitRules | None = None) -> None:
        super().__init__(rules)
        if not (math.isfinite(k) and k > 0):
            raise UsageError(f"sigma_k must be > 0 (leaders above mean + k std, underperformers below mean - k "
                             f"std; 1 is one standard deviation), got {k}")
        self.k = k

    def groups(self, scores: np.ndarray) -> tuple[list[int], list[int]]:
        """Leaders and underperformers (finite members only), in member order."""
        finite = scores[np.isfinite(scores)]
        if not len(finite):
            return [], []
        mean, std = float(np.mean(finite)), float(np.std(finite))
        leaders = [int(m) for m in np.flatnonzero(np.isfinite(scores) & (scores > mean + self.k * std))]
        under = [int(m) for m in np.flatnonzero(np.isfinite(scores) & (scores < mean - self.k * std))]
        return leaders, under

    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        leaders, under = self.groups(scores)
        nan = nan_members(scores)
        if not leaders:
            if not nan or not np.isfinite(scores).any():
                return {}
            leaders, under = [int(rank_best_first(scores)[0])], []
        pairs: dict[int, int] = {}
        for m in under + nan:
            donor = leaders[int(rng.integers(len(leaders)))]
            if self.rules.better(scores, donor, m):
                pairs[m] = donor
        return pairs

    def recipients(self, pop_size: int) -> int:
        # Chebyshev: at most n / (1 + k^2) members lie k std below the mean (Cantelli's one-sided bound).
        # k * k, not k**2: a large k (no member is ever that far out) overflows ** but makes * infinite
        return min(pop_size - 1, int(pop_size / (1 + self.k * self.k)))


SELECTIONS: dict[str, type[Selection]] = {cls.name: cls for cls in (Truncation, WinnerTakesAll, Sigma)}


def make_selection(name: str, quantile: float = 0.25, sigma_k: float = 1.0,
                   rules: ExploitRules | None = None) -> Selection:
    """The ``--selection`` rule ``name`` with its parameter (truncation's ``quantile``, sigma's ``sigma_k``)."""
    if name not in SELECTIONS:
        raise UsageError(f"unknown selection {name!r}; choose from {sorted(SELECTIONS)}")
    if name == Truncation.name:
        return Truncation(quantile, rules)
    if name == Sigma.name:
        return Sigma(sigma_k, rules)
    return WinnerTakesAll(rules)
