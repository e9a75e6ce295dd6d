"""How often does the 95% interval ``pbx.report`` prints cover the truth, at 3, 5 and 10 runs?

The report's intervals are rliable's stratified bootstrap (percentile method, through
``arch``) of the IQM and the mean. Their nominal 95% holds for many runs; with the
few seeds RL studies can afford, a bootstrap's spread is too narrow. This draws
``--trials`` score tables of n runs from a known distribution, computes the interval
each table would get, and counts how often it holds the distribution's true IQM and
mean (from 4 million draws). The same bootstrap is read with every method arch's
``conf_int`` offers without a nested bootstrap (``percentile``, ``basic``, ``bc``,
``bca``, ``norm``), to see whether one covers better at few runs.

Score distributions: ``normal``; ``lognormal`` (skewed, sigma 0.75); ``bimodal``
(RL's failed seeds: 80% near 1, 20% near 0.3); and ``3 games``: each run scores on
three games, one from each distribution, the table (runs, 3) resampled within each
game as the report's multi-game aggregates are.

    .venv/bin/python benchmarks/bench_coverage.py [--trials 200] [--reps 500]

Every interval method runs on the same resamples (arch's ``reuse``); the figures'
standard error is about sqrt(c (1 - c) / trials), 2.5 points at 200 trials.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Callable

import numpy as np
import scipy.stats

from pbx.reporting.stats import aggregate_func, seeded

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from rliable.library import StratifiedBootstrap

METHODS = ("percentile", "basic", "bc", "bca", "norm")
RUNS = (3, 5, 10)
STATISTICS = ("IQM", "mean")
Draw = Callable[[np.random.Generator, int], np.ndarray]
DISTRIBUTIONS: dict[str, Draw] = {
    "normal": lambda rng, n: rng.normal(0.5, 0.2, n),
    "lognormal": lambda rng, n: rng.lognormal(-1.0, 0.75, n),
    "bimodal": lambda rng, n: np.where(rng.random(n) < 0.8, rng.normal(1.0, 0.1, n), rng.normal(0.3, 0.1, n)),
}
SETTINGS: dict[str, list[Draw]] = {**{name: [draw] for name, draw in DISTRIBUTIONS.items()},
                                   "3 games": list(DISTRIBUTIONS.values())}
"""Each setting's distribution per game: a table of n runs has one column per game."""


def truth(games: list[Draw]) -> np.ndarray:
    """The IQM of all games' scores together and the mean of the games' means, from 4 million draws each."""
    rng = np.random.default_rng(12345)
    samples = np.stack([draw(rng, 4_000_000) for draw in games], axis=1)
    return np.array([scipy.stats.trim_mean(samples, 0.25, axis=None), samples.mean(axis=0).mean()])


def coverage(games: list[Draw], runs: int, trials: int, reps: int) -> dict[str, np.ndarray]:
    """Method -> the share of trials whose interval holds the truth, per statistic (IQM, mean)."""
    target = truth(games)
    func = aggregate_func(STATISTICS)
    rng = np.random.default_rng([runs, len(games)])
    hits = {method: np.zeros(len(STATISTICS)) for method in METHODS}
    for trial in range(trials):
        table = np.stack([draw(rng, runs) for draw in games], axis=1)  # (runs, games)
        with seeded(trial):
            bootstrap = StratifiedBootstrap(table)
            for i, method in enumerate(METHODS):
                low, high = bootstrap.conf_int(func, reps=reps, method=method, reuse=i > 0)
                hits[method] += (low <= target) & (target <= high)
    return {method: count / trials for method, count in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="score tables per setting and run count")
    parser.add_argument("--reps", type=int, default=500, help="bootstrap resamples per interval")
    args = parser.parse_args()
    start = time.time()
    print(f"coverage of the nominal 95% interval, {args.trials} trials x {args.reps} resamples\n")
    print("| scores | runs per game | statistic | " + " | ".join(METHODS) + " |")
    print("|---|---|---|" + "---|" * len(METHODS))
    for setting, games in SETTINGS.items():
        for runs in RUNS:
            found = coverage(games, runs, args.trials, args.reps)
            for s, statistic in enumerate(STATISTICS):
                cells = " | ".join(f"{found[method][s]:.0%}" for method in METHODS)
                print(f"| {setting} | {runs} | {statistic} | {cells} |", flush=True)
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
