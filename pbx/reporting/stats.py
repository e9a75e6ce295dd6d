"""Aggregate statistics over runs with ``rliable`` (Agarwal et al., "Deep Reinforcement Learning at the Edge of
the Statistical Precipice", NeurIPS 2021).

Scores come in as rliable takes them: per strategy a matrix of shape (runs, tasks)
(the tasks are games: one, or several with min-max normalised scores), finite values
only; the caller leaves out runs without a score. Every estimate is rliable's: the
aggregates of :data:`AGGREGATES` (interquartile mean, mean, median, optimality gap)
with 95% stratified-bootstrap confidence intervals (runs resampled within each
task; percentile method), the probability of improvement over a baseline
(Mann-Whitney U statistic, bootstrapped independently per strategy), and the
performance profile (fraction of runs scoring above each threshold tau).

An interval needs :data:`MIN_RUNS` runs per task: a bootstrap over one or two seeds
only says the seeds differ, however many tasks there are. Even then a nominal 95%
interval from few runs covers the truth less often than 95%: :data:`COVERAGE` holds
what ``benchmarks/bench_coverage.py`` measured, and :func:`coverage_caution` the
line a table prints under cells that fall short.

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
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import scipy.stats

with warnings.catch_warnings():
    # arch and seaborn (imported by rliable) warn about pandas/numpy deprecations at import.
    warnings.simplefilter("ignore")
    from rliable import library as rly
    from rliable import metrics

MIN_RUNS = 3
"""Runs per task from which a confidence interval is given."""
REPS = 2000
"""Bootstrap resamples: rliable's default for profiles; enough for stable 95% percentile bounds."""
SEED = 0
"""Seed of the bootstrap, so a report of the same runs gives the same intervals."""
CONFIDENCE = 0.95
PROFILE_POINTS = 101
"""Thresholds tau at which a performance profile is evaluated."""
AGGREGATES: dict[str, Callable[[np.ndarray], float]] = {
    "IQM": metrics.aggregate_iqm,
    "mean": metrics.aggregate_mean,
    "median": metrics.aggregate_median,
    "optimality gap": metrics.aggregate_optimality_gap,
}
"""rliable's aggregates by the name a table gives them; the optimality gap (the shortfall below 1, the
normalised maximum) and the median of per-game means are for normalised scores over several games."""
ONE_GAME = ("IQM", "mean")
"""The aggregates of raw scores on one game (there the median of per-game means is the mean, and a gap
below 1 means nothing)."""
COVERAGE: dict[str, dict[int, float]] = {"IQM": {3: 0.71, 5: 0.87, 10: 0.92}, "mean": {3: 0.56, 5: 0.68, 10: 0.84}}
"""Statistic -> runs per game -> how often its printed 95% interval (percentile stratified bootstrap) covered
the truth in ``benchmarks/bench_coverage.py`` (300 trials; the lowest over normal, lognormal, bimodal and
three-game scores). The median, optimality gap and probability of improvement, unmeasured, are taken as the
mean (the median and the gap are means of per-game means or clipped scores)."""
ENOUGH_COVERAGE = 0.9
"""Cells whose measured coverage is below this get :func:`coverage_caution`'s line under their table."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% confidence interval (``low``/``high`` NaN when there is none)."""

    value: float
    low: float
    high: float
    runs: int
    """Runs per task the estimate rests on; the smaller group's for a comparison of two."""
    tasks: int = 1

    @property
    def has_interval(self) -> bool:
        return not np.isnan(self.low)


@dataclass(frozen=True)
class Summary:
    """One score (train or test) of every strategy that has it: aggregates, improvement, profile."""

    aggregates: dict[str, dict[str, Estimate]]
    """Aggregate name (a key of :data:`AGGREGATES`) -> strategy -> estimate."""
    improvement: dict[str, Estimate]
    """P(a run of the strategy beats a run of the baseline), for each strategy but the baseline."""
    taus: np.ndarray
    profiles: dict[str, np.ndarray]
    profile_cis: dict[str, np.ndarray]
    """(2, len(taus)) lower and upper bounds; only strategies with enough runs for an interval."""


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed NumPy's global RNG, which rliable's bootstrap draws from, and restore it afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def aggregate_func(names: Sequence[str]) -> Callable[[np.ndarray], np.ndarray]:
    """One function computing the aggregates ``names`` (keys of :data:`AGGREGATES`) of a (runs, tasks) matrix,
    as rliable's ``get_interval_estimates`` takes it: one bootstrap gives all of them."""
    funcs = [AGGREGATES[name] for name in names]
    return lambda scores: np.array([func(scores) for func in funcs])


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


def has_interval(*arrays: np.ndarray) -> bool:
    """Whether score matrices (runs, tasks, ...) are enough for a bootstrap interval: :data:`MIN_RUNS` runs per
    task or more in each (two seeds on each of many games are still two seeds a game)."""
    return all(len(a) >= MIN_RUNS for a in arrays)


