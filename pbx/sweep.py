"""``python -m pbx.sweep FILE``: every variant of an experiment file for each seed, into one sweep folder.

    python -m pbx.sweep experiments/reduced_toy.yaml                     # the seeds the file names
    python -m pbx.sweep experiments/reduced_toy.yaml --seeds 5 --out sweeps/toy5
    python -m pbx.sweep experiments/procgen_mix.yaml --print-slurm procgen_mix.sbatch   # six games, one folder
    python -m pbx.sweep experiments/procgen_mix.yaml --only 7   # one run (an array task)

Rerunning the same command after a crash, Ctrl-C or a job's time limit skips
finished runs, resumes stopped ones and starts the rest, each from its variant's
settings as resolved when the sweep folder was made (a variant that resolves
differently now is refused unless ``--keep-stored``). A run that fails is
reported and the others go on, under MPI too; the command then exits 1 naming
the failed runs. ``--time-limit`` (or the file's ``time_limit:``), SIGTERM,
Ctrl-C and SIGUSR1 stop the run in progress inside its round with everything
saved and exit 75; rerunning goes on inside that round. The file's format and
the folder's layout: :mod:`pbx.sweeps`.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()
"""When the command began: ``--time-limit`` counts from here."""

import signal
import sys
from typing import TYPE_CHECKING, Sequence

from pbx.console import format_score
from pbx.errors import ArgumentParser, UsageError, command_parser
from pbx.runners.ranks import abort, world
from pbx.slurm import slurm_script
from pbx.runners.start import follow_runs, release
from pbx.runners.stopping import STOPPED_EXIT, RunStopped, StopClock
from pbx.sweep_file import RunSpec, Sweep, load_sweep
from pbx.sweeps import Progress, execute, prepare, progress

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm


def build_parser() -> ArgumentParser:
    p = command_parser("python -m pbx.sweep", "Run every variant of an experiment file for each seed into one sweep "
                       "folder, or write a Slurm job array that does.", __doc__)
    p.add_argument("file", metavar="FILE", help="experiment YAML: pbx.train --config settings plus a sweep: section")
    p.add_argument("--seeds", default=None, help="N (seeds 0..N-1) or a list such as 0,3,7 (default: the file's "
                                                 "seeds:)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="sweep folder (default: sweeps/<file stem>, plus -<value> per -m item)")
    p.add_argument("-m", dest="overrides", nargs="+", default=[], metavar="KEY=VALUE",
                   help="override a setting of every run, e.g. -m device=cpu eval_episodes=10")
    p.add_argument("--only", type=int, default=None, metavar="INDEX",
                   help="run only the INDEX-th run (seed by seed, variants in file order; a Slurm array task)")
    p.add_argument("--keep-stored", "--keep_stored", dest="keep_stored", action="store_true",
                   help="go on with the settings stored when the sweep folder was made where its variants resolve "
                        "differently now (an edited space file, a changed member default, another pbx commit)")
    p.add_argument("--time-limit", "--time_limit", dest="time_limit", default=None, metavar="SECONDS",
                   help="stop the sweep by this many seconds of wall clock (default: the file's time_limit), the "
                        "run in progress inside its round with everything saved (exit code 75); rerun to go on")
    p.add_argument("--print-slurm", dest="print_slurm", nargs="?", const="-", default=None, metavar="PATH",
                   help="write a Slurm job-array script (one task per run) to PATH, or stdout, instead of running")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    comm = world()
    # A scheduler's SIGTERM (end of a job's time) stops the sweep like Ctrl-C.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if comm is not None and comm.Get_rank() > 0:
        return follow_runs(comm)
    sweep = None
    try:
        args = build_parser().parse_args(argv)
        # Resolved as the runs will be: on this launch's ranks, or on the Slurm tasks' the script asks for.
        ranks = comm.Get_size() if comm is not None else None if args.print_slurm is not None else 1
        sweep = load_sweep(args.file, args.seeds, args.overrides, args.out, ranks, args.time_limit)
        runs = sweep.runs
        if args.only is not None and not 0 <= args.only < len(runs):
            raise UsageError(f"--only {args.only}: the sweep has runs 0 to {len(runs) - 1}")
        prepare(sweep, args.keep_stored)
        if args.print_slurm is not None:
            return _print_slurm(sweep, args.print_slurm, args.keep_stored)
        return _run(sweep, runs if args.only is None else [runs[args.only]], comm,
                    StopClock(sweep.time_limit, started=STARTED))
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunStopped as err:
        keep = ["--keep-stored"] if args.keep_stored else []
        print(f"stopped: {err}; rerun {sweep.command(*keep)} to go on", file=sys.stderr, flush=True)  # type: ignore[union-attr]
        return STOPPED_EXIT
    except KeyboardInterrupt:
        keep = ["--keep-stored"] if sweep is not None and args.keep_stored else []
        again = f"; rerun {sweep.command(*keep)} to finish the sweep" if sweep is not None else ""
        print(f"\ninterrupted: finished rounds are saved{again}", file=sys.stderr, flush=True)
        if comm is not None:
            abort(None, 130)  # the other ranks may be inside a run, waiting for this one
        return 130
    finally:
        release(comm)


def _run(sweep: Sweep, runs: list[RunSpec], comm: Intracomm | None, clock: StopClock) -> int:
    total = len(sweep.runs)
    print(f"sweep: {len(sweep.variants)} variants x {len(sweep.seeds)} seeds = {total} runs of {sweep.file} "
          f"-> {sweep.out} (each run's round lines: <run>/train.log)", flush=True)
    failed: list[str] = []
    for spec in runs:
        head = f"[{spec.index + 1}/{total}] {spec.label}:"
        try:
            why = _one(sweep, spec, head, comm, clock)
        except UsageError as err:  # a damaged run folder
            why = str(err)
        if why is not None:
            failed.append(f"{spec.label} ({why})")
            print(f"{head} failed: {why}", flush=True)
    if failed:
        print(f"error: {len(failed)} of {len(runs)} runs failed: {'; '.join(failed)}. The others are done; rerun "
              f"the command to retry these", file=sys.stderr)
        return 1
    if len(runs) == len(sweep.runs):
        print(f"sweep: done; statistics: python -m pbx.report {sweep.out}", flush=True)
    return 0


def _one(sweep: Sweep, spec: RunSpec, head: str, comm: Intracomm | None, clock: StopClock) -> str | None:
    """Skip, resume or start one run, printing what it does; None, or why the run failed."""
    before = progress(spec.path)
    if before is not None and before.finished:
        print(f"{head} skipped, finished: {_scores(before)}", flush=True)
        return None
    resume = before is not None
    print(f"{head} {f'resumed after round {before.done}/{before.rounds}' if resume else 'started'}", flush=True)
    start = time.perf_counter()
    why = execute(sweep, spec, resume, comm, clock)
    after = progress(spec.path) if why is None else None
    if after is not None:
        print(f"{head} done in {time.perf_counter() - start:.1f} s: {_scores(after)}", flush=True)
    return why


def _print_slurm(sweep: Sweep, path: str, keep_stored: bool) -> int:
    script = slurm_script(sweep, keep_stored)
    (sweep.out / "slurm").mkdir(exist_ok=True)  # Slurm does not create the output folder
    if path == "-":
        sys.stdout.write(script)
    else:
        try:
            with open(path, "w") as f:
                f.write(script)
        except OSError as err:
            raise UsageError(f"--print-slurm {path}: {err.strerror}") from None
        print(f"wrote {path}: {len(sweep.runs)} array tasks, one per run; submit with sbatch {path}")
    return 0


def _scores(p: Progress) -> str:
    return f"final score {format_score(p.score)} (test {format_score(p.test_score)})"


if __name__ == "__main__":
    sys.exit(main())
