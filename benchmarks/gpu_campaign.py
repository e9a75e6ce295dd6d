"""One lent GPU, used whole: the levers measured, the ways to share the GPU measured, then long ProcGen runs.

A GPU is lent here for minutes, now and then; ProcGen's runs are 25M env steps a member. This
command spends one such loan inside ``--limit`` seconds of wall clock, and leaves what the next
loan needs to continue the same runs:

1. **bench** (``--skip-bench`` leaves it out): ``bench_gpu.py`` with the levers off (the member
   as shipped) and on (``--precision bf16 --channels-last``), each beside plain SB3: one member's
   env steps/s and where its time goes.
2. **arrangements** (``--skip-arrangements``): a population of 4 on the one device, trained by one
   process (members in turn), by 4 processes, by ``mpiexec -n 4``, and by 4 processes under NVIDIA
   MPS where ``nvidia-cuda-mps-control`` exists: total env steps/s over the rounds after the first.
   Then the image network's inference for 4 members' rollout step, in turn, on 4 CUDA streams and as
   one batched call over the members' stacked weights (``torch.func``).
3. **train**: the campaign's runs (:data:`ARMS`), all at once on the device, each a ``pbx.train``
   process at pbx's shipped ProcGen defaults, continued from the archive when one is given
   (``--resume-from``). A run is stopped at a round's end when its next round would not finish
   before the time left for training; whatever still trains at that time is stopped there (its round
   in progress is lost, its finished rounds are not).
4. **deliver**: each run's small files and the phases' outputs in ``results.tar.gz``, a
   ``summary.md``, and the archive the next loan resumes from: the run folders without their
   TensorBoard logs, each member's checkpoint made compact (``campaign_archive.py``), gzip-compressed, in
   parts of at most ``--part-mb`` MB (what a GPU machine here can send back: 8 files of 16 MiB).

The phases get fixed shares of the limit (bench 25%, arrangements 35%, the rest training, less
what delivering needs), so a slow phase cannot eat the runs' time; a phase past its share is
stopped and says so. ``--setting tiny`` shrinks everything (2 envs x 16 steps, rounds of one rollout)
for a CPU: ``tests/test_gpu_campaign.py`` runs it with a one-minute limit and resumes from its own
archive.

    python benchmarks/gpu_campaign.py --limit 540 --deliver $OUT
    python benchmarks/gpu_campaign.py --limit 540 --deliver $OUT --skip-bench --resume-from docs/results/procgen_campaign/archive
    python benchmarks/gpu_campaign.py collect DELIVERED    # back here: into docs/results/procgen_campaign/

``docs/gpu.md`` has the whole loan, command by command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from campaign_archive import archive, collect, refuse, unpack

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Arm:
    """One run of the campaign: a ``pbx.train`` command line's own flags."""

    name: str
    env: str
    search: str
    members: int
    seed: int = 0
    flags: tuple[str, ...] = ()


SCORED = ("--t_ready", "262144")
"""The baselines' rounds: for ``--search none`` a round is only when members are scored and saved, so they are scored
every 262,144 steps (16 rollouts, as the first long bigfish run was) rather than at PB2's 500k: shorter rounds lose
less when a loan ends mid-round, and the curves are finer."""

ARMS = (
    # --search none with 3 members: 3 seeds of the fixed-hyperparameter baseline, one process
    Arm("bigfish_none", "bigfish", "none", 3, flags=SCORED),
    Arm("starpilot_none", "starpilot", "none", 3, flags=SCORED),
    # the design card's core: PB2 on ProcGen at the PB2 paper's schedule (exploit every 500k steps)
    Arm("bigfish_pb2", "bigfish", "PB2", 4),
)
"""The runs: pbx's shipped ProcGen defaults (the ProcGen paper's PPO, ``normalize_gamma`` 0.99, 25M steps a
member, rounds of 500k) but for what each arm's flags name (``--setting tiny`` replaces those too)."""

POPULATION = ("--t_ready", "16384", "-m", "eval_episodes=0")
"""The arrangements' runs at the paper setting: rounds of one rollout a member, no test episodes."""

TINY = ("--t_ready", "32", "--max_budget", "320000", "-m", "n_envs=2", "n_steps=16", "batch_size=16", "n_epochs=1",
        "eval_episodes=0")
"""``--setting tiny``: rounds of one 32-step rollout and one epoch, no test episodes (for a CPU and the test)."""

SHARES = {"bench": 0.25, "arrangements": 0.35}
"""The phases' shares of ``--limit``; training gets what they leave, less :data:`DELIVER_S`."""
DELIVER_S = {"paper": 60.0, "tiny": 20.0}
"""Seconds kept for stopping the runs and writing what the campaign delivers."""


