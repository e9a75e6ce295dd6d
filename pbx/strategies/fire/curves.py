"""FIRE's view of a run: the curves its evaluators and children drew, and how two curves are compared.

:class:`Rounds` reads the history as FIRE needs it (each member's curve since its last explore, each
evaluator's task, how long a member has waited); :class:`CurveComparison` compares two curves where they reach
the same score (PBT-Zoo's ``algo/firepbt.py``: the best-score difference and a one-sided binomial test). The
strategy (:mod:`pbx.strategies.fire`) decides from these; both are pure functions of the history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.stats import binomtest

from pbx.history import EVALUATOR_ROLE, RESULT_ROLE, History
from pbx.standings import rank_best_first


class Evaluation(NamedTuple):
    """An evaluator's current task, read off the history."""

    parent: int
    """The member of P2, P3, ... whose weights it copied."""
    child: int
    """The best member of the sub-population below at the start, whose config it trains with."""
    start: int
    """The first round it trained."""


@dataclass(frozen=True)
class CurveComparison:
    """Two curves compared from where they reach the same score, after smoothing each by a Gaussian kernel of
    ``smoothing`` points (0: raw, PBT-Zoo's)."""

    smoothing: float = 0.0

    def smooth(self, curve: list[float]) -> np.ndarray:
        values = np.asarray(curve, dtype=float)
        if self.smoothing <= 0 or len(values) < 2:
            return values
        steps = np.arange(len(values))
        weights = np.exp(-0.5 * ((steps[:, None] - steps[None, :]) / self.smoothing) ** 2)
        return weights @ values / weights.sum(axis=1)

    def score_diff(self, mine: list[float], theirs: list[float]) -> float:
        """How much better ``mine``'s best score is than ``theirs``'s over the stretch where both had reached the
        same score; for curves that never meet, PBT-Zoo's shifted-curve difference (:meth:`_shifted_diff`)."""
        if not mine or not theirs:
            return 0.0
        diff = self._overlap_diff(np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float))
        return self._shifted_diff(mine, theirs) if diff is None else diff

    def _overlap_diff(self, mine: np.ndarray, theirs: np.ndarray) -> float | None:
        """The best-score difference over the overlap of the two curves; None when they never meet."""
        span = overlap(self.smooth(mine), self.smooth(theirs))
        if span is None:
            return None
        i, j, n = span
        return float(max(mine[i:i + n]) - max(theirs[j:j + n]))

    def _shifted_diff(self, mine: list[float], theirs: list[float]) -> float:
        """Curves that never meet: 0 when ``mine`` is below; when it is entirely above, ``mine`` shifted down by
        each of 10 offsets from ``min(mine) - max(theirs)`` (touching) towards ``min(mine) - min(theirs)``
        (level starts), compared where the shifted curve meets ``theirs``, the best of those differences and 0.
        So a curve above the other but rising no faster scores 0, not its head start: FIRE rewards rates."""
        low, high = min(mine) - max(theirs), min(mine) - min(theirs)
        if low <= 0 or np.isclose(low, high):
            return 0.0
        values = np.asarray(mine, dtype=float)
        diffs = [self._overlap_diff(values - delta, np.asarray(theirs, dtype=float))
                 for delta in np.linspace(low, high, 10, endpoint=False)]
        return max(0.0, *(d for d in diffs if d is not None))

    def binomial(self, mine: list[float], theirs: list[float]) -> float:
        """One-sided binomial test that ``mine`` beats ``theirs`` point by point from the same score on."""
        if not mine or not theirs:
            return 1.0
        span = overlap(self.smooth(mine), self.smooth(theirs))
        if span is None:
            if min(mine) > max(theirs):
                return 0.0
            if max(mine) < min(theirs):
                return 1.0
            span = (0, 0, min(len(mine), len(theirs)))
        i, j, n = span
        wins = int(sum(a > b for a, b in zip(mine[i:i + n], theirs[j:j + n])))
        return float(binomtest(wins, n, alternative="greater").pvalue)


