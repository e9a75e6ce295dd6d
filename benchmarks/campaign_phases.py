"""How each phase of ``gpu_campaign.py`` runs: the levers' bench, the ways to share the GPU, the training, the
delivery.

Each phase gets its share of the loan's wall clock from the plan (``gpu_campaign.py``) and stops inside it: a
process past its share is stopped as Ctrl-C stops it (``pbx.train`` keeps its finished rounds), so a slow phase
cannot eat the runs' time. What travels between loans is ``campaign_archive.py``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from campaign_archive import archive
from gpu_machine import AS_ROOT, MPIEXEC, ROOT, launcher, population_rate

@dataclass(frozen=True)
class Arm:
    """One run of the campaign: a ``pbx.train`` command line's own flags."""

    name: str
    env: str
    search: str
    members: int
    seed: int = 0
    flags: tuple[str, ...] = ()
    ranks: int = 1
    """MPI ranks the members train on (``mpiexec -n ranks``; 1: one process, members in turn)."""


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
    return dict(os.environ) | AS_ROOT


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
    if MPIEXEC:
        ways["mpiexec -n 4"] = [launcher(4) + train + pop + ["--runner", "mpi", "--run-dir", str(folder / "mpi")]]
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


STOP_GRACE_S = {"paper": 30.0, "tiny": 15.0}
"""Seconds of the training share each run leaves between its own ``--time-limit`` and the share's end: a run stops
while a rollout and its save still fit (``pbx.runners.stopping``), and the rest is its exit and slack. ``tiny``'s
loans run every arm on one shared core beside other work (the tests): there a two-rank PB2 run's last rollout, save
and MPI teardown outlasted 6 s, so the campaign's SIGTERM ended it (mpiexec's exit 15, its ranks' rounds saved)."""


def train(c: Campaign, seconds: float, base: list[str], arms: list[Arm]) -> None:
    """Phase 3: every arm at once, each told to stop by the share's end (``--time-limit``): a run stops inside its
    round at a rollout boundary with the round in progress saved, so a loan keeps every minute it trained and the
    next loan goes on inside that round. A run still going past the share is stopped (SIGTERM: the same save),
    then killed."""
    limit = max(seconds - STOP_GRACE_S[c.setting], 1.0)
    began = time.monotonic()
    running: dict[str, tuple[subprocess.Popen[Any], Path]] = {}
    logs = []
    for arm in (sized(arm, c.setting) for arm in arms):
        folder = c.work / "runs" / arm.name
        command = [*start_command(c, arm, base, folder), "--time-limit", f"{limit:.0f}"]
        out = open(c.work / f"train_{arm.name}.txt", "a")
        logs.append(out)
        running[arm.name] = (subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                              env=python_env(), start_new_session=True), folder)
    steps = {name: _steps(folder) for name, (_, folder) in running.items()}
    try:
        for name, (proc, folder) in running.items():
            try:
                proc.wait(timeout=max(began + seconds - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                stop(proc, grace=max(min(20.0, c.left() - 1.0), 1.0))
            how = {0: "finished", 75: "stopped by its time limit, everything saved"}.get(proc.returncode,
                                                                                        f"ended ({proc.returncode})")
            c.say(f"train {name}: {how}; {_rounds(folder)} finished rounds, {_steps(folder) - steps[name]:,} env "
                  f"steps trained and kept in this loan ({_steps(folder):,} in all)")
    finally:  # the campaign interrupted (Ctrl-C, SIGTERM): its runs, in sessions of their own, stop with it
        for proc, _ in running.values():
            stop(proc)
        for out in logs:
            out.close()


def _steps(folder: Path) -> int:
    """Env steps a run's members hold on disk, its round in progress included: the last finished round's steps
    summed, each replaced by its member's step count inside the next round where a stop or a save left one
    (``pbx.runners.partial``)."""
    path = folder / "history.csv"
    if not path.is_file():
        return 0
    try:
        history = pd.read_csv(path, usecols=["member", "round", "steps"])
    except (pd.errors.EmptyDataError, ValueError):
        return 0
    last = history[history["round"] == history["round"].max()] if len(history) else history
    held = dict(zip(last["member"], last["steps"]))
    following = int(history["round"].max()) + 1 if len(history) else 0
    # a member through the round (done.json) holds its end; one stopped inside it (part.json, saved with its
    # checkpoint) its steps there: sorted, so that a member's done record, written last, is read last
    for record in sorted((folder / "checkpoints").glob(f"member_*.r{following}.*.json"),
                         key=lambda path: path.name.endswith(".done.json")):
        held[int(record.name.split(".")[0].removeprefix("member_"))] = int(json.loads(record.read_text())["steps"])
    return int(sum(held.values()))


def start_command(c: Campaign, arm: Arm, base: list[str], folder: Path) -> list[str]:
    """The ``pbx.train`` command that trains ``arm`` in ``folder``: ``--resume`` where pbx wrote the run's
    ``config.yaml`` and ``history.csv`` (with or without a finished round: pbx resumes a run whose history is its
    header alone), a new run otherwise. A folder the run was stopped in before pbx wrote its history holds a
    ``config.yaml`` that makes a new run refuse ("already holds a run") and that ``--resume`` refuses too (no
    history): the campaign wrote it, in its own work folder, and nothing of it is a finished round, so it goes and
    the run starts over."""
    if (folder / "config.yaml").is_file() and (folder / "history.csv").is_file():
        return [*launch(arm), "--resume", str(folder), "--device", c.device]
    if folder.exists():
        c.say(f"train {arm.name}: starts over (stopped before pbx wrote its history, it had no round to continue)")
        shutil.rmtree(folder)
    flags = base if c.setting == "tiny" else [*base, *arm.flags]
    return [*launch(arm), "--env", arm.env, "--search", arm.search, "--batchsize", str(arm.members), "--seed",
            str(arm.seed), "--device", c.device, *flags, "--run-dir", str(folder)]


def sized(arm: Arm, setting: str) -> Arm:
    """``arm`` as ``setting`` trains it: ``tiny`` (a CPU of two cores, every arm at once) at most two members on at
    most two ranks, so that no arm starves the others of the start-up each loan pays."""
    return arm if setting != "tiny" else dataclasses.replace(arm, members=min(arm.members, 2),
                                                             ranks=min(arm.ranks, 2))


def launch(arm: Arm) -> list[str]:
    """``python -m pbx.train``, under ``mpiexec -n ranks`` for an arm whose members train on MPI ranks."""
    train = [sys.executable, "-m", "pbx.train"]
    return [*launcher(arm.ranks), *train] if arm.ranks > 1 else train


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
    try:
        archive(c.work, to / "archive", part_mb, archive_mb, c.say)
    finally:  # an archive refused as too large still leaves the summary of what was trained
        (to / "summary.md").write_text("# GPU campaign\n\n" + "\n".join(f"- {line}" for line in c.log) + "\n")
