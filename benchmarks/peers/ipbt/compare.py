"""Compare pbx's BG-PBT and IPBT with the authors' on PBT-Zoo's toys (``run_side_by_side.py``): a comparison that can fail.

Two answers per run, each taken the same way on both sides:

- **final population best**: the best score among the members of the run's last
  round (pbx: ``history.csv``'s last round; reference: each member's last entry in
  ``history_fitness.yaml``). This is pbx's answer for every strategy.
- **generation-end best**: the reference's own final answer (``best_info.yaml``):
  the best of the final population and of each finished generation's best member
  at its last round; pbx's run gets the same rule from its history (``--member kept``).

On ``toy-plain-noisy`` the strategies see noisy scores; each answer is the member they pick by those, read
by its noise-free score (pbx: its test score; the reference: ``true_fitness.jsonl``, and ``best_info.yaml``'s
test).

Each answer is read as its **log distance to the optimum**, ``log(1.2 - score)``
(both toys' scores are ``1.2 - theta^2``; lower is better): a gap of a few training
steps near the optimum is a visible difference in it, where it is in the sixth
decimal of the score. Per toy, algorithm and side: mean ± sd over seeds and the IQM
with rliable's 95% stratified-bootstrap interval; P(pbx closer than the reference)
with its interval.

**Equivalence** (:func:`equivalence`): the difference of the mean log distances,
pbx minus reference, with a 90% bootstrap interval over seeds (two one-sided tests
at 5%); the two are called equivalent on that answer when the interval lies inside
``± margin`` (``--margin``, :data:`MARGIN` by default), and "not shown" otherwise; where the interval
excludes 0 the two differ, and the verdict says so. **Ablation**: each arm (a kept departure
switched on alone, ``pbx-<arm>``) against pbx's default runs of the same toy and
seeds, the same difference with a 95% interval.

On the noisy toy two more measures read the whole run (:mod:`anytime`): the **area** (the best so far's log
distance averaged over the budget; the same margin) and the **budget to the threshold** (the share of the budget
spent when the best so far first came as close as the greedy schedule does at half the budget; margin
:data:`BUDGET_MARGIN` of the budget). The time table gives where each side's first restart fell on the budget.

    .venv/bin/python benchmarks/peers/ipbt/compare.py /work/studies/ipbt_side_v2 [--out comparison.md]

Several folders read as one study, each run from the one that holds it (a run in two is an error): the
committed records under ``docs/results/`` keep the reference's runs in ``ipbt_side_v2`` only, so a version's
tables are that version's folder and v2's, as ``docs/results.md`` gives them:

    .venv/bin/python benchmarks/peers/ipbt/compare.py docs/results/ipbt_side_v6 docs/results/ipbt_side_v2 \
        --toys toy-deceptive-zoo --out docs/results/ipbt_side_v6/comparison.md

Each committed ``comparison.md`` opens with the command that wrote it (folders relative to the repository).

The runs are read by :mod:`study` (the reference's crashes and guarded runs apart, gzipped records read as
plain ones); a reference run through the harness's guard gets rows of its own and no verdict.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from anytime import threshold
from study import ALGOS, ANSWERS, ANYTIME, GUARDED, SIDES, TOYS, Run, Runs, crashes, load, runs_by_seed, toy_budget

from pbx.reporting.stats import AGGREGATES, interval_estimates, probability_of_improvement
from pbx.reporting.tables import markdown_table

MIN_SEEDS = 8
"""The runs a side needs before :func:`equivalence` gives a verdict."""
ABLATION_MIN_SEEDS = 3
"""The paired seeds an ablation arm needs before :func:`ablation_table` places it against the margin."""
MARGIN = 0.1
"""Equivalence margin on the mean log distance (natural log), by default: 10% of the distance to the optimum. On
ToyPlain at the lowest lr the distance shrinks by a factor e^(-0.008) a step, so 0.1 is about 12 of the 300 steps,
and 0.05 (``--margin 0.05``, the restart task's) about 6."""
BUDGET_MARGIN = 0.05
"""Equivalence margin on the mean budget to the threshold, as a share of the budget (5 rounds of 100)."""


def values(runs: Runs, toy: str, side: str, algo: str, measure: str, seeds: list[int] | None = None) -> np.ndarray:
    """``measure`` (:meth:`Run.measure`) over ``seeds`` (default: every finished seed), in seed order."""
    by_seed = runs_by_seed(runs, toy, side, algo)
    return np.array([by_seed[k].measure(measure) for k in (sorted(by_seed) if seeds is None else seeds)])


def percentile_interval(boot: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    return float(low), float(high)


def mean_difference(a: np.ndarray, b: np.ndarray, level: float, reps: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its percentile-bootstrap interval at ``level`` (each sample resampled over its seeds)."""
    rng = np.random.default_rng(seed)
    boot = (rng.choice(a, (reps, len(a))).mean(axis=1) - rng.choice(b, (reps, len(b))).mean(axis=1))
    return (float(a.mean() - b.mean()), *percentile_interval(boot, level))


def equivalence(a: np.ndarray, b: np.ndarray, margin: float = MARGIN) -> str:
    """The verdict on mean(a) - mean(b): equivalent within ``margin`` when its 90% interval lies inside it and
    each side has :data:`MIN_SEEDS` runs (a bootstrap over fewer seeds says little about the spread); where it is
    not, and the 95% interval leaves out 0, the two differ."""
    diff, low, high = mean_difference(a, b, 0.90)
    if min(len(a), len(b)) < MIN_SEEDS:
        verdict = f"no verdict under {MIN_SEEDS} seeds a side"
    elif -margin < low and high < margin:
        verdict = "equivalent"
    else:
        _, low95, high95 = mean_difference(a, b, 0.95)
        verdict = "not shown; they differ (95% CI leaves out 0)" if low95 > 0 or high95 < 0 else "not shown"
    return f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]: {verdict}"


def interval(value: float, bounds: np.ndarray, digits: int) -> str:
    low, high = float(bounds[0]), float(bounds[1])
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]" if np.isfinite(low) else f"{value:.{digits}f}"


def column_head(measure: str, budget: int | None = None) -> str:
    """The column head of ``measure``'s value (``budget``: the toy's, for the threshold)."""
    if measure == "area":
        return "log(1.2 − best so far), mean over the budget"
    if measure == "budget":
        return f"share of the budget to log(1.2 − best so far) ≤ {threshold(budget or 0):.2f}"
    return "log(1.2 − score)"


def score_table(runs: Runs, toy: str, answer: str, margin: float = MARGIN) -> str:
    """Rows per algorithm and side: runs, mean ± sd and IQM [95% CI] of ``answer``'s measure; P(pbx better) and
    the equivalence verdict at ``margin`` on the pbx row."""
    rows = []
    for algo in ALGOS:
        v = {side: values(runs, toy, side, algo, answer) for side in (*SIDES, GUARDED)}
        for side, x in v.items():
            if not len(x):
                continue
            iqm, bounds = interval_estimates(x[:, None], AGGREGATES["IQM"])
            sd = x.std(ddof=1) if len(x) > 1 else 0.0
            label = f"{side} (pbx's rule at flat generations: not the reference)" if side == GUARDED else side
            verdict = "no verdict: not the authors' code" if side == GUARDED else ""
            rows.append([algo, label, str(len(x)), f"{x.mean():.3f} ± {sd:.3f}", interval(float(iqm), bounds, 3), "",
                         verdict])
            if side == "pbx" and len(v["reference"]):
                p, bounds = interval_estimates((-x[:, None], -v["reference"][:, None]), probability_of_improvement)
                rows[-1][-2:] = [interval(float(p), bounds, 2), equivalence(x, v["reference"], margin)]
    better = "sooner" if answer == "budget" else "closer"
    return markdown_table(["algorithm", "side", "runs", f"{column_head(answer, toy_budget(runs, toy))}, mean ± sd",
                           "IQM [95% CI]", f"P(pbx {better}) [95% CI]", f"pbx − reference, 90% CI (margin ±{margin})"],
                          rows)


def paired_difference(a: np.ndarray, b: np.ndarray, level: float, reps: int = 10_000,
                      seed: int = 0) -> tuple[float, float, float]:
    """mean(a - b) over paired seeds and its percentile-bootstrap interval at ``level`` (the seeds resampled)."""
    d = a - b
    boot = d[np.random.default_rng(seed).integers(0, len(d), (reps, len(d)))].mean(axis=1)
    return (float(d.mean()), *percentile_interval(boot, level))


def ablation_table(runs: Runs, toy: str, answer: str, margin: float = MARGIN) -> str:
    """Rows per algorithm and arm: runs, mean log distance, and arm minus pbx's default on the same seeds (paired)
    with a 95% interval: an arm run on fewer seeds than the default is held against those seeds' default runs."""
    rows = []
    arms = sorted(side for side in runs.get(toy, {}) if side.startswith("pbx-"))
    for algo in ALGOS:
        base = values(runs, toy, "pbx", algo, answer)
        if not len(base):
            continue
        rows.append([algo, "pbx (default)", str(len(base)), f"{base.mean():.3f}", "", ""])
        for arm in arms:
            seeds = sorted(set(runs_by_seed(runs, toy, arm, algo)) & set(runs_by_seed(runs, toy, "pbx", algo)))
            if not seeds:
                continue
            x = values(runs, toy, arm, algo, answer, seeds)
            diff, low, high = paired_difference(x, values(runs, toy, "pbx", algo, answer, seeds), 0.95)
            inside = ("too few seeds" if len(seeds) < ABLATION_MIN_SEEDS
                      else "inside" if -margin < low and high < margin
                      else "outside" if low > margin or high < -margin else "not told apart")
            rows.append([algo, arm.removeprefix("pbx-"), str(len(x)), f"{x.mean():.3f}",
                         f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]", inside])
    return markdown_table(["algorithm", "arm", "runs", f"{column_head(answer, toy_budget(runs, toy))}, mean",
                           "arm − default, same seeds [95% CI]", f"against ±{margin}"], rows)


def time_table(runs: Runs, toy: str) -> str:
    rows = []
    for side in sorted(runs.get(toy, {})):
        for algo in ALGOS:
            by_seed = runs_by_seed(runs, toy, side, algo)
            group = [r for _, r in sorted(by_seed.items())]
            if not group:
                continue
            wall, own = np.array([r.wall_s for r in group]), np.array([r.own_s for r in group])
            restarts, guards = np.array([r.restarts for r in group]), np.array([r.flat_guards for r in group])
            first = np.array([r.restart_at[0] for r in group if r.restart_at])
            rows.append([algo, side, str(len(group)), f"{wall.mean():.0f}", f"{own.mean():.0f}",
                         f"{restarts.mean():.2f} ({restarts.min()}–{restarts.max()})",
                         " ".join(f"s{k}:{r.restarts}" for k, r in sorted(by_seed.items())),
                         f"{first.mean():.0f} ({first.min()}–{first.max()})" if len(first) else "",
                         f"{guards.sum()} in {(guards > 0).sum()} runs" if side == GUARDED else ""])
    return markdown_table(["algorithm", "side", "runs", "wall s/run", "run's own clock s/run",
                           "generation ends/run (min–max)", "generation ends by seed",
                           "first restart at, budget (min–max)", "flat generations guarded"], rows)


def crash_table(runs: Runs, toy: str) -> str:
    """The reference runs that stopped with an error: per algorithm, how many, and where each stopped."""
    rows = []
    for side in (*SIDES[1:], GUARDED):
        for algo in ALGOS:
            for seed, c in sorted(crashes(runs, toy, side, algo).items()):
                rows.append([algo, side, f"s{seed}", str(c.last_tick), c.error, c.frame, f"{c.wall_s:.0f}"])
    return markdown_table(["algorithm", "side", "seed", "last round started (t)", "error", "raised through",
                           "wall s"], rows) if rows else "none"


def report(*roots: Path, toys: list[str] | None = None, margin: float = MARGIN, seeds: int | None = None) -> str:
    """The tables of the runs under ``roots`` (read as one study), for ``toys`` (default: every toy they hold), with
    the equivalence ``margin`` on the log distance."""
    runs = load(*roots, seeds=seeds)
    command = " ".join(["benchmarks/peers/ipbt/compare.py", *map(str, roots), *(["--toys", *toys] if toys else []),
                        *(["--margin", f"{margin:g}"] if margin != MARGIN else []),
                        *(["--seeds", str(seeds)] if seeds is not None else [])])
    toys = toys or [t for t in TOYS if t in runs] + sorted(set(runs) - set(TOYS))
    lines = ["# pbx's BG-PBT and IPBT against the authors' code on PBT-Zoo's toys", "",
             f"`{command}`", "",
             f"Population 8, step 10. Score: log(1.2 − score), the log distance to the optimum "
             f"(lower is better). Equivalence margin ±{margin} on its mean. Intervals: rliable's stratified "
             f"bootstrap over seeds (IQM, P), a percentile bootstrap over seeds (differences).", ""]
    for toy in toys:
        lines += [f"## {toy}", ""]
        measures = {**ANSWERS, **(ANYTIME if toy_budget(runs, toy) else {})}
        for answer, title in measures.items():
            at = BUDGET_MARGIN if answer == "budget" else margin
            lines += [f"### {title}: side by side", "", score_table(runs, toy, answer, at), "",
                      f"### {title}: ablation (pbx)", "", ablation_table(runs, toy, answer, at), ""]
        lines += ["### generation ends and wall time", "", time_table(runs, toy), "",
                  "### reference runs that stopped with an error (the authors' code, unguarded)", "",
                  crash_table(runs, toy), ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("root", type=Path, nargs="+", help="the study's folder (run_side_by_side.py --dir); several "
                   "read as one study")
    p.add_argument("--toys", nargs="+", choices=TOYS, help="the toys to report (default: every toy of the runs)")
    p.add_argument("--seeds", type=int, help="read seeds 0 .. N-1 only (default: every seed of the runs): a table "
                   "planned at N seeds stays what it was when more seeds are added")
    p.add_argument("--out", type=Path, help="also write the report here")
    p.add_argument("--margin", type=float, default=MARGIN, help=f"the equivalence margin on the mean log distance "
                   f"(default {MARGIN})")
    args = p.parse_args()
    if not 0 < args.margin < np.inf:
        p.error(f"--margin must be a positive number, got {args.margin}")
    if args.seeds is not None and args.seeds < 1:
        p.error(f"--seeds must be 1 or more, got {args.seeds}")
    text = report(*args.root, toys=args.toys, margin=args.margin, seeds=args.seeds)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
