"""Aggregate statistics over runs with ``rliable`` (Agarwal et al., "Deep Reinforcement Learning at the Edge of
the Statistical Precipice", NeurIPS 2021).

Scores come in as rliable takes them: per strategy a matrix of shape (runs, tasks)
(here the tasks are envs, usually one), finite values only; the caller leaves out
runs without a score. Every estimate is rliable's: the interquartile mean and the
mean with 95% stratified-bootstrap confidence intervals (percentile method), the
probability of improvement over a baseline (Mann-Whitney U statistic, bootstrapped
independently per strategy), and the performance profile (fraction of runs scoring
above each threshold tau).

Fewer than :data:`MIN_RUNS` runs give a point estimate and no interval: a bootstrap
over one or two seeds only says the seeds differ.

Reproducibility: rliable's ``StratifiedBootstrap`` draws its resamples from NumPy's
*global* legacy RNG (``np.random.choice`` in ``update_indices``) and ignores its
``random_state`` argument (which arch also deprecates). So each estimate runs
under :func:`seeded`, which seeds the global RNG and puts its state back after;
each strategy is seeded on its own, so adding a strategy to a report leaves the
others' intervals as they were.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np
import scipy.stats

with warnings.catch_warnings():
    # arch and seaborn (imported by rliable) warn about pandas/numpy deprecations at import.
    warnings.simplefilter("ignore")
    from rliable import library as rly
    from rliable import metrics

MIN_RUNS = 3
"""Runs (per strategy, with a score) from which a confidence interval is given."""
REPS = 2000
"""Bootstrap resamples: rliable's default for profiles; enough for stable 95% percentile bounds."""
SEED = 0
"""Seed of the bootstrap, so a report of the same runs gives the same intervals."""
CONFIDENCE = 0.95
PROFILE_POINTS = 101
"""Thresholds tau at which a performance profile is evaluated."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% confidence interval (``low``/``high`` NaN when there is none)."""

    value: float
    low: float
    high: float
    runs: int
    """Runs (per task) the estimate rests on; the smallest group's for a comparison of two."""

    @property
    def has_interval(self) -> bool:
        return not np.isnan(self.low)


@dataclass(frozen=True)
class Summary:
    """One score (train or test) of every strategy that has it: aggregates, improvement, profile."""

    iqm: dict[str, Estimate]
    mean: dict[str, Estimate]
    improvement: dict[str, Estimate]
    """P(a run of the strategy beats a run of the baseline), for each strategy but the baseline."""
    taus: np.ndarray
    profiles: dict[str, np.ndarray]
    profile_cis: dict[str, np.ndarray]
    """(2, len(taus)) lower and upper bounds; only strategies with :data:`MIN_RUNS` runs."""


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed NumPy's global RNG, which rliable's bootstrap draws from, and restore it afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def iqm_and_mean(scores: np.ndarray) -> np.ndarray:
    """rliable's interquartile mean and mean over all runs and tasks, as rliable's aggregate functions take."""
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])


def iqm_per_point(scores: np.ndarray) -> np.ndarray:
    """IQM over runs and tasks at each point of a (runs, tasks, points) array: rliable's ``aggregate_iqm``
    applied per point (its documented sample-efficiency curve), in one call so the bootstrap stays fast."""
    return scipy.stats.trim_mean(scores.reshape(-1, scores.shape[-1]), proportiontocut=0.25, axis=0)


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """P(a run of X scores above a run of Y), ties counting half, averaged over tasks: rliable's
    ``metrics.probability_of_improvement`` (its Mann-Whitney U over n_x n_y), counted pair by pair in one
    array operation; scipy's test per resample made a 2000-resample interval take seconds per strategy."""
    x, y = scores_x[:, None, :], scores_y[None, :, :]  # (n_x, 1, tasks) against (1, n_y, tasks)
    wins = (x > y).sum(axis=(0, 1)) + 0.5 * (x == y).sum(axis=(0, 1))  # the U statistic per task
    return float(np.mean(wins / (len(scores_x) * len(scores_y))))


