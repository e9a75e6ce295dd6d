"""A study: strategies x games x seeds, and the numbers its tables and figures show.

:func:`make_study` arranges pooled runs (:mod:`pbx.reporting.pooling`) by strategy
and game and decides the scale: raw scores for one game, min-max normalised scores
(:mod:`pbx.reporting.games`) across several, or where the user gives a range. The
methods compute, for a run score (:data:`pbx.reporting.scores.SCORES`), each
strategy's (runs, games) score matrix, rliable's statistics of it, each game's own
estimates and the learning curves. Writing them is :mod:`pbx.reporting.comparison`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pbx.errors import UsageError
from pbx.reporting import stats
from pbx.reporting.games import Ranges, normalise
from pbx.reporting.plots import Band
from pbx.reporting.pooling import Pooled
from pbx.reporting.runs import Run
from pbx.reporting.scores import COLUMNS, run_score, score_curve


@dataclass(frozen=True)
class Study:
    """Runs to compare, label -> game -> runs, and how their statistics are computed."""

    cells: dict[str, dict[str, list[Run]]]
    games: list[str]
    ranges: dict[str, tuple[float, float]] | None
    """Each game's normalisation range; None: raw scores (one game)."""
    baseline: str | None
    k: int
    reps: int
    notes: tuple[str, ...] = ()
    """What a reader of the numbers must know of the runs pooled into them (:attr:`Pooled.notes`)."""

    @property
    def labels(self) -> list[str]:
        return list(self.cells)

    @property
    def aggregates(self) -> tuple[str, ...]:
        return tuple(stats.AGGREGATES) if self.ranges is not None else stats.ONE_GAME

    @property
    def subject(self) -> str:
        """What the study is on, for titles: the game, or ``N games (normalised)``."""
        if len(self.games) == 1:
            return self.games[0] + (" (normalised)" if self.ranges is not None else "")
        return f"{len(self.games)} games, normalised"

    def runs(self, label: str) -> list[Run]:
        return [run for game in self.games for run in self.cells[label][game]]

    def per_game(self, label: str) -> int:
        """The most runs the strategy has on one game."""
        return max(len(runs) for runs in self.cells[label].values())

    def scores(self, label: str, game: str, kind: str, column: int, scale: bool = True) -> np.ndarray:
        """The finite ``kind`` scores (``column`` 0 train, 1 test) of the strategy's runs on ``game`` in seed
        order, normalised when the study is (and ``scale``)."""
        values = np.array([run_score(run, kind, self.k)[column] for run in self.cells[label][game]])
        values = values[np.isfinite(values)]
        return normalise(values, self.ranges[game]) if scale and self.ranges is not None else values

    def matrix(self, label: str, kind: str, column: int) -> np.ndarray | None:
        """The strategy's (runs, games) matrix as rliable takes it: as many runs per game as every game has
        with a score (the first in seed order); None when a game has none."""
        per_game = [self.scores(label, game, kind, column) for game in self.games]
        runs = min(len(values) for values in per_game)
        return np.stack([values[:runs] for values in per_game], axis=1) if runs else None

    def summary(self, kind: str, column: int) -> stats.Summary:
        """rliable's statistics of the ``kind`` score ``column`` per strategy; strategies without it are left
        out."""
        matrices = {label: m for label in self.labels if (m := self.matrix(label, kind, column)) is not None}
        baseline = self.baseline if self.baseline in matrices else None
        return stats.summarize(matrices, baseline, self.aggregates, self.reps)

    def game_means(self, game: str, kind: str, column: int) -> dict[str, stats.Estimate]:
        """Each strategy's mean raw ``kind`` score on one game with its bootstrap interval."""
        matrices = {label: values[:, None] for label in self.labels
                    if len(values := self.scores(label, game, kind, column, scale=False))}
        return stats.estimates(matrices, ("mean",), self.reps)["mean"]

    def band(self, label: str, kind: str, column: str) -> Band | None:
        """The strategy's learning curve of the ``kind`` score's ``column``: IQM over runs (and games,
        normalised) with its 95% stratified-bootstrap band; below enough runs the mean, and min-max. None
        if no run has the column, or the runs' curves share no step (nothing to draw over them all).

        Runs are put on a common step grid (the union of their rounds' steps, over the range all runs
        cover) by linear interpolation, which is exact when the runs share ``t_ready``.
        """
        curves = {game: [c for run in self.cells[label][game] if len((c := score_curve(run, kind, column))[0])]
                  for game in self.games}
        runs = min(len(found) for found in curves.values())
        if not runs:
            return None
        every = [c for found in curves.values() for c in found[:runs]]
        steps = np.unique(np.concatenate([x for x, _ in every]))
        steps = steps[(steps >= max(x[0] for x, _ in every)) & (steps <= min(x[-1] for x, _ in every))]
        if not len(steps):  # no step all runs cover: say a test score taken only at the end, runs ending apart
            return None
        ys = np.stack([np.array([self._scale(game, np.interp(steps, x, y)) for x, y in found[:runs]])
                       for game, found in curves.items()], axis=1)  # (runs, games, points)
        if stats.has_interval(ys):
            n = f"n={runs}" + (f"×{len(self.games)}" if len(self.games) > 1 else "")
            return Band(label, f"{n}, IQM, 95% CI", steps, *stats.curve(ys, self.reps))
        flat = ys.reshape(-1, len(steps))
        mean = flat.mean(axis=0)
        if len(flat) == 1:
            return Band(label, "n=1", steps, mean, mean, mean)
        return Band(label, f"n={len(flat)}, mean, min–max", steps, mean, flat.min(axis=0), flat.max(axis=0))

    def _scale(self, game: str, values: np.ndarray) -> np.ndarray:
        return normalise(values, self.ranges[game]) if self.ranges is not None else values


