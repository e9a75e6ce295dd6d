"""``python -m pbx.report RUN_DIR [RUN_DIR ...]``: plots and results tables from run or sweep folders.

Each run folder gets ``RUN_DIR/report/`` (scores.png, schedules.png, summary.md);
several runs, one sweep folder, or several (one per game) get a comparison per
strategy in ``--out``: learning curves, headline numbers, and rliable's statistics
with 95% stratified-bootstrap intervals, over several games on normalised scores.
The work is :mod:`pbx.reporting`'s; this module reads the flags.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from pbx.errors import ArgumentParser, UsageError
from pbx.reporting import LAST_K, SCORES, Options, generate
from pbx.reporting.stats import REPS


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pbx.report",
        description="Plots and summary tables for pbx runs. Each run gets RUN_DIR/report/ (scores.png, "
                    "schedules.png, summary.md); several runs, a sweep folder (SWEEP/sweep.yaml, from python -m "
                    "pbx.sweep; into SWEEP/report/) or several sweep folders (one per game) get a comparison per "
                    "strategy: learning curves (comparison.png), headline numbers (comparison.md), and rliable's "
                    "aggregates of the run scores with 95% stratified-bootstrap CIs, probability of improvement "
                    "over the baseline and performance profiles (statistics.md, statistics.tex, intervals.png, "
                    "profile.png). Over several games: min-max normalised scores, IQM, mean, median and "
                    "optimality gap, and a table per game. Runs under one label are pooled only when their "
                    "configs agree. Prints the paths written.",
        epilog="Run scores (--score): best, the best member's train score in the last round and that member's "
               "test score (the default, with the population mean beside it); population, the mean over all "
               "members in the last round; last-k, the best member's mean over the last K rounds; kept, BG-PBT's "
               "and IPBT's answer (the best of the generations' best members, kept at restarts, and the final "
               "one); area and population-area, the best member's and the population mean's score over the whole run, each "
               "round weighted by the steps it trained (with the other beside it). Example: "
               "python -m pbx.report sweeps/procgen_mix-bigfish sweeps/procgen_mix-coinrun --out results/mix",
    )
    parser.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", type=Path,
                        help="a run folder holding config.yaml and history.csv, or sweep folders")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for the comparison plots and tables (default with several runs: report/ "
                             "in the runs' common parent folder, else ./report; a sweep's SWEEP/report/); with a "
                             "single run, --out writes its one-run comparison there too")
    parser.add_argument("--score", choices=SCORES, default=SCORES[0],
                        help="the run score every statistic is computed on (default best)")
    parser.add_argument("--last-k", "--last_k", dest="last_k", type=int, default=LAST_K, metavar="K",
                        help=f"rounds averaged by the 'last k' score (default {LAST_K})")
    parser.add_argument("--baseline", default=None, metavar="NAME",
                        help="strategy (or sweep variant) the probability of improvement is measured against "
                             "(default: the sweep's baseline, or the 'none' strategy among run folders)")
    parser.add_argument("--split", action="store_true",
                        help="runs under one label whose configs differ: group them by the differing values "
                             "(the labels say them) instead of refusing")
    parser.add_argument("--range", dest="ranges", action="append", default=[], metavar="GAME=MIN,MAX",
                        help="min-max normalisation range of a game (repeatable); built in: ProcGen's easy mode. "
                             "Needed for every game of a comparison across games")
    parser.add_argument("--variants", nargs="+", default=[], metavar="NAME",
                        help="report only these variants of the sweep folders (default all; a variant with no "
                             "finished run is otherwise an error), e.g. while the sweep's last variant waits")
    parser.add_argument("--reps", type=int, default=REPS, metavar="N",
                        help=f"bootstrap resamples per confidence interval (default {REPS}; seeded, so "
                             f"reports are reproducible)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = Options(args.out, args.last_k, args.baseline, args.reps, args.score, args.split, tuple(args.ranges),
                      tuple(args.variants))
    try:
        for path in generate(args.run_dirs, options):
            print(path, flush=True)
    except (UsageError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
