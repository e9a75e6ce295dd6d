"""Exploit step: which members copy whom.

Members are ranked by :func:`pbx.history.rank_best_first`, whose docstring holds
the NaN policy: NaN ranks last, ties keep member order.
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
        """Args: scores, one per member (index = member). Returns recipient -> donor."""


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
        k = min(math.ceil(self.quantile * len(scores)), len(scores) // 2)
        top, bottom = order[:k], order[len(order) - k:]
        return {int(m): int(top[rng.integers(k)]) for m in bottom}


class WinnerTakesAll(Selection):
    """Every member but the best copies the best."""

    name = "wta"

    def pairs(self, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        order = rank_best_first(scores)
        best = int(order[0])
        return {int(m): best for m in order[1:]}


SELECTIONS: dict[str, type[Selection]] = {cls.name: cls for cls in (Truncation, WinnerTakesAll)}


def make_selection(name: str, quantile: float) -> Selection:
    if name not in SELECTIONS:
        raise UsageError(f"unknown selection {name!r}; choose from {sorted(SELECTIONS)}")
    return Truncation(quantile) if name == Truncation.name else SELECTIONS[name]()