def make_study(pooled: Pooled, ranges: Ranges, baseline: str | None, k: int, reps: int) -> Study:
    """Arrange pooled runs by strategy and game.

    Scores are normalised when there are several games, or the user gave the one
    game's range; several games need a range for each, and every strategy needs runs
    on every game (an aggregate over fewer games would compare different things).
    """
    games = list(dict.fromkeys(run.env for runs in pooled.groups.values() for run in runs))
    cells = {label: {game: sorted((run for run in runs if run.env == game), key=lambda run: run.seed)
                     for game in games} for label, runs in pooled.groups.items()}
    for label, by_game in cells.items():
        lacking = [game for game, runs in by_game.items() if not runs]
        if lacking:
            raise UsageError(f"{label!r} has no runs on {', '.join(lacking)}: an aggregate over several games "
                             f"needs every strategy on every game")
    found = {game: ranges.of([run for by_game in cells.values() for run in by_game[game]]) for game in games}
    scaled: dict[str, tuple[float, float]] | None = None
    if len(games) > 1:
        lacking = [game for game, bounds in found.items() if bounds is None]
        if lacking:
            raise UsageError(f"runs on several games ({', '.join(games)}) need normalisation ranges, and "
                             f"{', '.join(lacking)} has none (built in: ProcGen's easy mode): give --range "
                             f"{lacking[0]}=MIN,MAX, or report one game at a time")
        scaled = {game: bounds for game, bounds in found.items() if bounds is not None}
    elif games[0] in ranges.given:
        scaled = {games[0]: ranges.given[games[0]]}
    return Study(cells, games, scaled, pooled.label(baseline), k, reps, pooled.notes)


def runs_of(study: Study, labels: Sequence[str]) -> list[str]:
    """``- label: `path`, ...`` lines naming every run of each strategy, for under a table."""
    return [f"- {label}: " + ", ".join(f"`{run.path}`" for run in study.runs(label)) for label in labels]