@dataclass
class Campaign:
    """Where the campaign works and what it has been told."""

    work: Path
    setting: str
    device: str
    deadline: float
    log: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        """Print a line and keep it for ``summary.md``."""
        print(line, flush=True)
        self.log.append(line)

    def left(self) -> float:
        return self.deadline - time.monotonic()


def python_env() -> dict[str, str]:
    """This process's environment, with Open MPI allowed to run as root (the GPU machines run as root)."""
    return dict(os.environ) | {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def run_for(command: list[str], seconds: float, out: Path, env: dict[str, str] | None = None) -> str:
    """Run ``command`` with its output into ``out``, stopped (SIGTERM, then SIGKILL) after ``seconds``; returns how
    it ended."""
    with open(out, "w") as f:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env or python_env(),
                                start_new_session=True)
        try:
            code = proc.wait(timeout=max(seconds, 1.0))
            return "finished" if code == 0 else f"failed ({code})"
        except subprocess.TimeoutExpired:
            stop(proc)
            return f"stopped at its share of the limit ({seconds:.0f} s)"


def stop(proc: subprocess.Popen[Any], grace: float = 20.0) -> None:
    """SIGTERM the process group (pbx.train ends like Ctrl-C: finished rounds stay), SIGKILL after ``grace``."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def bench(c: Campaign, seconds: float) -> None:
    """Phase 1: bench_gpu.py with the levers off and on, half the share each."""
    script = str(ROOT / "benchmarks" / "bench_gpu.py")
    common = [sys.executable, script, "--device", c.device, "--repeats", "1", "--split-calls", "1", "--skip-population"]
    for name, levers in (("off", []), ("on", ["--precision", "bf16", "--channels-last"])):
        start = time.monotonic()
        ended = run_for(common + levers, seconds / 2, c.work / f"bench_levers_{name}.txt")
        c.say(f"bench, levers {name}: {ended} in {time.monotonic() - start:.0f} s "
              f"(bench_levers_{name}.txt)")


def population_rate(folder: Path) -> float | None:
    """Env steps/s of a run over its rounds after the first, all its members together (None: fewer than two)."""
    path = folder / "history.csv"
    history = pd.read_csv(path) if path.is_file() else None
    if history is None or history["round"].nunique() < 2:
        return None
    wall = history.groupby("round")["wall_s"].max().sort_index()
    trained = history.groupby("round")["steps"].sum().sort_index().diff().iloc[1:]  # steps are each member's total
    return float(trained.sum() / (wall.iloc[-1] - wall.iloc[0]))


def arrangements(c: Campaign, seconds: float, base: list[str]) -> None:
    """Phase 2: a population of 4 on the device, four ways, then the members' inference three ways."""
    folder = c.work / "arrangements"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    train = [sys.executable, "-m", "pbx.train", "--device", c.device, *base]
    pop = ["--search", "PBT", "--batchsize", "4", "--seed", "0"]
    ways: dict[str, list[list[str]]] = {
        "one process, members in turn": [train + pop + ["--run-dir", str(folder / "one")]],
        "4 processes": [train + ["--search", "none", "--batchsize", "1", "--seed", str(i),
                                 "--run-dir", str(folder / f"proc{i}")] for i in range(4)],
    }
    mpiexec = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if mpiexec:
        launcher = [mpiexec, "-n", "4"] + (["--bind-to", "none", "--allow-run-as-root"] if _open_mpi(mpiexec) else [])
        ways["mpiexec -n 4"] = [launcher + train + pop + ["--runner", "mpi", "--run-dir", str(folder / "mpi")]]
    mps = shutil.which("nvidia-cuda-mps-control") if c.device == "cuda" else None
    if mps:
        ways["4 processes under MPS"] = [cmd[:-1] + [cmd[-1] + "_mps"] for cmd in ways["4 processes"]]
    each = seconds * 0.8 / len(ways)
    for name, commands in ways.items():
        env = python_env()
        if name.endswith("MPS"):
            env |= {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "mps"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "mps")}
            subprocess.run([mps, "-d"], env=env, check=False)
        procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                  start_new_session=True) for cmd in commands]
        try:
            end = time.monotonic() + each
            while time.monotonic() < end and any(p.poll() is None for p in procs):
                time.sleep(1.0)
        finally:
            for p in procs:
                stop(p)
            if name.endswith("MPS"):
                subprocess.run([mps], input="quit\n", text=True, env=env, check=False)
        rates = [population_rate(Path(cmd[-1])) for cmd in commands]  # concurrent runs: their rates add up
        total = None if None in rates else sum(r for r in rates if r is not None)
        c.say(f"arrangement {name}: " + (f"{total:,.0f} env steps/s in all" if total is not None
                                        else f"fewer than 2 rounds in {each:.0f} s"))
    inference(c)


