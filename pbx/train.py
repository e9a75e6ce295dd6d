"""``python -m pbx.train``: run a population (or resume one) from the command line.

    python -m pbx.train --env toy --search PB2 --batchsize 4 --seed 0
    python -m pbx.train --search PBT --env bigfish -m n_envs=16 eval_episodes=10
    python -m pbx.train --search PB2 --cat_exp exp3 --env bigfish
    python -m pbx.train --search PB2 --cat_exp cocabo --env toy-cat
    python -m pbx.train --config experiments/X.yaml -m pop_size=8 t_ready=250000
    python -m pbx.train --resume runs/NAME
    python -m pbx.train --resume runs/NAME --time-limit 3500   # stops inside a round, exit 75: resume again
    mpiexec -n 8 python -m pbx.train --search PB2 --env bigfish

Flag names follow the PB2 authors' ProcGen code (``--search``, ``--batchsize``,
``--t_ready``, ``--max_budget``); dashed spellings work too. Any setting of any
section is reachable with ``-m key=value``. Bad input prints one ``error:`` line
and exits with code 2. SIGTERM, Ctrl-C and SIGUSR1 (Slurm's ``--signal``) stop a
run at its members' next rollout boundary with everything trained saved, as
``--time-limit`` does before its time is up: exit code 75, and ``--resume``
continues inside the round where it stopped. A second Ctrl-C or SIGTERM
interrupts at once (exit 130), losing the round since its last save.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()
"""When the command began, before its imports: ``--time-limit`` counts from here."""

import argparse
import contextlib
import dataclasses
import io
import logging
import math
import signal
import sys
from typing import Sequence

from pbx.env_section import SECTION
from pbx.errors import ArgumentParser, UsageError, command_parser, either
from pbx.fingerprint import TOYS
from pbx.history import History
from pbx.members import ALGOS, REGISTERED
from pbx.standings import best_rows
from pbx.run_dir import RunDir
from pbx.runners.ranks import world
from pbx.runners.start import RESUMABLE, config_layers, exit_code, follow_run, launch, new_run, resumed_run
from pbx.runners.stopping import StopClock, check_time_limit
from pbx.settings import RunSettings, check_run_dir, parse_override
from pbx.strategies import ALIASES, STRATEGIES, Schedule


# Flags that map one-to-one onto run settings: (flag spellings, setting name, type, help). A help's {fields} are
# the registries' names when the parser is built (:func:`_registered`).
RUN_FLAGS: list[tuple[tuple[str, ...], str, type, str]] = [
    (("--env",), "env", str, "{own_envs}, a ProcGen game (bigfish, coinrun, ...), a gymnasium id (CartPole-v1, "
                             "ALE/Pong-v5) or module:Name-v0, an env that module registers"),
    (("--algo",), "algo", str, "the Stable-Baselines3 agent a member trains: {algos} ({own_envs} train their own)"),
    (("--search",), "search", str, "strategy, any case: {strategies}; {replay} (a stored schedule) is written by "
                                   "python -m pbx.replay"),
    (("--selection",), "selection", str, "exploit rule: truncation (bottom quantile copies top), wta (all copy the "
                                           "best) or sigma (below mean - k std copy above mean + k std)"),
    (("--sigma_k", "--sigma-k"), "sigma_k", float, "k of --selection sigma, in standard deviations of the scores"),
    (("--burn_in", "--burn-in"), "burn_in", int, "env steps every member trains before the first exploit"),
    (("--margin_rel", "--margin-rel"), "margin_rel", float,
     "copy only a donor better by more than this fraction of the recipient's absolute score"),
    (("--margin_abs", "--margin-abs"), "margin_abs", float, "copy only a donor better by more than this many points"),
    (("--tied",), "tied", str, "a recipient whose donor has exactly its score: keep (change nothing) or explore "
                               "its own config"),
    (("--batchsize", "--pop-size", "--pop_size"), "pop_size", int, "population size (not PPO's batch_size)"),
    (("--pbt_thresh", "--pbt-thresh", "--quantile"), "quantile", float,
     "fraction of the population in the top and in the bottom group of truncation selection"),
    (("--t_ready", "--t-ready"), "t_ready", int, "env steps per member between exploit/explore steps"),
    (("--max_budget", "--max-budget"), "max_budget", int, "env steps per member in total"),
    (("--seed",), "seed", int, "seeds the decisions and, per member, every learner"),
    (("--space",), "space", str, "search-space YAML: a path or a file name in pbx/search_spaces/"),
    (("--device",), "device", str, "auto (a GPU when there is one), cpu or cuda"),
    (("--name",), "name", str, "run name"),
    (("--runner",), "runner", str, "auto (MPI under mpiexec with several ranks), sync or mpi"),
    (("--comm",), "comm", str, "MPI checkpoint transfer: p2p (send/recv, only the pairs that copy) or collective "
                               "(broadcast from the donor)"),
]


# Flags of strategy settings: (flag spellings, setting name, help).
STRATEGY_FLAGS: list[tuple[tuple[str, ...], str, str]] = [
    (("--cat_exp", "--cat-exp"), "cat_exp",
     "categorical hyperparameters: random (as PBT; default), fixed, exp3 (= exp3_dep: EXP3 picks, GP per "
     "category), exp3_indep (EXP3 picks, one GP), cocabo (EXP3 picks, mixed-kernel GP); PBT takes random or "
     "fixed. A bandit (exp3*, cocabo) on a ProcGen game with no --space takes PB2-Mix's space (DrAC "
     "augmentation); random and fixed train what leaving --cat_exp out trains"),
    (("--fixed_cat_val", "--fixed-cat-val"), "fixed_cat_val",
     "with --cat_exp fixed: the choice to hold (default: the space's default)"),
]


# Flags of ProcGen's env settings (pbx.envs.ProcgenSettings), as train-procgen spells them: (flag spellings, setting
# name, type, help). Every other env setting (Atari's, a gymnasium id's env_kwargs) is -m key=value.
ENV_FLAGS: list[tuple[tuple[str, ...], str, type, str]] = [
    (("--num_levels", "--num-levels"), "num_levels", int, "ProcGen: training levels, 0 for all (default: 200)"),
    (("--start_level", "--start-level"), "start_level", int, "ProcGen: the first training level (default: 0)"),
    (("--distribution_mode", "--distribution-mode"), "distribution_mode", str,
     "ProcGen: easy, hard, extreme, memory or exploration (default: easy)"),
]


def build_parser() -> ArgumentParser:
    p = command_parser("python -m pbx.train", "Train a population (PBT, PB2, baselines) or resume one.", __doc__)
    names = _registered()
    for flags, dest, kind, text in RUN_FLAGS:
        p.add_argument(*flags, dest=dest, type=kind, default=None, help=f"{text.format_map(names)}{_default(dest)}")
    p.add_argument("--run-dir", "--run_dir", dest="run_dir", default=None,
                   help="run folder (default: runs/<name>)")
    p.add_argument("--config", default=None,
                   help="experiment YAML (sections run/strategy/member, or flat keys), or a run's config.yaml "
                        "(rebuilds that run as a new one, under a new name)")
    p.add_argument("--pbt_resample", "--pbt-resample", dest="resample_prob", type=float, default=None,
                   help="probability that PBT's explore redraws a value from the prior (strategy resample_prob)")
    for flags, dest, text in STRATEGY_FLAGS:
        p.add_argument(*flags, dest=dest, default=None, help=text)
    for flags, dest, kind, text in ENV_FLAGS:
        p.add_argument(*flags, dest=dest, type=kind, default=None, help=text)
    p.add_argument("-m", dest="overrides", nargs="+", action=_Overrides, default=[], metavar="KEY=VALUE",
                   help="override any setting, e.g. -m pop_size=8 n_envs=16 (or section.key=value)")
    p.add_argument("--time-limit", "--time_limit", dest="time_limit", default=None, metavar="SECONDS",
                   help="stop by this many seconds of wall clock from the command's start, at a rollout boundary "
                        "with everything trained saved (exit code 75; continue with --resume)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help=f"continue a stopped run from its folder; only {', '.join(RESUMABLE)} may change "
                        f"(-m or the flag), e.g. --resume runs/X -m max_budget=50000000")
    return p


class _Overrides(argparse._ExtendAction):
    """``-m`` items, each checked for ``key=value`` as it is parsed: ``-mb 6144`` (the reference code's
    spelling of --max_budget) would otherwise fail later as 'unrecognized arguments: 6144'."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        for item in values:
            try:
                parse_override(item)
            except UsageError as err:
                parser.error(str(err))
        super().__call__(parser, namespace, values, option_string)


