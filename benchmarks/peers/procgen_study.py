"""pbx's PPO against CleanRL's on ProcGen, on the CPU: the runs, resumable, and their small files kept.

The study of docs/results.md ("pbx's PPO against CleanRL's"): for each seed and
game, one pbx ``--search none`` member and one run of CleanRL's
``ppo_procgen.py`` (``cleanrl_ppo_procgen.py`` beside this file) at the same
settings: the ProcGen paper's PPO (64 envs x 256 steps, 8 minibatches, 3
epochs, IMPALA CNN), 200 easy training levels, and the reward normaliser's
discount at CleanRL's 0.999 (pbx's ProcGen default is train-procgen's 0.99:
``normalize_gamma``). Both sides log the running mean of the last 100 finished
training episodes: pbx's history at each round's end (``score100``, rounds of
65,536 steps), CleanRL's curve file at each iteration (16,384 steps).

On 2 cores a run takes hours (one core each, about 36 env steps per second for
CleanRL on bigfish), so a study spans sessions: ``run`` starts the runs not yet
finished, ``--jobs`` at a time, each pinned to a core of its own and niced;
with ``--device cuda`` all of them share the machine's GPU (both sides with
cuDNN's nondeterministic kernels, pbx's default: CleanRL's ``--no-torch-deterministic``);
stopped, it leaves each run resumable (pbx's ``--resume``; the CleanRL copy's
checkpoint), and run again it carries on. A finished run's small files
(pbx: ``config.yaml`` and ``history.csv``; CleanRL: ``curve.csv`` and the
command) are copied under ``docs/results/procgen_peer/<game>/<side>-s<seed>/``.

    .venv/bin/python benchmarks/peers/procgen_study.py --dir /work/studies/procgen_peer \\
        --cleanrl-python .venv-cleanrl/bin/python [--jobs 2] [--steps 1048576]

``benchmarks/peers/compare_procgen.py`` compares what has finished.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "procgen_peer"
CLEANRL = Path(__file__).resolve().parent / "cleanrl_ppo_procgen.py"
ROUND = 65_536
"""pbx's round (4 CleanRL iterations of 64 x 256): the steps at which both sides have a point."""


@dataclass(frozen=True)
class Job:
    side: str
    """``pbx`` or ``cleanrl``."""
    game: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.game}/{self.side}-s{self.seed}"


def jobs(games: list[str], seeds: list[int]) -> list[Job]:
    """Pairs in order (both sides of a seed and game together), so matched runs finish together."""
    return [Job(side, game, seed) for seed in seeds for game in games for side in ("pbx", "cleanrl")]


def command(job: Job, folder: Path, steps: int, cleanrl_python: str, device: str = "cpu") -> list[str]:
    """The command that starts ``job`` in ``folder`` on ``device`` (cpu or cuda), or continues it there."""
    if job.side == "pbx":
        if (folder / "config.yaml").exists():
            return [sys.executable, "-m", "pbx.train", "--resume", str(folder)]
        return [sys.executable, "-m", "pbx.train", "--env", job.game, "--search", "none", "--batchsize", "1",
                "--seed", str(job.seed), "--t_ready", str(ROUND), "--max_budget", str(steps), "--device", device,
                "-m", "eval_episodes=0", "normalize_gamma=0.999", "--run-dir", str(folder)]
    return [cleanrl_python, str(CLEANRL), "--env-id", job.game, "--num-levels", "200", "--seed", str(job.seed),
            "--total-timesteps", str(steps), *(["--no-cuda"] if device == "cpu" else ["--no-torch-deterministic"]),
            "--curve", str(folder / "curve.csv"), "--checkpoint", str(folder / "checkpoint.pt")]


def steps_done(job: Job, folder: Path) -> int:
    """The env steps the run has on disk (0: none yet)."""
    if job.side == "pbx":
        history = folder / "history.csv"
        return int(pd.read_csv(history)["steps"].max()) if history.exists() and len(pd.read_csv(history)) else 0
    curve = folder / "curve.csv"
    return int(pd.read_csv(curve)["steps"].max()) if curve.exists() and len(pd.read_csv(curve)) else 0


def keep(job: Job, folder: Path, cmd: list[str]) -> Path:
    """Copy the finished run's small files under docs/results/procgen_peer/."""
    out = RESULTS / job.name
    out.mkdir(parents=True, exist_ok=True)
    names = ("config.yaml", "history.csv") if job.side == "pbx" else ("curve.csv",)
    for name in names:
        shutil.copy2(folder / name, out / name)
    if job.side == "cleanrl":
        (out / "command.txt").write_text(" ".join([Path(cmd[0]).name, *cmd[1:2], *cmd[2:]]).replace(
            str(folder), "RUN") + "\n")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--dir", type=Path, required=True, help="where the runs live (outside the repository)")
    p.add_argument("--cleanrl-python", default=str(ROOT / ".venv-cleanrl" / "bin" / "python"),
                   help="the Python of benchmarks/peers/requirements-cleanrl.txt's environment")
    p.add_argument("--games", nargs="+", default=["bigfish", "starpilot"])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=16 * ROUND, help="env steps per run (default 1,048,576)")
    p.add_argument("--jobs", type=int, default=2, help="runs at once, one core each")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where both sides train (cuda: all runs share the one GPU)")
    args = p.parse_args()
    if args.steps % ROUND:
        p.error(f"--steps must be a multiple of {ROUND:,} (a pbx round), got {args.steps:,}")
    if not Path(args.cleanrl_python).exists():
        p.error(f"--cleanrl-python {args.cleanrl_python} does not exist: make the environment of "
                f"benchmarks/peers/requirements-cleanrl.txt")
    queue = [j for j in jobs(args.games, args.seeds) if steps_done(j, args.dir / j.name) < args.steps]
    cores = sorted(os.sched_getaffinity(0))
    running: dict[int, tuple[Job, subprocess.Popen, list[str]]] = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    while queue or running:
        for slot in range(args.jobs):
            if slot not in running and queue:
                job = queue.pop(0)
                folder = args.dir / job.name
                # pbx makes its own run folder; CleanRL's copy writes its curve and checkpoint into one
                (folder if job.side == "cleanrl" else folder.parent).mkdir(parents=True, exist_ok=True)
                cmd = command(job, folder, args.steps, args.cleanrl_python, args.device)
                log = open(args.dir / f"{job.name}.log", "a")
                core = str(cores[slot % len(cores)])
                proc = subprocess.Popen(["nice", "-n", "19", "taskset", "-c", core, *cmd], cwd=ROOT, env=env,
                                        stdout=log, stderr=subprocess.STDOUT)
                running[slot] = (job, proc, cmd)
                print(f"{time.strftime('%H:%M:%S')} started {job.name} on core {core}", flush=True)
        time.sleep(10)
        for slot, (job, proc, cmd) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[slot]
            folder = args.dir / job.name
            done = steps_done(job, folder)
            if proc.returncode == 0 and done >= args.steps:
                print(f"{time.strftime('%H:%M:%S')} finished {job.name}: kept in {keep(job, folder, cmd)}",
                      flush=True)
            else:
                print(f"{time.strftime('%H:%M:%S')} {job.name} stopped (exit {proc.returncode}) at {done:,} steps; "
                      f"see {args.dir / job.name}.log", flush=True)


if __name__ == "__main__":
    main()
