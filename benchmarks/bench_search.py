"""Search quality on the PBT paper's toy problem, every strategy side by side.

Prints the mean (and std) over seeds of the best member's final Q = 1.2 -
|theta|^2 after 200 steps per member with t_ready 4, for populations 2 and 4.
The best reachable in 200 steps with h in [0, 1] is about 1.1995.

    .venv/bin/python benchmarks/bench_search.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from pbx.strategies import STRATEGIES
from toy_runs import run_toy

POPULATIONS = (2, 4)


def final_best_q(search: str, pop_size: int, seed: int, folder: Path) -> float:
    return float(run_toy(folder, search, pop_size, seed).latest()["score"].max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    seeds = range(parser.parse_args().seeds)
    print(f"toy problem, 200 steps per member, t_ready 4, {len(seeds)} seeds: mean ± std of the best final Q")
    print(f"{'strategy':>8} | " + " | ".join(f"{'pop ' + str(p):>17}" for p in POPULATIONS) + " | seconds")
    with tempfile.TemporaryDirectory() as tmp:
        for search in STRATEGIES:  # registry order: baselines first
            cells, start = [], time.perf_counter()
            for pop in POPULATIONS:
                q = [final_best_q(search, pop, s, Path(tmp) / f"{search}-{pop}-{s}") for s in seeds]
                cells.append(f"{np.mean(q):.5f} ± {np.std(q):.5f}")
            print(f"{search:>8} | " + " | ".join(f"{c:>17}" for c in cells) + f" | {time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