def _open_mpi(mpiexec: str) -> bool:
    out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=60, check=False)
    text = (out.stdout + out.stderr).lower()
    return "open mpi" in text or "openrte" in text or "prrte" in text


def inference(c: Campaign) -> None:
    """Four members' rollout step (the IMPALA policy's forward on each member's frames) in turn, on four CUDA
    streams, and batched over the members' stacked weights: milliseconds per step of all four."""
    from gymnasium import spaces
    from torch.func import functional_call, stack_module_state

    from pbx.members.ppo.impala import ImpalaCNN

    device = torch.device(c.device)
    n_envs = 4 if c.setting == "tiny" else 64
    space = spaces.Box(0, 255, (3, 64, 64), dtype="uint8")
    nets = [ImpalaCNN(space).to(device).eval() for _ in range(4)]
    frames = [torch.rand(n_envs, 3, 64, 64, device=device) for _ in nets]
    params, buffers = stack_module_state(nets)  # type: ignore[arg-type]
    stacked = torch.stack(frames)

    def batched() -> Any:
        call = lambda p, b, x: functional_call(nets[0], (p, b), (x,))  # noqa: E731
        return torch.vmap(call)(params, buffers, stacked)

    streams = [torch.cuda.Stream(device) for _ in nets] if device.type == "cuda" else []

    def on_streams() -> None:
        for net, x, stream in zip(nets, frames, streams):
            with torch.cuda.stream(stream):
                net(x)
        torch.cuda.synchronize(device)

    ways = {"in turn": lambda: [net(x) for net, x in zip(nets, frames)], "batched (vmap)": batched}
    if streams:
        ways["4 CUDA streams"] = on_streams
    with torch.no_grad():
        for name, call in ways.items():
            for _ in range(3):
                call()
            _sync(device)
            start, reps = time.perf_counter(), 20
            for _ in range(reps):
                call()
            _sync(device)
            c.say(f"inference of 4 members x {n_envs} frames, {name}: {(time.perf_counter() - start) / reps * 1e3:.2f} ms")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(c: Campaign, seconds: float, base: list[str], arms: list[Arm]) -> None:
    """Phase 3: every arm at once; an arm stops at a round's end when its next round would not fit."""
    end = time.monotonic() + seconds
    running: dict[str, tuple[subprocess.Popen[Any], Path]] = {}
    logs = []
    for arm in arms:
        folder = c.work / "runs" / arm.name
        if (folder / "history.csv").is_file():
            command = [sys.executable, "-m", "pbx.train", "--resume", str(folder), "--device", c.device]
        else:
            flags = base if c.setting == "tiny" else [*base, *arm.flags]
            command = [sys.executable, "-m", "pbx.train", "--env", arm.env, "--search", arm.search, "--batchsize",
                       str(arm.members), "--seed", str(arm.seed), "--device", c.device, *flags,
                       "--run-dir", str(folder)]
        out = open(c.work / f"train_{arm.name}.txt", "a")
        logs.append(out)
        running[arm.name] = (subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                              env=python_env(), start_new_session=True), folder)
    rounds = {name: _rounds(folder) for name, (_, folder) in running.items()}
    started: dict[str, float] = {}  # when each run's latest round ended (its first round's time holds its start-up)
    took: dict[str, float] = {}
    while running:
        time.sleep(1.0)
        if time.monotonic() >= end:
            break
        for name, (proc, folder) in list(running.items()):
            if proc.poll() is not None:
                c.say(f"train {name}: ended by itself ({proc.returncode}) at {_rounds(folder)} rounds")
                del running[name]
                continue
            now = _rounds(folder)
            if now > rounds[name]:
                if name in started:
                    took[name] = (time.monotonic() - started[name]) / (now - rounds[name])
                rounds[name], started[name] = now, time.monotonic()
                if name in took and time.monotonic() + 1.1 * took[name] > end:
                    stop(proc)
                    c.say(f"train {name}: stopped after round {now}, a round takes {took[name]:.0f} s and "
                          f"{end - time.monotonic():.0f} s were left")
                    del running[name]
    for name, (proc, folder) in running.items():
        stop(proc)
        c.say(f"train {name}: stopped at the time limit with {_rounds(folder)} finished rounds"
              + (f" (a round takes about {took[name]:.0f} s)" if name in took else " (its round in progress lost)"))
    for out in logs:
        out.close()


def _rounds(folder: Path) -> int:
    """Finished rounds in a run folder's history (0 before the first)."""
    path = folder / "history.csv"
    if not path.is_file():
        return 0
    try:
        history = pd.read_csv(path, usecols=["round"])
    except (pd.errors.EmptyDataError, ValueError):
        return 0
    return int(history["round"].max()) + 1 if len(history) else 0