def _registered() -> dict[str, str]:
    """The names the flags' help takes from the registries as they are now (a strategy or member a script
    registered before it calls :func:`main` included): the strategies (:data:`pbx.strategies.STRATEGIES`, the replay
    apart, with their aliases), the agents (:data:`pbx.members.ALGOS`) and the envs that train a member of their
    own (the toys, :data:`pbx.members.REGISTERED`)."""
    aliases = "".join(f"; {alias} is {name}" for alias, name in ALIASES.items())
    return {"strategies": either([name for name in STRATEGIES if name != Schedule.name]) + aliases,
            "replay": Schedule.name, "algos": either(list(ALGOS)), "own_envs": ", ".join([*TOYS, *REGISTERED])}


def _default(dest: str) -> str:
    default = {f.name: f.default for f in dataclasses.fields(RunSettings)}[dest]
    if dest == "name":
        return " (default: <env>-<search>-s<seed>-<time>)"
    return f" (default: {default})" if default is not None else " (default: the env's own)"


def main(argv: Sequence[str] | None = None) -> int:
    """The command: the flags read and checked, then the run started as :func:`pbx.run` starts it."""
    comm = world()
    if comm is not None and comm.Get_rank() > 0:
        # check the command line as rank 0 does (which says what is wrong with it), then follow rank 0's run
        with contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(argv)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            limit = check_time_limit(args.time_limit)
        except UsageError:
            limit = None  # rank 0 says what is wrong with it, and refuses the run
        return follow_run(comm, StopClock(limit, started=STARTED))
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    # Before the run trains (and after), a scheduler's SIGTERM stops the command like Ctrl-C; while it trains, the
    # run's clock takes both and stops at a rollout boundary (pbx.runners.stopping).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        clock = StopClock(check_time_limit(args.time_limit), started=STARTED)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    flags = {dest: getattr(args, dest) for _, dest, _, _ in RUN_FLAGS if getattr(args, dest) is not None}
    strategy = {dest: getattr(args, dest) for dest in ("resample_prob", *(d for _, d, _ in STRATEGY_FLAGS))
                if getattr(args, dest) is not None}
    env = {dest: getattr(args, dest) for _, dest, _, _ in ENV_FLAGS if getattr(args, dest) is not None}
    if args.resume is not None:
        refused = (["--config"] if args.config else []) + (["--run-dir"] if args.run_dir else [])
        setup = lambda comm: resumed_run(args.resume, {**flags, **strategy, **env}, args.overrides, comm, refused)
    else:
        layer = {"run": flags, "strategy": strategy, **({SECTION: env} if env else {})}
        setup = lambda comm: new_run([*config_layers(args.config), layer], args.overrides,
                                     check_run_dir(args.run_dir), comm)
    finished: list[tuple[RunDir, History] | None] = []
    code = exit_code(lambda: finished.append(launch(setup, clock=clock)))
    if code == 0:
        assert finished[0] is not None  # this process is rank 0
        print(_summary(*finished[0]))
    return code


def _summary(run_dir: RunDir, history: History) -> str:
    best = best_rows(history.frame).iloc[-1]
    test = "" if math.isnan(best["test_score"]) else f", its test score {best['test_score']:.4g}"
    return (f"done: best final score {best['score']:.4g} (member {int(best['member'])}){test}; "
            f"history in {run_dir.history}; plots: python -m pbx.report {run_dir.path}")


if __name__ == "__main__":
    sys.exit(main())
