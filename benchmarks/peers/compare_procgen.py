"""Compare pbx's PPO with CleanRL's on ProcGen at matched env steps (the runs of ``procgen_study.py``).

Both sides are scored the same way: the running mean of the last 100 finished
training episodes (pbx: ``score100`` at each round's end; CleanRL: its curve file,
taken at the same steps, every 65,536). At each matched step and per game it
gives each side's mean and spread over seeds; over the games it gives each
side's IQM of min-max normalised scores (ProcGen's easy ranges) with rliable's
95% stratified-bootstrap interval, and P(pbx > CleanRL) with its interval. It
does the same for the area under each run's curve (its mean normalised score
over the matched steps), the one number per run that uses the whole curve.
train-procgen's three stored runs (``TRAIN_PROCGEN``) are drawn beside them.

    .venv/bin/python benchmarks/peers/compare_procgen.py [docs/results/procgen_peer] [--out DIR]

A run folder of the study (``procgen_study.py --dir``) can be read instead, runs in progress included.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pbx.reporting.games import EASY_RANGES, normalise
from pbx.reporting.plots import Band, plot_comparison
from pbx.reporting.stats import AGGREGATES, interval_estimates, probability_of_improvement
from pbx.reporting.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]
ROUND = 65_536
SIDES = ("pbx", "cleanrl")
TRAIN_PROCGEN: dict[str, list[list[float]]] = {
    "bigfish": [[1.14, 0.88, 1.16, 0.77, 1.05, 1.11, 1.19, 1.16, 1.34, 1.68, 1.36, 1.54, 1.87, 2.02, 2.26, 2.53],
                [0.95, 1.16, 0.78, 0.77, 1.09, 1.33, 1.24, 1.3, 1.47, 1.63, 1.64, 1.3, 1.73, 1.71, 1.9, 1.75],
                [1.03, 0.81, 1.17, 1.25, 1.09, 1.2, 1.44, 1.31, 1.15, 1.75, 1.59, 1.46, 1.42, 1.73, 2.51, 2.17]],
    "starpilot": [[2.23, 2.66, 2.94, 2.96, 3.84, 4.45, 4.78, 4.67, 4.89, 5.22, 5.65, 5.86, 6.64, 6.99, 7.06, 8.16],
                  [1.58, 2.71, 3.35, 3.33, 3.77, 3.94, 4.48, 4.09, 5.18, 5.53, 5.23, 4.69, 6.23, 6.21, 7.01, 6.93],
                  [1.64, 2.33, 2.57, 3.5, 3.78, 3.74, 5.16, 4.79, 5.73, 6.39, 5.41, 6.14, 7.04, 7.66, 7.29, 7.79]],
}
"""train-procgen's easy-200 runs 0-2 (``openai/train-procgen`` at 1a2ae21,
``results/easy-200-run{i}/progress-{game}-train.csv``): ``eprewmean`` at 65,536 k steps, k = 1..16 (its
rows fall on these steps exactly: 16,384 steps an update)."""
_RUN = re.compile(r"^(pbx|cleanrl)-s(\d+)$")


def curve(folder: Path, side: str) -> pd.Series:
    """One run's running mean of 100 episodes, indexed by env steps (multiples of 65,536)."""
    if side == "pbx":
        frame = pd.read_csv(folder / "history.csv")
        series = pd.Series(frame["score100"].to_numpy(float), index=frame["steps"].to_numpy(int))
    else:
        frame = pd.read_csv(folder / "curve.csv")
        series = pd.Series(frame["mean100"].to_numpy(float), index=frame["steps"].to_numpy(int))
    return series[(series.index % ROUND == 0) & series.notna()]


def load(root: Path) -> dict[str, dict[str, dict[int, pd.Series]]]:
    """game -> side -> seed -> curve, for every run folder under ``root/<game>/<side>-s<seed>``."""
    runs: dict[str, dict[str, dict[int, pd.Series]]] = {}
    for folder in sorted(root.glob("*/*")):
        match = _RUN.match(folder.name)
        if not folder.is_dir() or match is None:
            continue
        side, seed = match.group(1), int(match.group(2))
        found = curve(folder, side)
        if len(found):
            runs.setdefault(folder.parent.name, {}).setdefault(side, {})[seed] = found
    return runs


def matched_steps(runs: dict[str, dict[str, dict[int, pd.Series]]]) -> np.ndarray:
    """The steps every run of both sides reached, on every game that has both sides."""
    ends = [int(c.index.max()) for sides in runs.values() for seeds in sides.values() for c in seeds.values()]
    return np.arange(ROUND, min(ends) + 1, ROUND) if ends else np.array([], dtype=int)


def matrix(runs: dict[str, dict[int, pd.Series]], side: str, game: str, steps: np.ndarray) -> np.ndarray:
    """(seeds, points) normalised scores of one side on one game."""
    return np.array([normalise(c.reindex(steps).to_numpy(float), EASY_RANGES[game])
                     for _, c in sorted(runs[side].items())])


def mean_sd(values: np.ndarray) -> str:
    """``mean ± sample sd`` (sd 0 for one run)."""
    return f"{values.mean():.2f} ± {values.std(ddof=1) if len(values) > 1 else 0.0:.2f}"


def fmt(estimate: tuple[float, float, float]) -> str:
    value, low, high = estimate
    return f"{value:.3g} [{low:.3g}, {high:.3g}]" if np.isfinite(low) else f"{value:.3g}"


