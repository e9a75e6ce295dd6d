"""The MPI runner's parallel efficiency and checkpoint transfer, measured side by side in one run.

(a) Population throughput with 1 rank (the synchronous runner) and with N ranks
    for the same population of a CPU-bound member (CartPole PPO, an MLP: one core
    each), and the parallel efficiency T1 / (N * TN) (target >= 0.85 at N = 2 on
    2 cores). Times are the runs' own ``wall_s`` (training rounds, without the
    processes' start), alternating sync and MPI runs; the median over repeats.
(b) The time to copy one IMPALA-CNN PPO checkpoint (bigfish, the paper's 64 envs,
    so the file also holds 64 observations) from a donor on rank 0 into a recipient
    on rank 1 (the exploit: read, send, load), ``p2p`` and ``collective``, in MB/s;
    the median of repeated copies.
(c) With ``--gpu``: population throughput of PPO with the IMPALA CNN and the
    paper's settings (64 envs x 256 steps) on one GPU, 4 members, with 1, 2 and 4
    ranks sharing it (``--gpu-env``: bigfish, or any image env).

    .venv/bin/python benchmarks/bench_mpi.py [--repeats 3] [--ranks 2] [--gpu [--gpu-env ENV] [--gpu-only]]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = str(Path(sys.executable).parent / "mpiexec") if (Path(sys.executable).parent / "mpiexec").exists() \
    else shutil.which("mpiexec") or "mpiexec"  # the mpich wheel's, beside this Python, else the system's
CPU_RUN = ["--env", "CartPole-v1", "--search", "PBT", "--seed", "0", "--device", "cpu", "--t_ready", "4096",
           "--max_budget", "16384", "-m", "n_envs=8", "n_steps=256", "batch_size=256", "eval_episodes=0"]
GPU_RUN = ["--search", "PBT", "--batchsize", "4", "--seed", "0", "--device", "cuda",
           "--t_ready", "65536", "--max_budget", "131072", "-m", "eval_episodes=10"]
TRANSFERS = 10


def train_seconds(ranks: int, args: list[str], folder: Path) -> float:
    """Wall seconds of a run's rounds (``wall_s`` of its last round), with ``ranks`` MPI ranks (1: synchronous)."""
    command = [sys.executable, "-m", "pbx.train", *args, "--run-dir", str(folder)]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks), *command]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return float(pd.read_csv(folder / "history.csv")["wall_s"].max())


def throughput(args: list[str], pop: int, ranks: list[int], repeats: int, steps: int) -> dict[int, float]:
    """Median seconds per run for each rank count, the counts alternating within each repeat."""
    times: dict[int, list[float]] = {n: [] for n in ranks}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            for n in ranks if rep % 2 == 0 else ranks[::-1]:
                times[n].append(train_seconds(n, [*args, "--batchsize", str(pop)], Path(tmp) / f"r{rep}n{n}"))
    medians = {n: statistics.median(t) for n, t in times.items()}
    for n, t in medians.items():
        print(f"    {n} rank{'s' if n > 1 else ' '}: {t:7.2f} s, {pop * steps / t:9,.0f} env steps/s"
              + (f", speed-up {medians[ranks[0]] / t:.2f}, efficiency {medians[ranks[0]] / (n * t):.2f}"
                 if n != ranks[0] else ""), flush=True)
    return medians


def transfer(folder: Path) -> None:
    """Under ``mpiexec -n 2``: time moving member 0's checkpoint (rank 0) to member 1 (rank 1), both modes."""
    from mpi4py import MPI

    from pbx.config import resolve
    from pbx.run_dir import RunDir
    from pbx.runners.mpi import MPIExecutor
    from pbx.strategies import Decision

    comm = MPI.COMM_WORLD
    for mode in ("p2p", "collective"):
        cfg = resolve([{"run": {"env": "bigfish", "search": "PBT", "pop_size": 2, "device": "cpu", "comm": mode},
                        "member": {"eval_episodes": 0}}])
        executor = MPIExecutor(cfg, RunDir(folder), comm)
        executor.build(dict(enumerate([cfg.space.initial()] * 2)))
        for i, member in executor.local.members.items():
            member.save(executor.run_dir.checkpoint(i, 0))
        comm.barrier()
        decisions = [Decision(1, 0, cfg.space.initial())]
        seconds = []
        for _ in range(TRANSFERS):
            comm.barrier()
            start = time.perf_counter()
            executor.apply(decisions, 0)  # read, send, and load into the recipient on rank 1
            comm.barrier()
            seconds.append(time.perf_counter() - start)
        if comm.Get_rank() == 0:
            size = executor.run_dir.checkpoint(0, 0).stat().st_size / 1e6
            t = statistics.median(seconds)
            print(f"    {mode:<10}: {size:.1f} MB in {t * 1e3:6.1f} ms = {size / t:7.0f} MB/s "
                  f"(median of {TRANSFERS})", flush=True)
        executor.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--gpu", action="store_true", help="also (c): ranks sharing one GPU")
    parser.add_argument("--gpu-env", default="bigfish", help="the env of (c)")
    parser.add_argument("--gpu-only", action="store_true", help="(c) alone")
    parser.add_argument("--transfer", metavar="DIR", help=argparse.SUPPRESS)  # the MPI half of (b)
    args = parser.parse_args()
    if args.transfer:
        transfer(Path(args.transfer))
        return
    n = args.ranks
    if args.gpu_only:
        return gpu(args.gpu_env, args.repeats)
    print(f"(a) CartPole PPO, population {n}, 16,384 steps per member: 1 rank against {n}", flush=True)
    throughput(CPU_RUN, n, [1, n], args.repeats, 16384)
    print("(b) one IMPALA-CNN PPO checkpoint (bigfish, 64 envs) from rank 0 to rank 1", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([MPIEXEC, "-n", "2", sys.executable, __file__, "--transfer", tmp], cwd=ROOT, check=True)
    if args.gpu:
        gpu(args.gpu_env, args.repeats)


def gpu(env: str, repeats: int) -> None:
    print(f"(c) {env} PPO (paper settings), population 4, 131,072 steps per member, one GPU", flush=True)
    throughput(["--env", env, *GPU_RUN], 4, [1, 2, 4], repeats, 131072)


if __name__ == "__main__":
    main()
