"""``python -m pbx.train``: run a population (or resume one) from the command line.

    python -m pbx.train --env toy --search PB2 --batchsize 4 --seed 0
    python -m pbx.train --search PBT --env bigfish -m n_envs=16 eval_episodes=10
    python -m pbx.train --config experiments/X.yaml -m pop_size=8 t_ready=250000
    python -m pbx.train --resume runs/NAME

Flag names follow the PB2 authors' ProcGen code (``--search``, ``--batchsize``,
``--t_ready``, ``--max_budget``); dashed spellings work too. Any setting of any
section is reachable with ``-m key=value``. Bad input prints one ``error:`` line
and exits with code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import signal
import sys
import time
from pathlib import Path
from typing import Sequence

from pbx.config import RunConfig, RunSettings, load_yaml, resolve
from pbx.errors import ArgumentParser, UsageError
from pbx.history import History, best_rows
from pbx.run_dir import RunDir
from pbx.runners.sync import SyncRunner

# Flags that map one-to-one onto run settings: (flag spellings, setting name, type, help).
RUN_FLAGS: list[tuple[tuple[str, ...], str, type, str]] = [
    (("--env",), "env", str, "toy, a ProcGen game (bigfish, coinrun, ...) or a gymnasium id (CartPole-v1)"),
    (("--search",), "search", str, "strategy: none (fixed baseline), random, PBT or PB2"),
    (("--selection",), "selection", str, "exploit rule: truncation (bottom quantile copies top) or wta (all copy the best)"),
    (("--batchsize", "--pop-size", "--pop_size"), "pop_size", int, "population size"),
    (("--t_ready", "--t-ready"), "t_ready", int, "env steps per member between exploit/explore steps"),
    (("--max_budget", "--max-budget"), "max_budget", int, "env steps per member in total"),
    (("--seed",), "seed", int, "seeds the decisions and, per member, every learner"),
    (("--space",), "space", str, "search-space YAML: a path or a file name in search_spaces/"),
    (("--device",), "device", str, "auto (a GPU when there is one), cpu or cuda"),
    (("--name",), "name", str, "run name"),
]


def build_parser() -> argparse.ArgumentParser:
    examples = __doc__.split("\n\n")[1]
    p = ArgumentParser(prog="python -m pbx.train", description="Train a population (PBT, PB2, baselines) or resume one.",
                epilog=f"examples:\n{examples}", formatter_class=argparse.RawDescriptionHelpFormatter)
    for flags, dest, kind, text in RUN_FLAGS:
        p.add_argument(*flags, dest=dest, type=kind, default=None, help=f"{text}{_default(dest)}")
    p.add_argument("--run-dir", "--run_dir", dest="run_dir", default=None,
                   help="run folder (default: runs/<name>)")
    p.add_argument("--config", default=None, help="experiment YAML (sections run/strategy/member, or flat keys)")
    p.add_argument("-m", dest="overrides", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override any setting, e.g. -m pop_size=8 n_envs=16 (or section.key=value)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a stopped run from its folder")
    return p


def _default(dest: str) -> str:
    default = {f.name: f.default for f in dataclasses.fields(RunSettings)}[dest]
    if dest == "name":
        return " (default: <env>-<search>-s<seed>-<time>)"
    return f" (default: {default})" if default is not None else " (default: the env's own)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    try:
        cfg, run_dir = _setup(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run = cfg.run
    print(f"pbx: {run.search} on {run.env}, {run.pop_size} members x {run.max_budget:,} steps "
          f"({run.rounds} rounds of {run.t_ready:,}), seed {run.seed} -> {run_dir.path}")
    # A scheduler's SIGTERM (end of a job's time) stops the run like Ctrl-C: envs closed, resume hint printed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        history = SyncRunner(cfg, run_dir).run()
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished rounds are saved; continue with --resume {run_dir.path}", file=sys.stderr)
        return 130
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(_summary(history, run_dir))
    return 0


def _setup(args: argparse.Namespace) -> tuple[RunConfig, RunDir]:
    flags = {dest: getattr(args, dest) for _, dest, _, _ in RUN_FLAGS if getattr(args, dest) is not None}
    if args.resume is not None:
        extra = sorted(flags) + (["--config"] if args.config else []) + (["-m"] if args.overrides else [])
        extra += ["--run-dir"] if args.run_dir else []
        if extra:
            raise UsageError(f"--resume takes every setting from {args.resume}/config.yaml; drop {', '.join(extra)}")
        run_dir = RunDir(Path(args.resume))
        run_dir.require_run()
        return resolve([load_yaml(run_dir.config)]), run_dir
    layers = [load_yaml(args.config)] if args.config else []
    cfg = resolve([*layers, {"run": flags}], args.overrides)
    if cfg.run.name is None:
        cfg.run.name = f"{cfg.run.env}-{cfg.run.search}-s{cfg.run.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = RunDir(Path(args.run_dir) if args.run_dir else Path("runs") / cfg.run.name)
    run_dir.create()
    cfg.write(run_dir.config)
    return cfg, run_dir


def _summary(history: History, run_dir: RunDir) -> str:
    best = best_rows(history.frame).iloc[-1]
    test = "" if math.isnan(best["test_score"]) else f", its test score {best['test_score']:.4g}"
    return (f"done: best final score {best['score']:.4g} (member {int(best['member'])}){test}; "
            f"history in {run_dir.history}; plots: python -m pbx.report {run_dir.path}")


if __name__ == "__main__":
    sys.exit(main())