def deliver(c: Campaign, to: Path, part_mb: float, archive_mb: float) -> None:
    """Phase 4: ``results.tar.gz`` (each run's small files, the phases' outputs), ``summary.md``, the archive."""
    to.mkdir(parents=True, exist_ok=True)
    with tarfile.open(to / "results.tar.gz", "w:gz") as tar:
        for path in sorted(c.work.glob("*.txt")):
            tar.add(path, arcname=path.name)
        for run in sorted((c.work / "runs").glob("*")):
            for name in ("config.yaml", "history.csv", "strategy.csv", "curves.csv"):
                if (run / name).is_file():
                    tar.add(run / name, arcname=f"{run.name}/{name}")
    for run in sorted((c.work / "runs").glob("*")):
        history = pd.read_csv(run / "history.csv") if (run / "history.csv").is_file() else None
        if history is None or history.empty:
            c.say(f"run {run.name}: no finished round yet")
        else:
            last = history[history["round"] == history["round"].max()]
            c.say(f"run {run.name}: {history['round'].max() + 1} rounds, {int(last['steps'].max()):,} env steps a "
                  f"member; last round's train scores {', '.join(f'{s:.2f}' for s in last['score'])}")
    archive(c.work, to / "archive", part_mb, archive_mb, c.say)
    (to / "summary.md").write_text("# GPU campaign\n\n" + "\n".join(f"- {line}" for line in c.log) + "\n")


def main(argv: list[str] | None = None) -> None:
    if argv is None and sys.argv[1:2] == ["collect"]:
        if len(sys.argv) != 3:
            refuse("usage: gpu_campaign.py collect DELIVERED")
        collect(Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, required=True, help="wall-clock seconds for the whole campaign")
    parser.add_argument("--work", type=Path, default=ROOT / "campaign", help="where the runs train (default campaign/)")
    parser.add_argument("--deliver", type=Path, default=None,
                        help="where results.tar.gz, summary.md and the archive's parts go (default: --work)")
    parser.add_argument("--resume-from", type=Path, default=None, metavar="PREFIX",
                        help="continue the runs of an archive: PREFIX.tar.gz.00, .01, ... as delivered")
    parser.add_argument("--setting", choices=("paper", "tiny"), default="paper",
                        help="paper: pbx's shipped ProcGen defaults; tiny: 4 envs x 16 steps, for a CPU")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--cores", type=int, default=None,
                        help="run on this many of the cores this process may use, its runs included (default all); "
                             "on a busy CPU machine 1, where two torch threads spin against each other")
    parser.add_argument("--arms", nargs="+", choices=[a.name for a in ARMS], default=[a.name for a in ARMS])
    parser.add_argument("--skip-bench", action="store_true", help="leave out phase 1 (the levers)")
    parser.add_argument("--skip-arrangements", action="store_true", help="leave out phase 2 (sharing the GPU)")
    parser.add_argument("--part-mb", type=float, default=15.0, help="the archive's part size (default 15 MB)")
    parser.add_argument("--archive-mb", type=float, default=18.0,
                        help="the archive's size at most, where it can be kept (default 18 MB: what a GPU machine's "
                             "64 MiB of sent files leave beside the slimmed kit and the working tree)")
    args = parser.parse_args(argv)
    if args.limit <= DELIVER_S[args.setting]:
        parser.error(f"--limit must be above the {DELIVER_S[args.setting]:.0f} s kept for delivering")
    if args.part_mb <= 0 or args.archive_mb <= 0:
        parser.error("--part-mb and --archive-mb must be positive")
    if args.cores is not None:
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if not 1 <= args.cores <= len(allowed):
            parser.error(f"--cores must be between 1 and the {len(allowed)} cores this process may use")
        os.sched_setaffinity(0, allowed[-args.cores:])  # the runs it starts inherit it
    device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA GPU")
    c = Campaign(args.work.resolve(), args.setting, device, time.monotonic() + args.limit)
    c.work.mkdir(parents=True, exist_ok=True)
    where = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    c.say(f"campaign on {device} ({where}), limit {args.limit:.0f} s, setting {args.setting}, "
          f"arms {', '.join(args.arms)}, torch {torch.__version__}")
    if args.resume_from is not None:
        c.say(f"resumed from {args.resume_from}: runs {', '.join(unpack(args.resume_from, c.work))}")
    base = list(TINY) if args.setting == "tiny" else []
    if not args.skip_bench:
        bench(c, SHARES["bench"] * args.limit)
    if not args.skip_arrangements:
        arrangements(c, SHARES["arrangements"] * args.limit, base or list(POPULATION))
    train(c, c.left() - DELIVER_S[args.setting], base, [a for a in ARMS if a.name in args.arms])
    deliver(c, (args.deliver or c.work).resolve(), args.part_mb, args.archive_mb)


if __name__ == "__main__":
    main()
