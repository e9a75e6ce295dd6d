"""What ``bench_gpu.py`` and ``gpu_campaign.py`` share on a lent GPU machine: its MPI launcher, its cores, its
device, and a run's rate read back from its history.

The GPU machines run as root under Open MPI, which then wants flags and variables that pbx's CPU machines (MPICH,
an ordinary user) do not; both commands start ``pbx.train`` under ``mpiexec`` there, so the launcher is made once.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
"""The mpich wheel's ``mpiexec``, beside this Python, else the system's; None: no MPI."""
AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
"""The variables without which Open MPI refuses to start as root."""


def root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@functools.cache
def open_mpi() -> bool:
    """Whether ``mpiexec`` is Open MPI's (whose version line names it), not MPICH's."""
    try:
        out = subprocess.run([MPIEXEC or "mpiexec", "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = (out.stdout + out.stderr).lower()
    return "open mpi" in text or "openrte" in text or "prrte" in text or "prterun" in text


def launcher(ranks: int | str) -> list[str]:
    """``mpiexec -n ranks``, and for Open MPI what it needs to run pbx as pbx expects: no binding (Open MPI
    binds each of one or two ranks to a single core by default, while pbx shares a machine's cores among its
    ranks itself, see :func:`pbx.members.sb3.process.thread_budget`), and as root (the GPU machines run as root)
    the flag without which it refuses to start."""
    command = [MPIEXEC or "mpiexec", "-n", str(ranks)]
    if open_mpi():
        command += ["--bind-to", "none"] + (["--allow-run-as-root"] if root() else [])
    return command


def cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pin_cores(parser: argparse.ArgumentParser, count: int | None) -> None:
    """Run on ``count`` of the cores this process may use (None: all), before pbx counts them; the processes it
    starts inherit them. On a busy CPU machine two torch threads spin against each other: one core is faster."""
    if count is None:
        return
    if not hasattr(os, "sched_setaffinity"):
        parser.error("--cores needs os.sched_setaffinity (Linux)")
    allowed = sorted(os.sched_getaffinity(0))
    if not 1 <= count <= len(allowed):
        parser.error(f"--cores must be between 1 and the {len(allowed)} cores this process may use")
    os.sched_setaffinity(0, allowed[-count:])


def pick_device(parser: argparse.ArgumentParser, asked: str) -> str:
    """``cuda`` or ``cpu`` for ``--device`` ``auto``, ``cpu`` or ``cuda``; ``cuda`` without a GPU is refused."""
    if asked == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA GPU")
    return "cuda" if asked == "cuda" or (asked == "auto" and torch.cuda.is_available()) else "cpu"


def population_rate(folder: Path) -> float | None:
    """Env steps/s of a run over its rounds after the first (without process start, member building and the first
    round's warm-up), all its members together; None: fewer than two rounds."""
    path = folder / "history.csv"
    history = pd.read_csv(path) if path.is_file() else None
    if history is None or history["round"].nunique() < 2:
        return None
    wall = history.groupby("round")["wall_s"].max().sort_index()
    trained = history.groupby("round")["steps"].sum().sort_index().diff().iloc[1:]  # steps are each member's total
    return float(trained.sum() / (wall.iloc[-1] - wall.iloc[0]))