def compare(runs: dict[str, dict[str, dict[int, pd.Series]]], out: Path | None) -> str:
    games = sorted(g for g, sides in runs.items() if set(SIDES) <= set(sides))
    runs = {g: runs[g] for g in games}
    steps = matched_steps(runs)
    if not len(steps):
        return "No game has finished runs of both sides yet."
    n = {side: min(len(runs[g][side]) for g in games) for side in SIDES}
    lines = [f"# pbx's PPO against CleanRL's on ProcGen ({', '.join(games)}; easy, 200 levels)", "",
             f"Runs per game: pbx {n['pbx']}, CleanRL {n['cleanrl']} (the first seeds of each); matched steps "
             f"{steps[0]:,} to {steps[-1]:,}. Score: the running mean of the last 100 finished training "
             f"episodes. 95% intervals: rliable's stratified bootstrap over seeds (none below 3 runs a game).", ""]
    # every fourth round (262,144 steps) and the last
    picks = sorted({*range(3, len(steps), 4), len(steps) - 1})
    rows = []
    for game in games:
        for step in steps[picks]:
            raw = {side: np.array([c.get(step, np.nan) for _, c in sorted(runs[game][side].items())][:n[side]])
                   for side in SIDES}
            k = int(step // ROUND) - 1
            ref = [r[k] for r in TRAIN_PROCGEN.get(game, []) if k < len(r)]
            rows.append([game, f"{step:,}", *(mean_sd(raw[side]) for side in SIDES),
                         mean_sd(np.array(ref)) if ref else "n/a"])
        # each run's mean over all matched steps: one round's noise (large on bigfish) averages out
        area = {side: np.array([c.reindex(steps).mean() for _, c in sorted(runs[game][side].items())][:n[side]])
                for side in SIDES}
        ks = (steps // ROUND).astype(int) - 1
        ref = [np.mean([r[k] for k in ks]) for r in TRAIN_PROCGEN.get(game, []) if ks[-1] < len(r)]
        rows.append([game, "area (mean over the steps)", *(mean_sd(area[side]) for side in SIDES),
                     mean_sd(np.array(ref)) if ref else "n/a"])
    lines += [markdown_table(["game", "env steps", "pbx (mean ± sd)", "CleanRL (mean ± sd)",
                              "train-procgen runs 0-2"], rows), ""]
    iqm = AGGREGATES["IQM"]
    agg_rows = []
    mats = {side: np.stack([matrix({s: dict(list(sorted(runs[g][s].items()))[:n[s]]) for s in SIDES}, side, g,
                                   steps) for g in games], axis=1) for side in SIDES}  # (seeds, games, points)
    for i in picks:
        at = {side: mats[side][:, :, i] for side in SIDES}
        est = {side: interval_estimates(at[side], iqm) for side in SIDES}
        p, bounds = interval_estimates((at["pbx"], at["cleanrl"]), probability_of_improvement)
        agg_rows.append([f"{steps[i]:,}", *(fmt((float(e[0]), float(e[1][0]), float(e[1][1]))) for e in
                                              est.values()), fmt((float(p), float(bounds[0]), float(bounds[1])))])
    area = {side: mats[side].mean(axis=2) for side in SIDES}  # (seeds, games): mean normalised score over steps
    est = {side: interval_estimates(area[side], iqm) for side in SIDES}
    p, bounds = interval_estimates((area["pbx"], area["cleanrl"]), probability_of_improvement)
    agg_rows.append(["area (mean over the steps)", *(fmt((float(e[0]), float(e[1][0]), float(e[1][1])))
                                                     for e in est.values()),
                     fmt((float(p), float(bounds[0]), float(bounds[1])))])
    lines += ["Over the games, normalised scores (min-max, ProcGen easy ranges):", "",
              markdown_table(["env steps", "pbx IQM", "CleanRL IQM", "P(pbx > CleanRL)"], agg_rows), ""]
    if out is not None:
        panels = []
        for game in games:
            bands = []
            for side, label in (("pbx", "pbx"), ("cleanrl", "CleanRL")):
                ys = np.array([c.reindex(steps).to_numpy(float) for _, c in sorted(runs[game][side].items())])
                bands.append(Band(label, f"n={len(ys)}, mean, min–max", steps, ys.mean(0), ys.min(0), ys.max(0)))
            if game in TRAIN_PROCGEN:
                ref = np.array(TRAIN_PROCGEN[game])[:, :len(steps)]
                grid = steps[:ref.shape[1]]
                bands.append(Band("train-procgen", "n=3, mean, min–max", grid, ref.mean(0), ref.min(0), ref.max(0)))
            panels.append((f"{game}: mean of last 100 training episodes", bands))
        out.mkdir(parents=True, exist_ok=True)
        plot_comparison(panels, "pbx's PPO and CleanRL's on ProcGen (easy, 200 levels)", out / "curves.png")
        (out / "comparison.md").write_text("\n".join(lines))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("root", nargs="?", type=Path, default=ROOT / "docs" / "results" / "procgen_peer",
                   help="the study's results (or its run folder)")
    p.add_argument("--out", type=Path, default=None, help="write comparison.md and curves.png here")
    args = p.parse_args()
    if not args.root.is_dir():
        p.error(f"{args.root} is not a folder")
    print(compare(load(args.root), args.out))


if __name__ == "__main__":
    main()