def run_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The fraction of runs (over all tasks) scoring above each tau: rliable's ``score_distributions`` (its
    default profile), without the ``np.vectorize`` loop that made a 2000-resample profile take seconds."""
    return (scores.reshape(-1, 1) > taus).mean(axis=0)


def interval_estimates(scores: np.ndarray | tuple[np.ndarray, ...], func: Callable[..., np.ndarray],
                       reps: int = REPS, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``func``'s point estimate and its (2, ...) interval from rliable's stratified bootstrap; the interval is
    NaN when any score matrix has fewer than :data:`MIN_RUNS` runs."""
    arrays = scores if isinstance(scores, tuple) else (scores,)
    for array in arrays:
        if not np.isfinite(array).all() or not len(array):
            raise ValueError("scores must be finite with at least one run; leave out runs without a score")
    point = np.asarray(func(*arrays), dtype=float)
    if min(len(array) for array in arrays) < MIN_RUNS:
        return point, np.full((2, *point.shape), np.nan)
    with seeded(seed):
        _, intervals = rly.get_interval_estimates({"x": scores}, func, reps=reps,
                                                  confidence_interval_size=CONFIDENCE)
    return point, np.asarray(intervals["x"], dtype=float).reshape(2, *point.shape)


def summarize(scores: Mapping[str, np.ndarray], baseline: str | None, reps: int = REPS,
              seed: int = SEED) -> Summary:
    """Every statistic of one score for the strategies in ``scores`` (strategy -> (runs, tasks) matrix).

    ``baseline`` (a key of ``scores``, or None for no comparison) is the strategy the
    others' probability of improvement is measured against.
    """
    iqm, mean = {}, {}
    for name, matrix in scores.items():
        point, bounds = interval_estimates(matrix, iqm_and_mean, reps, seed)
        iqm[name], mean[name] = (Estimate(float(point[i]), float(bounds[0, i]), float(bounds[1, i]), len(matrix))
                                  for i in range(2))
    improvement = {}
    if baseline is not None and baseline in scores:
        for name, matrix in scores.items():
            if name != baseline:
                pair = (matrix, scores[baseline])
                point, bounds = interval_estimates(pair, probability_of_improvement, reps, seed)
                improvement[name] = Estimate(float(point), float(bounds[0]), float(bounds[1]),
                                             min(len(matrix), len(scores[baseline])))
    taus = thresholds(list(scores.values()))
    profiles, profile_cis = {}, {}
    for name, matrix in scores.items():
        if len(matrix) < MIN_RUNS:
            profiles[name] = run_profile(matrix, taus)
            continue
        with seeded(seed):
            profile, bounds = rly.create_performance_profile({name: matrix}, taus, custom_profile_func=run_profile,
                                                             reps=reps, confidence_interval_size=CONFIDENCE)
        profiles[name], profile_cis[name] = profile[name], np.asarray(bounds[name], dtype=float)
    return Summary(iqm, mean, improvement, taus, profiles, profile_cis)


def thresholds(matrices: Iterable[np.ndarray], points: int = PROFILE_POINTS) -> np.ndarray:
    """Thresholds tau for a performance profile: from just below the lowest score to just above the highest,
    so every profile starts at 1 and ends at 0."""
    values = np.concatenate([np.ravel(m) for m in matrices] or [np.zeros(1)])
    low, high = float(values.min()), float(values.max())
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 1.0
    return np.linspace(low - pad, high + pad, points)


def curve(values: np.ndarray, reps: int = REPS, seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM over runs at each point of a (runs, points) array, with its 95% bootstrap band (NaN below
    :data:`MIN_RUNS` runs): ``(iqm, low, high)``."""
    point, bounds = interval_estimates(values[:, None, :], iqm_per_point, reps, seed)
    return point, bounds[0], bounds[1]
