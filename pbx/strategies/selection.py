"""Exploit step: which members copy whom.

Members are ranked by :func:`pbx.history.rank_best_first` (NaN last, ties in
member order). Copying needs information, so both rules follow one policy:

- a NaN member (diverged, or no episode to score) is never a donor;
- a member copies only a donor with a strictly better score, so tied or
  all-NaN scores copy nothing (the member id must never decide a copy);
- every NaN member is replaced while a finite donor exists, not only those that
  fall in the bottom quantile: a diverged member must not train on.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from pbx.errors import UsageError
from pbx.history import rank_best_first


class Selection(ABC):
    """Maps the latest scores to ``{recipient: donor}`` for the members that copy."""

    name: ClassVar[str]

    @abstractmethod
    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        """Args: scores, one per position. Returns recipient -> donor positions (empty: no exploit)."""

    @abstractmethod
    def recipients(self, pop_size: int) -> int:
        """How many members copy in a round whose scores are finite and distinct."""


def better(scores: np.ndarray, donor: int, recipient: int) -> bool:
    """Whether ``donor`` may be copied into ``recipient``: a finite score above the recipient's (or its NaN)."""
    return bool(np.isfinite(scores[donor]) and (np.isnan(scores[recipient]) or scores[donor] > scores[recipient]))


class Truncation(Selection):
    """The bottom ``quantile`` of the population copies a random member of the top ``quantile``.

    The quantile holds ``ceil(quantile * n)`` members, so a population of two
    still exploits (one copies the other), as in Jaderberg et al. (2017).
    """

    name = "truncation"

    def __init__(self, quantile: float = 0.25) -> None:
        if not 0 < quantile <= 0.5:
            raise UsageError(f"quantile must be in (0, 0.5], got {quantile}")
        self.quantile = quantile

    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        order = rank_best_first(scores)
        k = self.recipients(len(scores))
        top = [int(m) for m in order[:k] if np.isfinite(scores[m])]
        if not top:
            return {}
        nan = [int(m) for m in order if np.isnan(scores[m])]
        bottom = list(dict.fromkeys([int(m) for m in order[len(order) - k:]] + nan))
        pairs = {}
        for m in bottom:
            donor = top[int(rng.integers(len(top)))]  # drawn for every recipient, so skips shift no later draw
            if better(scores, donor, m):
                pairs[m] = donor
        return pairs

    def recipients(self, pop_size: int) -> int:
        return min(math.ceil(self.quantile * pop_size), pop_size // 2)


class WinnerTakesAll(Selection):
    """Every member but the best copies the best."""

    name = "wta"

    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        best = int(rank_best_first(scores)[0])
        return {m: best for m in range(len(scores)) if better(scores, best, m)}

    def recipients(self, pop_size: int) -> int:
        return pop_size - 1


SELECTIONS: dict[str, type[Selection]] = {cls.name: cls for cls in (Truncation, WinnerTakesAll)}


def make_selection(name: str, quantile: float) -> Selection:
    if name not in SELECTIONS:
        raise UsageError(f"unknown selection {name!r}; choose from {sorted(SELECTIONS)}")
    return Truncation(quantile) if name == Truncation.name else SELECTIONS[name]()
