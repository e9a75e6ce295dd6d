"""What an SB3 member sets up in its process: threads, device, and the random states it swaps in and out.

torch's thread count, default CUDA device and RNGs are process-wide, while a process may train
several members (in turn) and share its machine with other MPI ranks. These helpers give a
member its share of the cores, its GPU, and its own RNG states (:class:`~pbx.members.sb3.member.SB3Member`
keeps them per member so members do not perturb each other and a checkpoint continues bit for bit).
"""

from __future__ import annotations

import os
import random
import warnings
from typing import Any

import numpy as np
import torch

from pbx.errors import UsageError

# Environment variables MPI launchers set to the number of ranks on this machine
# (MPICH/Hydra, Open MPI, MVAPICH, Slurm); PMI_SIZE (all ranks) is the last resort.
LOCAL_RANKS_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                    "SLURM_NTASKS_PER_NODE", "PMI_SIZE")

WORLD_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")
"""Environment variables MPI launchers set to the number of ranks in the job."""


def _launcher_count(names: tuple[str, ...]) -> int | None:
    """The first positive count among the environment variables ``names`` (None: not under such a launcher)."""
    for var in names:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def members_on_this_machine(pop_size: int) -> int:
    """Members of a population of ``pop_size`` this machine trains: all of them, or under an MPI launcher its
    ranks' share (rank r owns the members i with i % ranks == r)."""
    ranks = _launcher_count(WORLD_SIZE_VARS) or 1
    local = _launcher_count(LOCAL_RANKS_VARS) or ranks
    return min(pop_size, -(-pop_size // ranks) * local)


def thread_budget() -> int:
    """Cores this process may use: all of them, shared evenly among the MPI ranks on this machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local = _launcher_count(LOCAL_RANKS_VARS)
    return cores if local is None else max(1, cores // local)


def rng_state(cuda: bool) -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state() if cuda else None,
            "numpy": np.random.get_state(), "random": random.getstate()}


def seeded_cuda_state(seed: int) -> torch.Tensor:
    """The state of the current GPU's generator seeded with ``seed``; the generator itself is left as it was."""
    with torch.random.fork_rng(devices=[torch.cuda.current_device()]):
        torch.cuda.manual_seed(seed)
        return torch.cuda.get_rng_state()


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])


def deterministic_torch() -> None:
    """Deterministic kernels everywhere (cuDNN, cuBLAS), in float32 without TF32 (train-procgen's arithmetic);
    CUBLAS_WORKSPACE_CONFIG must precede CUDA's start."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    set_precision("fp32")


PRECISIONS = ("torch", "fp32", "tf32", "bf16")
"""``precision`` settings: PyTorch's defaults (TF32 in cuDNN's convolutions on Ampere and later GPUs, float32
matrix products), float32 throughout, TF32 in convolutions and matrix products, bf16 autocast in the image
network (:class:`~pbx.members.ppo.impala.ImpalaCNN`; the switches as PyTorch's defaults)."""

_TF32 = {"torch": (True, False), "fp32": (False, False), "tf32": (True, True), "bf16": (True, False)}
"""Per precision: whether cuDNN's convolutions and whether CUDA's matrix products may use TF32."""


def set_precision(precision: str) -> None:
    """Set the process-wide TF32 switches for ``precision`` (every value sets both, so a process that trains runs
    of different settings one after another leaves none behind). Nothing changes on a CPU, which has no TF32."""
    convolutions, matrices = _TF32[precision]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # newer PyTorch points to its per-backend precision API
        torch.backends.cudnn.allow_tf32 = convolutions
        torch.backends.cuda.matmul.allow_tf32 = matrices


def check_device(device: str) -> None:
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no CUDA GPU is available; use --device cpu or auto")


def resolve_device(device: str, image: bool, local_rank: int = 0) -> torch.device:
    """``auto``: the GPU for CNN policies; MLP policies stay on the CPU, where SB3 runs them faster.

    With several processes on a machine (MPI ranks), process ``local_rank`` takes GPU
    ``local_rank`` modulo the GPU count, and makes it the current device, so that
    ``cuda`` tensors, CUDA random states and cuDNN settings all mean that one GPU.
    """
    check_device(device)
    if device == "auto":
        device = "cuda" if image and torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    gpu = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(gpu)
    return gpu
