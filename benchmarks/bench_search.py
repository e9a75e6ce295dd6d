"""Search quality on the PBT paper's toy problem, every strategy side by side, and on toy-cat every ``--cat_exp``.

toy: the mean (and std) over seeds of the best member's final Q = 1.2 - |theta|^2
after 200 steps per member with t_ready 4, for populations 2 and 4. The best
reachable in 200 steps with h in [0, 1] is about 1.1995.

toy-cat (the toy with a categorical ``optimiser``, adam clearly best; 100 steps,
t_ready 4, population 4): PB2 with each ``--cat_exp``, and PBT; per variant the
best final Q, how often the best final member runs adam, and the share of the
final population on adam. With h = (1, 1) throughout, adam ends at Q = 1.2000 and
the next best optimiser (momentum) at 1.1963.

A strategy that cannot run at a population size (FIRE needs at least 6
members) shows ``n/a`` in that cell and the reason under the table.

    .venv/bin/python benchmarks/bench_search.py [--seeds 10] [--cat-seeds 20] [--only toy|toy-cat]
        [--search PB2 PBT ...] [--cat-exp random exp3_dep ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from pbx.errors import UsageError
from pbx.strategies import CAT_EXPS, STRATEGIES, canonical_search
from toy_runs import run_toy

POPULATIONS = (2, 4)
BEST_OPTIMISER = "adam"


def final_best_q(search: str, pop_size: int, seed: int, folder: Path) -> float:
    return float(run_toy(folder, search, pop_size, seed).latest()["score"].max())


def toy(searches: list[str], seeds: range, tmp: Path) -> None:
    print(f"toy problem, 200 steps per member, t_ready 4, {len(seeds)} seeds: mean ± std of the best final Q")
    print(f"{'strategy':>8} | " + " | ".join(f"{'pop ' + str(p):>17}" for p in POPULATIONS) + " | seconds")
    skipped = []
    for search in searches:
        cells, start = [], time.perf_counter()
        for pop in POPULATIONS:
            try:
                q = [final_best_q(search, pop, s, tmp / f"{search}-{pop}-{s}") for s in seeds]
            except UsageError as refusal:  # raised while the config resolves, before any training
                cells.append("n/a")
                skipped.append(f"{search} at population {pop}: {refusal}")
                continue
            cells.append(f"{np.mean(q):.5f} ± {np.std(q):.5f}")
        print(f"{search:>8} | " + " | ".join(f"{c:>17}" for c in cells) + f" | {time.perf_counter() - start:.1f}")
    for note in skipped:
        print(f"n/a: {note}")


def toy_cat(cat_exps: list[str], seeds: range, tmp: Path) -> None:
    print(f"\ntoy-cat, population 4, 100 steps per member, t_ready 4, {len(seeds)} seeds "
          f"(mean ± std over seeds)")
    print(f"{'variant':>16} | {'best final Q':>19} | {'best on adam':>12} | {'final pop on adam':>17} | seconds")
    variants = [("PB2", c) for c in cat_exps] + [("PBT", "random")]
    for search, cat_exp in variants:
        start = time.perf_counter()
        q, best_adam, pop_adam = [], [], []
        for s in seeds:
            latest = run_toy(tmp / f"cat-{search}-{cat_exp}-{s}", search, 4, s, {"cat_exp": cat_exp},
                             env="toy-cat").latest()
            best = latest.loc[latest["score"].idxmax()]
            q.append(float(best["score"]))
            best_adam.append(best["optimiser"] == BEST_OPTIMISER)
            pop_adam.append(float(np.mean(latest["optimiser"] == BEST_OPTIMISER)))
        print(f"{search + ' ' + cat_exp:>16} | {np.mean(q):.5f} ± {np.std(q):.5f} | {np.mean(best_adam):>12.2f} | "
              f"{np.mean(pop_adam):.2f} ± {np.std(pop_adam):.2f}      | {time.perf_counter() - start:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--cat-seeds", type=int, default=20)
    parser.add_argument("--only", choices=("toy", "toy-cat"), default=None)
    # registry order, baselines first; replay is not a search (it retrains a schedule a run found)
    parser.add_argument("--search", nargs="+", default=[name for name in STRATEGIES if name != "replay"],
                        help="the strategies of the toy table (default: every search in the registry)")
    parser.add_argument("--cat-exp", nargs="+", choices=CAT_EXPS, default=list(CAT_EXPS),
                        help="PB2's variants in the toy-cat table, beside PBT (default: every --cat_exp)")
    args = parser.parse_args()
    try:
        searches = [canonical_search(name) for name in args.search]
    except UsageError as bad:
        parser.exit(2, f"error: {bad}\n")
    with tempfile.TemporaryDirectory() as tmp:
        if args.only != "toy-cat":
            toy(searches, range(args.seeds), Path(tmp))
        if args.only != "toy":
            toy_cat(args.cat_exp, range(args.cat_seeds), Path(tmp))


if __name__ == "__main__":
    main()