def interval_estimates(scores: np.ndarray | tuple[np.ndarray, ...], func: Callable[..., np.ndarray],
                       reps: int = REPS, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``func``'s point estimate and its (2, ...) interval from rliable's stratified bootstrap; the interval is
    NaN when the scores are too few (:func:`has_interval`)."""
    arrays = scores if isinstance(scores, tuple) else (scores,)
    for array in arrays:
        if not np.isfinite(array).all() or not len(array):
            raise ValueError("scores must be finite with at least one run; leave out runs without a score")
    point = np.asarray(func(*arrays), dtype=float)
    if not has_interval(*arrays):
        return point, np.full((2, *point.shape), np.nan)
    with seeded(seed):
        _, intervals = rly.get_interval_estimates({"x": scores}, func, reps=reps,
                                                  confidence_interval_size=CONFIDENCE)
    return point, np.asarray(intervals["x"], dtype=float).reshape(2, *point.shape)


def estimates(scores: Mapping[str, np.ndarray], aggregates: Sequence[str], reps: int = REPS,
              seed: int = SEED) -> dict[str, dict[str, Estimate]]:
    """Aggregate name -> strategy -> estimate, for ``scores`` (strategy -> (runs, tasks) matrix): the
    aggregates ``aggregates`` (keys of :data:`AGGREGATES`), all from one bootstrap per strategy."""
    found: dict[str, dict[str, Estimate]] = {name: {} for name in aggregates}
    for label, matrix in scores.items():
        point, bounds = interval_estimates(matrix, aggregate_func(aggregates), reps, seed)
        for i, name in enumerate(aggregates):
            found[name][label] = Estimate(float(point[i]), float(bounds[0, i]), float(bounds[1, i]),
                                          len(matrix), matrix.shape[1])
    return found


def summarize(scores: Mapping[str, np.ndarray], baseline: str | None, aggregates: Sequence[str] = ONE_GAME,
              reps: int = REPS, seed: int = SEED) -> Summary:
    """Every statistic of one score for the strategies in ``scores`` (strategy -> (runs, tasks) matrix).

    Args:
        baseline: a key of ``scores`` the others' probability of improvement is measured against (None:
            no comparison).
        aggregates: the names (keys of :data:`AGGREGATES`) to estimate, all from one bootstrap.
    """
    improvement = {}
    if baseline is not None and baseline in scores:
        for label, matrix in scores.items():
            if label != baseline:
                pair = (matrix, scores[baseline])
                point, bounds = interval_estimates(pair, probability_of_improvement, reps, seed)
                improvement[label] = Estimate(float(point), float(bounds[0]), float(bounds[1]),
                                              min(len(matrix), len(scores[baseline])), matrix.shape[1])
    taus = thresholds(list(scores.values()))
    profiles, profile_cis = {}, {}
    for label, matrix in scores.items():
        if not has_interval(matrix):
            profiles[label] = run_profile(matrix, taus)
            continue
        with seeded(seed):
            profile, bounds = rly.create_performance_profile({label: matrix}, taus, custom_profile_func=run_profile,
                                                             reps=reps, confidence_interval_size=CONFIDENCE)
        profiles[label], profile_cis[label] = profile[label], np.asarray(bounds[label], dtype=float)
    return Summary(estimates(scores, aggregates, reps, seed), improvement, taus, profiles, profile_cis)


def thresholds(matrices: Iterable[np.ndarray], points: int = PROFILE_POINTS) -> np.ndarray:
    """Thresholds tau for a performance profile: from just below the lowest score to just above the highest,
    so every profile starts at 1 and ends at 0."""
    values = np.concatenate([np.ravel(m) for m in matrices] or [np.zeros(1)])
    low, high = float(values.min()), float(values.max())
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 1.0
    return np.linspace(low - pad, high + pad, points)


def curve(values: np.ndarray, reps: int = REPS, seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM over runs and tasks at each point of a (runs, tasks, points) array, with its 95% stratified-bootstrap
    band (NaN where :func:`has_interval` says the runs are too few): ``(iqm, low, high)``."""
    point, bounds = interval_estimates(values, iqm_per_point, reps, seed)
    return point, bounds[0], bounds[1]


def coverage(statistic: str, runs: int) -> float | None:
    """The measured coverage (:data:`COVERAGE`) of ``statistic``'s interval from ``runs`` runs per game: the
    figure of the largest measured count not above it; None below the smallest measured (worse still)."""
    figures = COVERAGE["IQM" if statistic == "IQM" else "mean"]
    measured = [n for n in figures if n <= runs]
    return figures[max(measured)] if measured else None


def coverage_caution(cells: Iterable[tuple[str, Estimate]]) -> str | None:
    """One line for under a table whose interval cells, each ``(statistic, estimate)``, rest on runs too few
    for their nominal 95% (measured coverage below :data:`ENOUGH_COVERAGE`); None when all are enough."""
    short = sorted({("IQM" if name == "IQM" else "mean", e.runs) for name, e in cells
                    if e.has_interval and (coverage(name, e.runs) or 0.0) < ENOUGH_COVERAGE})
    if not short:
        return None
    measured = "; ".join(f"the {name}'s " + ", ".join(f"{c:.0%}" for c in figures.values())
                         for name, figures in COVERAGE.items())
    counts = ", ".join(map(str, COVERAGE["IQM"]))
    where = ", ".join(f"{name} from {runs} runs" for name, runs in short)
    return (f"Caution: some intervals here cover the truth less often than their nominal 95% ({where} per game): "
            f"in simulation at {counts} runs per game they covered it {measured} (the other statistics taken as "
            f"the mean; benchmarks/bench_coverage.py, worst of four score distributions).")
