"""Starting a run: its config and folder from settings layers (or a folder to resume), the runner chosen as the
process was launched, and the run carried out; the one path every way in takes (:func:`pbx.run`, ``python -m
pbx.train``, :mod:`pbx.sweeps`, :mod:`pbx.replay`).

Every check but a member's own (made as it is built) comes before a new folder is
made, and bad input is a :class:`~pbx.errors.UsageError`: the commands print it as
one line and exit 2, Python sees the exception. Under an MPI launcher rank 0 sets
the run up and the other ranks follow it (:func:`follow_run`); a sweep tells them
before each run that one follows (:func:`announce_run`) and when none does
(:func:`release`), so that the MPI runner's messages stay in the runner layer.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from pbx.config import RunConfig, resolve
from pbx.errors import UsageError
from pbx.fingerprint import PROVENANCE, continued
from pbx.history import History
from pbx.run_dir import RunDir
from pbx.runners.announce import start_line
from pbx.runners.loop import RunFailed
from pbx.runners.mpi import run_on_ranks
from pbx.runners.ranks import Kind, abort, receive, send, world
from pbx.runners.stopping import STOPPED_EXIT, RunStopped, StopClock
from pbx.runners.sync import SyncRunner
from pbx.settings import RunSettings, check_run_dir, load_yaml, parse_override

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

RESUMABLE = ("max_budget", "eval_every", "eval_episodes", "device", "runner", "comm", "checkpoint_minutes")
"""Settings a resumed run may change: none of them changes a decision already taken."""


@dataclass(frozen=True)
class Setup:
    """A run ready to start: its config and folder, whether this process made the folder (None: a resume),
    whether its config.yaml is to be (re)written (under the folder's lock), and whether it runs under MPI."""

    cfg: RunConfig
    run_dir: RunDir
    made: bool | None
    changed: bool
    mpi: bool

    @property
    def resumed(self) -> bool:
        return self.made is None


def rank_layers(ranks: int) -> list[dict[str, Any]]:
    """The config layer under every other of a run on ``ranks`` MPI ranks: one member per rank, at least the
    usual population."""
    return [{"run": {"pop_size": max(RunSettings.pop_size, ranks)}}] if ranks > 1 else []


def new_run(layers: Sequence[Mapping[str, Any]], overrides: Sequence[str] = (), run_dir: str | Path | None = None,
            comm: Intracomm | None = None) -> Setup:
    """A new run from config ``layers`` (lowest first) and ``-m`` ``overrides``, in ``run_dir`` (default
    ``runs/<name>``, the name defaulting to ``<env>-<search>-s<seed>-<time>``).

    Under an MPI launcher with several ranks the population defaults to one member
    per rank (at least the usual 4), so ``mpiexec -n 8`` trains 8 members.
    """
    ranks = comm.Get_size() if comm is not None else 1
    cfg = resolve([*rank_layers(ranks), *layers], overrides)
    mpi = use_mpi(cfg, comm)
    if cfg.run.name is None:
        cfg.run.name = default_name(cfg.run)
    folder = RunDir(check_run_dir(run_dir if run_dir is not None else Path("runs") / cfg.run.name))
    return Setup(cfg, folder, folder.create(), True, mpi)


def default_name(run: RunSettings) -> str:
    """``<env>-<search>-s<seed>-<time>``, one folder inside ``runs/``: the env id's namespace and module separators
    (``ALE/Pong-v5``, ``my_tasks:Point-v0``) become ``-`` (``ALE-Pong-v5-PBT-s0-...``)."""
    env = run.env.replace("/", "-").replace(":", "-")
    return f"{env}-{run.search}-s{run.seed}-{time.strftime('%Y%m%d-%H%M%S')}"


def resumed_run(path: str | Path, changes: Mapping[str, Any] = (), overrides: Sequence[str] = (),
                comm: Intracomm | None = None, refused: Sequence[str] = ()) -> Setup:
    """The run in ``path`` with the ``changes`` (run settings) and ``overrides`` :data:`RESUMABLE` allows, which
    are written to its config.yaml once the runner has checked the folder; ``refused``: the caller's own input
    that a resume cannot take (a command's ``--config``), named in the refusal."""
    keys = [parse_override(item)[0].split(".")[-1] for item in overrides] + list(changes)
    refused = sorted({k for k in keys if k not in RESUMABLE}) + list(refused)
    if refused:
        raise UsageError(f"--resume continues the run as configured in {path}/config.yaml; it may change only "
                         f"{', '.join(RESUMABLE)}, not {', '.join(refused)} (start a new run for those)")
    run_dir = RunDir(Path(path))
    run_dir.require_run()
    stored = load_yaml(run_dir.config)
    old = resolve([stored])
    cfg = resolve([stored, {"run": dict(changes)}], overrides)
    # The record of what started the run stays (a folder from before pbx recorded itself has none), with the code
    # of another pbx or env module, or other library versions, that continue it added to it; the start line says so.
    old.provenance = stored.get(PROVENANCE)
    cfg.provenance = continued(old.provenance, cfg.run.env)
    if cfg.run.max_budget is not None and old.run.max_budget is not None and cfg.run.max_budget < old.run.max_budget:
        raise UsageError(f"--resume may extend max_budget, not cut it: {cfg.run.max_budget:,} < "
                         f"{old.run.max_budget:,} (the run's)")
    return Setup(cfg, run_dir, None, cfg.to_dict() != old.to_dict(), use_mpi(cfg, comm))


def config_layers(config: str | Path | None) -> list[dict[str, Any]]:
    """The layer of ``--config``: an experiment YAML, or a run's own config.yaml, which rebuilds that run under a new
    name (not into the folder it came from)."""
    if config is not None and not str(config).strip():
        raise UsageError("--config '' names no file: give an experiment YAML or a run's config.yaml, or leave "
                         "--config out")
    layers = [load_yaml(config)] if config is not None else []
    if layers and isinstance(layers[0].get("space"), dict):
        layers[0] = {**layers[0], "run": {k: v for k, v in (layers[0].get("run") or {}).items() if k != "name"}}
    return layers


def use_mpi(cfg: RunConfig, comm: Intracomm | None) -> bool:
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


def launch(setup: Callable[[Intracomm | None], Setup], contained: bool = False,
           clock: StopClock | None = None) -> tuple[RunDir, History] | None:
    """Set a run up with ``setup`` (given the MPI world, None without a launcher) and train it to its budget;
    its folder and history, or None on an MPI rank other than 0, which trains its members of rank 0's run
    (:func:`follow_run`).

    ``clock``: when it stops before its end (a time limit, a sweep's; :mod:`pbx.runners.stopping`); SIGTERM,
    SIGINT and SIGUSR1 stop it at its members' next rollout boundary while it trains, and every
    ``checkpoint_minutes`` the member training saves its round in progress.

    Raises :class:`UsageError` for bad input (a new run's folder it made is removed
    again), :class:`RunFailed` for a run that failed on some rank, :class:`RunStopped`
    for a run stopped with all its work saved, and KeyboardInterrupt (a second
    signal) with the finished rounds saved (after a line saying how to go on).
    ``contained`` (a sweep's run): under MPI a failure on any rank ends this run on
    every rank, not the job.
    """
    clock = clock if clock is not None else StopClock()
    comm = world()
    if comm is not None and comm.Get_rank() > 0:
        code = follow_run(comm, clock)
        if code == STOPPED_EXIT:
            raise RunStopped(f"rank {comm.Get_rank()}: stopped (rank 0 says how far and how to go on)")
        if code:
            raise RunFailed(f"rank {comm.Get_rank()}: rank 0 refused or ended the run (it says why)", code)
        return None
    run_dir, started, fresh = None, False, None
    try:
        ready = setup(comm)
        cfg, run_dir = ready.cfg, ready.run_dir
        size = comm.Get_size() if comm is not None else 1
        # A resume's changes are written once the runner has checked the folder: a refused resume changes nothing.
        rewrite = ready.changed and ready.resumed
        with run_dir.lock(), clock.on_signals():
            if not ready.resumed:
                run_dir.begin()
            fresh = ready.made  # under the lock: a folder another process holds is never this run's to remove
            if not ready.resumed:
                cfg.write(run_dir.config)
            print(start_line(cfg, run_dir, size if ready.mpi else 1, resumed=ready.resumed), flush=True)
            if comm is not None and ready.mpi:
                send(comm, Kind.START, (cfg.to_dict(), run_dir.path, contained))
                started = True
                history = run_on_ranks(comm, contained, run_dir.path, lambda: cfg, write_config=rewrite, clock=clock)
            else:
                history = SyncRunner(cfg, run_dir, write_config=rewrite, clock=clock).run()
            assert history is not None  # this process is the coordinator
            return run_dir, history
    except KeyboardInterrupt:
        hint = f"; continue with --resume {run_dir.path}" if run_dir is not None else ""
        print(f"\ninterrupted: finished rounds are saved{hint}", file=sys.stderr, flush=True)
        if started and not contained:
            abort(None, 130)  # the other ranks may be waiting for this one
        raise
    except (UsageError, RunFailed) as err:
        # A new run refused before its first round leaves no folder that blocks its name (``fresh``: whether this
        # call made the folder; None for a resume or a folder it never held, which stay as they were).
        if run_dir is not None and fresh is not None and (isinstance(err, UsageError) or err.code == 2):
            run_dir.discard(fresh)
        raise
    finally:
        if comm is not None and not started:
            send(comm, Kind.REFUSED)  # the other ranks wait for the run: there is none


def follow_run(comm: Intracomm, clock: StopClock | None = None) -> int:
    """An MPI rank other than 0: train its members of the run rank 0 starts (and reports on); the exit code."""
    message = receive(comm, Kind.START, Kind.REFUSED)
    if message.kind is Kind.REFUSED:
        return 2  # rank 0 refused the input (or runs without MPI) and said why
    raw, path, contained = message.payload
    clock = clock if clock is not None else StopClock()
    try:
        with clock.on_signals():
            history = run_on_ranks(comm, contained, path, lambda: resolve([raw]), clock=clock)
    except KeyboardInterrupt:
        abort(f"rank {comm.Get_rank()}: interrupted; the finished rounds are saved in {path}", 130)
    except RunStopped:
        return STOPPED_EXIT  # rank 0 says how to go on
    except RunFailed as err:
        return err.code  # rank 0 says what failed
    assert history is None
    return 0


def exit_code(start: Callable[[], object]) -> int:
    """A command's exit status for ``start`` (a :func:`launch`): 0, 2 for bad input and a failed run's code,
    each after its one ``error:`` line, :data:`STOPPED_EXIT` after the line that says how to go on, or 130 when
    interrupted."""
    try:
        start()
    except KeyboardInterrupt:
        return 130
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return err.code
    except RunStopped as err:
        print(err, file=sys.stderr)
        return STOPPED_EXIT
    return 0


def announce_run(comm: Intracomm | None) -> None:
    """Rank 0 of a sweep: tell the other ranks (in :func:`follow_runs`) that another run follows."""
    if comm is not None:
        send(comm, Kind.RUN)


def follow_runs(comm: Intracomm) -> int:
    """An MPI rank other than 0 of a sweep: take part in each run rank 0 trains, until it says there are no
    more."""
    try:
        while receive(comm, Kind.RUN, Kind.END).kind is Kind.RUN:
            follow_run(comm)
    except KeyboardInterrupt:  # between runs (inside one, the run's own handling ends the job)
        abort(f"rank {comm.Get_rank()}: interrupted", 130)
    return 0


def release(comm: Intracomm | None) -> None:
    """Rank 0 of a sweep is done: let the other ranks (in :func:`follow_runs`) end."""
    if comm is not None:
        send(comm, Kind.END)
