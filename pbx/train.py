"""``python -m pbx.train``: run a population (or resume one) from the command line.

    python -m pbx.train --env toy --search PB2 --batchsize 4 --seed 0
    python -m pbx.train --search PBT --env bigfish -m n_envs=16 eval_episodes=10
    python -m pbx.train --search PB2 --cat_exp exp3 --env bigfish
    python -m pbx.train --search PB2 --cat_exp cocabo --env toy-cat
    python -m pbx.train --config experiments/X.yaml -m pop_size=8 t_ready=250000
    python -m pbx.train --resume runs/NAME
    mpiexec -n 8 python -m pbx.train --search PB2 --env bigfish

Flag names follow the PB2 authors' ProcGen code (``--search``, ``--batchsize``,
``--t_ready``, ``--max_budget``); dashed spellings work too. Any setting of any
section is reachable with ``-m key=value``. Bad input prints one ``error:`` line
and exits with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import logging
import math
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pbx.console import counted
from pbx.config import RunConfig, resolve
from pbx.settings import RunSettings, load_yaml, parse_override
from pbx.errors import ArgumentParser, UsageError, command_parser
from pbx.fingerprint import (ENV_CODE, ENV_CONTINUED, LIBRARIES, LIBRARIES_CONTINUED, PROVENANCE, continued,
                             provenance)
from pbx.history import History, best_rows, complete_rounds, read_csv, restart_marks
from pbx.run_dir import RunDir
from pbx.runners.loop import RunFailed
from pbx.runners.mpi import Kind, abort, receive, run_on_ranks, send, world
from pbx.runners.sync import SyncRunner

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

# Flags that map one-to-one onto run settings: (flag spellings, setting name, type, help).
RUN_FLAGS: list[tuple[tuple[str, ...], str, type, str]] = [
    (("--env",), "env", str, "toy, toy-cat, toy-deceptive, a ProcGen game (bigfish, coinrun, ...), a gymnasium id "
                             "(CartPole-v1) or module:Name-v0, an env that module registers"),
    (("--algo",), "algo", str, "the Stable-Baselines3 agent on a gymnasium id: ppo, a2c, sac, td3 or dqn "
                               "(ProcGen games and toys: their own)"),
    (("--search",), "search", str, "strategy: none (fixed baseline; also Fixed), random, PBT, PB2, FIRE, BGPBT or IPBT, any case; "
                                     "replay (a stored schedule) is written by python -m pbx.replay"),
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


def build_parser() -> ArgumentParser:
    p = command_parser("python -m pbx.train", "Train a population (PBT, PB2, baselines) or resume one.", __doc__)
    for flags, dest, kind, text in RUN_FLAGS:
        p.add_argument(*flags, dest=dest, type=kind, default=None, help=f"{text}{_default(dest)}")
    p.add_argument("--run-dir", "--run_dir", dest="run_dir", default=None,
                   help="run folder (default: runs/<name>)")
    p.add_argument("--config", default=None,
                   help="experiment YAML (sections run/strategy/member, or flat keys), or a run's config.yaml "
                        "(rebuilds that run as a new one, under a new name)")
    p.add_argument("--pbt_resample", "--pbt-resample", dest="resample_prob", type=float, default=None,
                   help="probability that PBT's explore redraws a value from the prior (strategy resample_prob)")
    for flags, dest, text in STRATEGY_FLAGS:
        p.add_argument(*flags, dest=dest, default=None, help=text)
    p.add_argument("-m", dest="overrides", nargs="+", action=_Overrides, default=[], metavar="KEY=VALUE",
                   help="override any setting, e.g. -m pop_size=8 n_envs=16 (or section.key=value)")
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


def _default(dest: str) -> str:
    default = {f.name: f.default for f in dataclasses.fields(RunSettings)}[dest]
    if dest == "name":
        return " (default: <env>-<search>-s<seed>-<time>)"
    return f" (default: {default})" if default is not None else " (default: the env's own)"


def main(argv: Sequence[str] | None = None, base: Sequence[Mapping[str, Any]] = (), contained: bool = False) -> int:
    """The command; ``base``: config layers below ``--config`` (:mod:`pbx.sweep`'s stored resolution).

    ``contained`` (a sweep's run): under MPI a failure on any rank ends this run on
    every rank and returns its exit code, instead of ending the job, and an
    interruption returns 130 for the caller to end it.
    """
    comm = world()
    if comm is not None and comm.Get_rank() > 0:
        return _follow(argv, comm)
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    # A scheduler's SIGTERM (end of a job's time) stops the run like Ctrl-C: envs closed, resume hint printed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run_dir, started, fresh = None, False, None
    try:
        cfg, run_dir, made, changed, mpi = _setup(args, comm, base)
        size = comm.Get_size() if comm is not None else 1
        resumed = args.resume is not None
        # A resume's changes are written once the runner has checked the folder: a refused resume changes nothing.
        rewrite = changed and resumed
        with run_dir.lock():
            fresh = made  # under the lock: a folder another process holds is never this run's to remove
            if not resumed:
                cfg.write(run_dir.config)
            print(_start_line(cfg, run_dir, size if mpi else 1, resumed=resumed), flush=True)
            if comm is not None and mpi:
                send(comm, Kind.START, (cfg.to_dict(), run_dir.path, contained))
                started = True
                history = run_on_ranks(comm, contained, run_dir.path, lambda: cfg, write_config=rewrite)
            else:
                history = SyncRunner(cfg, run_dir, write_config=rewrite).run()
            assert history is not None  # this process is the coordinator
    except KeyboardInterrupt:
        hint = f"; continue with --resume {run_dir.path}" if run_dir is not None else ""
        print(f"\ninterrupted: finished rounds are saved{hint}", file=sys.stderr, flush=True)
        if started and not contained:
            abort(None, 130)  # the other ranks may be waiting for this one
        return 130
    except UsageError as err:
        _discard(run_dir, fresh)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        if err.code == 2:  # bad input on some rank
            _discard(run_dir, fresh)
        print(f"error: {err}", file=sys.stderr)
        return err.code
    finally:
        if comm is not None and not started:
            send(comm, Kind.REFUSED)  # the other ranks wait for the run: there is none
    print(_summary(history, run_dir))
    return 0


def _discard(run_dir: RunDir | None, fresh: bool | None) -> None:
    """A new run refused before its first round leaves no folder that blocks its name (``fresh``: whether it
    made the folder, None for a resumed run or one refused before it held the folder, which stay as they were)."""
    if run_dir is not None and fresh is not None:
        run_dir.discard(fresh)


def _follow(argv: Sequence[str] | None, comm: Intracomm) -> int:
    """An MPI rank other than 0: check the command line as rank 0 does (which says what is wrong with it), then
    take part in the run rank 0 sets up."""
    with contextlib.redirect_stderr(io.StringIO()):
        build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return follow_run(comm)


def follow_run(comm: Intracomm) -> int:
    """An MPI rank other than 0: train its members of the run rank 0 starts (and reports on); the exit code."""
    message = receive(comm, Kind.START, Kind.REFUSED)
    if message.kind is Kind.REFUSED:
        return 2  # rank 0 refused the input (or runs without MPI) and said why
    raw, path, contained = message.payload
    try:
        history = run_on_ranks(comm, contained, path, lambda: resolve([raw]))
    except KeyboardInterrupt:
        abort(f"rank {comm.Get_rank()}: interrupted; the finished rounds are saved in {path}", 130)
    except RunFailed as err:
        return err.code  # rank 0 says what failed
    assert history is None
    return 0


def _use_mpi(cfg: RunConfig, comm: Intracomm | None) -> bool:
    """Whether to run under MPI: ``--runner`` against how the process was started and the population."""
    size = comm.Get_size() if comm is not None else 1
    if cfg.run.runner == "mpi" and comm is None:
        raise UsageError("--runner mpi needs an MPI launcher: start with mpiexec -n N python -m pbx.train ... "
                         "(or srun under Slurm)")
    if cfg.run.runner == "sync" and size > 1:
        raise UsageError(f"--runner sync under an MPI launcher with {size} ranks would train the population "
                         f"{size} times: drop --runner sync, or start without mpiexec")
    if cfg.run.pop_size < size:
        raise UsageError(f"population {cfg.run.pop_size} is smaller than the {size} MPI ranks: every rank needs "
                         f"a member (raise --batchsize or start fewer ranks)")
    return cfg.run.runner == "mpi" or size > 1


RESUMABLE = ("max_budget", "eval_every", "eval_episodes", "device", "runner", "comm")
"""Settings a resumed run may change: none of them changes a decision already taken."""


def _setup(args: argparse.Namespace, comm: Intracomm | None,
           base: Sequence[Mapping[str, Any]] = ()) -> tuple[RunConfig, RunDir, bool | None, bool, bool]:
    """The run's config and folder, whether this call made the folder (None: a resume), whether its config.yaml
    is to be (re)written (under the folder's lock), and whether to run under MPI; every check but a member's
    own, made as it is built, comes before a new folder is created.

    Under an MPI launcher with several ranks the population defaults to one member
    per rank (at least the usual 4), so ``mpiexec -n 8`` trains 8 members.
    """
    ranks = comm.Get_size() if comm is not None else 1
    flags = {dest: getattr(args, dest) for _, dest, _, _ in RUN_FLAGS if getattr(args, dest) is not None}
    strategy = {dest: getattr(args, dest) for dest in ("resample_prob", *(d for _, d, _ in STRATEGY_FLAGS))
                if getattr(args, dest) is not None}
    if args.resume is not None:
        cfg, run_dir, changed = _resume(args, flags, strategy)
        return cfg, run_dir, None, changed, _use_mpi(cfg, comm)
    layers = [load_yaml(args.config)] if args.config else []
    if layers and isinstance(layers[0].get("space"), dict):
        # A run's own config.yaml: rebuild the run under a new name, not into the folder it came from.
        layers[0] = {**layers[0], "run": {k: v for k, v in (layers[0].get("run") or {}).items() if k != "name"}}
    layers = [*rank_layers(ranks), *base, *layers]
    cfg = resolve([*layers, {"run": flags, "strategy": strategy}], args.overrides)
    mpi = _use_mpi(cfg, comm)
    if cfg.run.name is None:
        cfg.run.name = f"{cfg.run.env}-{cfg.run.search}-s{cfg.run.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = RunDir(Path(args.run_dir) if args.run_dir else Path("runs") / cfg.run.name)
    made = run_dir.create()
    return cfg, run_dir, made, True, mpi


def rank_layers(ranks: int) -> list[dict[str, Any]]:
    """The config layer under every other of a run on ``ranks`` MPI ranks: one member per rank, at least the
    usual population."""
    return [{"run": {"pop_size": max(RunSettings.pop_size, ranks)}}] if ranks > 1 else []


def _resume(args: argparse.Namespace, flags: dict[str, object],
            strategy: dict[str, object]) -> tuple[RunConfig, RunDir, bool]:
    """The run in ``--resume``'s folder, with the changes :data:`RESUMABLE` allows written to its config.yaml."""
    keys = [parse_override(item)[0].split(".")[-1] for item in args.overrides] + list(flags) + list(strategy)
    refused = sorted({k for k in keys if k not in RESUMABLE}) + (["--config"] if args.config else [])
    refused += ["--run-dir"] if args.run_dir else []
    if refused:
        raise UsageError(f"--resume continues the run as configured in {args.resume}/config.yaml; it may change only "
                         f"{', '.join(RESUMABLE)}, not {', '.join(refused)} (start a new run for those)")
    run_dir = RunDir(Path(args.resume))
    run_dir.require_run()
    stored = load_yaml(run_dir.config)
    old = resolve([stored])
    cfg = resolve([stored, {"run": flags}], args.overrides)
    # The record of what started the run stays (a folder from before pbx recorded itself has none), with the code
    # of another pbx or env module, or other library versions, that continue it added to it; the start line says so.
    old.provenance = stored.get(PROVENANCE)
    cfg.provenance = continued(old.provenance, cfg.run.env)
    if cfg.run.max_budget is not None and old.run.max_budget is not None and cfg.run.max_budget < old.run.max_budget:
        raise UsageError(f"--resume may extend max_budget, not cut it: {cfg.run.max_budget:,} < "
                         f"{old.run.max_budget:,} (the run's)")
    return cfg, run_dir, cfg.to_dict() != old.to_dict()


def _start_line(cfg: RunConfig, run_dir: RunDir, ranks: int = 1, resumed: bool = False) -> str:
    """What will be trained: the strategy, the member and the space it searches; a member that rounds a round's
    steps (PPO: whole rollouts) says what it really trains, and a resume by another pbx, env code or library
    versions than those that started the run says so, as does a resume whose envs restart their episodes."""
    run = cfg.run
    where = f" on {ranks} MPI ranks ({run.comm})" if ranks > 1 else ""
    # BG-PBT's and IPBT's larger first population takes more than one round of the budget
    marks = restart_marks(complete_rounds(read_csv(run_dir.history, cfg.space), run.pop_size, str(run_dir.history),
                                          cfg.round_size)) if resumed else []
    rounds = len(cfg.planned(marks).ends)
    line = (f"pbx: {run.search} on {run.env}, {cfg.member_cls.describe(cfg.member)} over {cfg.space_source} "
            f"({', '.join(cfg.space.names)}), {counted(run.pop_size, 'member')}{where} x {run.max_budget:,} steps "
            f"({rounds} rounds of {run.t_ready:,}), seed {run.seed} -> {run_dir.path}")
    if cfg.init_size > run.pop_size or cfg.strategy_cls.round_length(cfg.strategy, run.t_ready or 0, 1) != run.t_ready:
        line += (f"\nnote: {run.search} trains {cfg.init_size} members in round 0, which takes "
                 f"{cfg.round_cost(0, False):g} rounds of the budget (the best {run.pop_size} go on), and restarts a "
                 f"stagnant population (history.csv's restart column), which may lengthen the rounds after it")
    trained = [cfg.trained_steps(r) for r in range(run.rounds)]
    if trained != [cfg.round_steps(r) for r in range(run.rounds)]:
        last = f" ({trained[-1]:,} in the last)" if trained[-1] != trained[0] else ""
        line += (f"\nnote: t_ready or max_budget is not whole rollouts: each member really trains "
                 f"{trained[0]:,} steps per round{last}, {cfg.total_steps():,} in total")
    restart = cfg.member_cls.resume_note(run.env) if resumed else ""
    if restart:
        line += f"\nnote: {restart}"
    if resumed and not _started_by_this_pbx(cfg.provenance):
        line += "\nnote: " + (f"this run was started by {_pbx(cfg.provenance)}" if cfg.provenance is not None else
                              "this run's config.yaml does not say which pbx started it (it predates the record)")
        line += (f"; it continues with {_pbx(provenance())}, which trains the rounds from here on (config.yaml "
                 f"keeps its record of the start and lists each other code that trained rounds under "
                 f"pbx.continued: the run pools only with runs trained by the same codes)")
    if resumed and cfg.provenance is not None:
        line += "".join(f"\nnote: {note}" for note in _other_env_or_libraries(cfg.provenance, cfg.run.env))
    return line


def _other_env_or_libraries(record: Mapping[str, Any], env: str) -> list[str]:
    """What a resume says of the env's own code and the library versions where they are not those the run was
    started with (a record from before either holds no such entry and gets no note). ``record`` is the resumed
    run's, with what runs now last in its ``*_continued`` lists (:func:`pbx.fingerprint.continued`)."""
    notes = []
    if ENV_CODE in record:
        start, now = record[ENV_CODE], [record[ENV_CODE], *record.get(ENV_CONTINUED, [])][-1]
        if now != start:
            module = env.rpartition(":")[0]
            notes.append(f"the code of {module} (the env's own, hash {now}) is not the code this run was started "
                         f"with ({start}); it runs the rounds from here on (config.yaml lists it under "
                         f"pbx.{ENV_CONTINUED}: the run pools only with runs of the same env codes)")
    started = record.get(LIBRARIES)
    if isinstance(started, Mapping):
        now = [started, *record.get(LIBRARIES_CONTINUED, [])][-1]
        changed = [f"{name} {started.get(name, 'unrecorded')} -> {version}"
                   for name, version in now.items() if started.get(name) != version]
        if changed:
            notes.append(f"this run was started with other library versions ({', '.join(changed)}); the rounds "
                         f"from here on run these (config.yaml lists them under pbx.{LIBRARIES_CONTINUED}, and "
                         f"pbx.report notes where it pools runs of other versions)")
    return notes


def _started_by_this_pbx(record: Mapping[str, Any] | None) -> bool:
    """Whether the run's record says this very code started it (by its hash; by version and commit where the
    record predates the hash)."""
    if record is None:
        return False
    if "code" in record:
        return record["code"] == provenance()["code"]
    return (record.get("version"), record.get("commit")) == (provenance()["version"], provenance()["commit"])


def _pbx(record: Mapping[str, Any]) -> str:
    """``pbx 0.1.0 (code 1a2b..., commit abc...)``, less what the record lacks (a plain install has no commit, a
    record from before code hashes no code)."""
    parts = [f"{key} {record[key]}" for key in ("code", "commit") if record.get(key)]
    return f"pbx {record.get('version')}" + (f" ({', '.join(parts)})" if parts else "")


def _summary(history: History, run_dir: RunDir) -> str:
    best = best_rows(history.frame).iloc[-1]
    test = "" if math.isnan(best["test_score"]) else f", its test score {best['test_score']:.4g}"
    return (f"done: best final score {best['score']:.4g} (member {int(best['member'])}){test}; "
            f"history in {run_dir.history}; plots: python -m pbx.report {run_dir.path}")


if __name__ == "__main__":
    sys.exit(main())