def overlap(mine: np.ndarray, theirs: np.ndarray) -> tuple[int, int, int] | None:
    """Where the two curves reach the same score: ``(i, j, n)``, the curves compared from ``mine[i]`` and
    ``theirs[j]`` for ``n`` points; None when the one that starts lower never reaches the other's start, or a
    curve is empty (every score NaN)."""
    if not len(mine) or not len(theirs):
        return None
    if mine[0] < theirs[0]:
        reached = np.flatnonzero(mine >= theirs[0])
        i, j = (int(reached[0]), 0) if len(reached) else (None, 0)
    else:
        reached = np.flatnonzero(theirs >= mine[0])
        i, j = (0, int(reached[0])) if len(reached) else (None, 0)
    if i is None:
        return None
    return i, j, min(len(mine) - i, len(theirs) - j)


class Rounds:
    """The history as (round, member) arrays, its curves by (round, member), and what FIRE reads off them."""

    def __init__(self, history: History, roles: np.ndarray) -> None:
        curves = history.curves
        self.points: dict[tuple[int, int], list[float]] = {
            (int(r), int(m)): group["score"].tolist() for (r, m), group in curves.groupby(["round", "member"])}
        frame = history.frame.sort_values(["round", "member"])
        shape = (history.last_round + 1, len(roles))
        self.roles = roles
        self.evaluators = [int(e) for e in np.flatnonzero(roles == EVALUATOR_ROLE)]
        self.last = history.last_round
        self.score = frame["score"].to_numpy(dtype=float).reshape(shape)
        self.parent = frame["parent"].to_numpy(dtype=int).reshape(shape)
        self.explored = frame["explored"].to_numpy(dtype=bool).reshape(shape)
        self.carried = frame["carried"].to_numpy(dtype=bool).reshape(shape)
        self.configs = [[tuple(config) for config in configs] for configs in
                        frame[history.hp_names].to_numpy(dtype=object).reshape(*shape, len(history.hp_names))]
        """Per round and member, the config trained with (to recognise the child an evaluator took its config from)."""

    def curve(self, member: int) -> list[float]:
        """The member's finite scores since its state was last exploited and explored, following the weights
        back through copies that kept the config (an evaluator's win): the curve FIRE compares. Each round adds
        the points taken within it, or its score where it has none (:mod:`pbx.curves`)."""
        rounds = []
        r = self.last
        while r >= 0:
            own = [] if self.carried[r, member] else [self.score[r, member]]  # a carried score is no new point
            rounds.append(self.points.get((r, member), own))
            if self.explored[r, member]:
                break
            member = self.parent[r, member]
            r -= 1
        return [float(s) for points in reversed(rounds) for s in points if np.isfinite(s)]

    def evaluation(self, evaluator: int) -> Evaluation | None:
        """The evaluator's task: from its last copy of a member of P2, P3, ...; None before its first one and
        while it is idle (its last copy was of P1's best)."""
        copied = np.flatnonzero(self.explored[1:, evaluator] & (self.parent[1:, evaluator] != evaluator)) + 1
        if not len(copied):
            return None
        start = int(copied[-1])
        parent = int(self.parent[start, evaluator])
        if self.roles[parent] in (RESULT_ROLE, EVALUATOR_ROLE):
            return None
        below = f"pop{int(str(self.roles[parent])[3:]) - 1}"
        # the child was chosen among the members of the sub-population below that were not being replaced then,
        # and the evaluator took its config: the member whose config it is (the best by score among equals)
        replaced = self.explored[start] & (self.parent[start] != np.arange(len(self.roles)))
        members = np.flatnonzero((self.roles == below) & ~replaced)
        same = [m for m in members if self.configs[start - 1][m] == self.configs[start][evaluator]]
        members = np.array(same) if same else members
        child = int(members[rank_best_first(self.score[start - 1, members])[0]])
        return Evaluation(parent, child, start)

    def waiting(self, member: int) -> tuple[int, int, int]:
        """Sort key of a free member of P2, ...: the round it has waited since (its last evaluation ended or it
        was replaced; 0), replaced members after evaluated ones (PBT-Zoo's -1), then member id."""
        since, replaced = 0, 0
        redone = np.flatnonzero(self.explored[:, member] & (self.parent[:, member] != member))
        if len(redone):
            since, replaced = int(redone[-1]), 1
        for e in self.evaluators:
            moved = self.explored[:, e] & (self.parent[:, e] != e)  # the rounds an evaluator took a new task
            for start in np.flatnonzero(moved & (self.parent[:, e] == member)):
                later = np.flatnonzero(moved[start + 1:])
                end = int(start + 1 + later[0]) if len(later) else self.last + 1
                if end > since or (end == since and replaced):
                    since, replaced = end, 0
        return since, replaced, member
