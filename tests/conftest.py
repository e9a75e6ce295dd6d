"""Shared fixtures: toy runs in a temporary folder and synthetic histories."""

from __future__ import annotations

import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import pytest

from pbx.config import RunConfig, resolve
from pbx.history import History, Row
from pbx.run_dir import RunDir
from pbx.runners.sync import SyncRunner
from pbx.space import Categorical, Config, Continuous, Space


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core this process may use (pytest-xdist's own count wants psutil and counts
    physical cores, which on a 2-vCPU CI machine may be 1)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


NO_FSYNC = Path(__file__).resolve().parent / "no_fsync"
"""The folder whose ``sitecustomize.py`` turns ``os.fsync`` into a no-op in the processes the tests start (why:
its docstring)."""


def _skip_fsync() -> None:
    """``os.fsync`` a no-op here and in every process started from here (``tests/no_fsync/sitecustomize.py``)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(NO_FSYNC) not in paths:  # xdist's workers inherit it from the controller
        os.environ["PYTHONPATH"] = os.pathsep.join([str(NO_FSYNC), *paths])
    runpy.run_path(str(NO_FSYNC / "sitecustomize.py"))  # this process: it started before the path was set


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, each worker is pinned to its share of the cores, as pbx shares them among the MPI ranks of a
    machine: a member counts its cores (``thread_budget``), so two unpinned workers on 2 cores would each start
    2 torch threads on a ProcGen CNN and spin against each other (several times slower); pinned, each gets one.
    The subprocesses a test starts (``pbx.train``, ``mpiexec -n 2``) inherit the worker's cores."""
    _skip_fsync()
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker is None or count is None or not hasattr(os, "sched_setaffinity"):
        return
    cores, index, workers = sorted(os.sched_getaffinity(0)), int(worker.removeprefix("gw")), int(count)
    os.sched_setaffinity(0, cores[index::workers] if len(cores) >= workers else [cores[index % len(cores)]])


def toy_config(strategy: dict[str, object] | None = None, **run: object) -> RunConfig:
    """A toy run's config: PBT, 4 members, 200 steps, t_ready 4, unless ``run`` (and ``strategy``) say otherwise."""
    settings = {"env": "toy", "search": "PBT", "pop_size": 4, "t_ready": 4, "max_budget": 200, "seed": 0}
    settings.update(run)
    return resolve([{"run": settings, "strategy": strategy or {}}])


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` that ``build`` fills, built once for all of the session's xdist workers: worksteal
    spreads a module's tests over the workers, and each would build its own copy of a module-scoped fixture (the
    search-quality runs three times, 44 s each, in one suite). The first worker to ask builds it under a file
    lock; the others wait for it and share it, so the tests that read it must only read it."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common folder
    folder, done = root / f"shared-{name}", root / f"shared-{name}.built"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that died while building it
            build(folder)
            done.touch()
    return folder


def run_toy(folder: Path, strategy: dict[str, object] | None = None, **run: object) -> History:
    cfg = toy_config(strategy, **run)
    run_dir = RunDir(folder)
    run_dir.create()
    run_dir.begin()
    cfg.write(run_dir.config)
    return SyncRunner(cfg, run_dir).run()


@pytest.fixture
def one_core() -> Iterator[None]:
    """This process and the runs it starts on one core: a CNN member takes a torch thread per core, and on a
    busy machine two threads wait on each other (the Nature CNN on 2 shared cores: 20x slower than on one)."""
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    yield
    os.sched_setaffinity(0, cores)


@pytest.fixture
def mixed_space() -> Space:
    """Two continuous parameters (one on a log scale) and a categorical one."""
    return Space({
        "lr": Continuous(1e-5, 1e-3, log=True),
        "ent": Continuous(0.0, 0.2),
        "aug": Categorical(("crop", "flip", "rotate")),
    })


def tensorboard_tags(folder: Path) -> set[str]:
    """Scalar tags in the TensorBoard event files of ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return set(EventAccumulator(str(folder)).Reload().Tags()["scalars"])


def synthetic_history(space: Space, pop: int, rounds: int, seed: int = 0) -> History:
    """Random configs and rising noisy scores; member 0 keeps the best score each round."""
    rng = np.random.default_rng(seed)
    configs = [space.sample(rng) for _ in range(pop)]
    rows = []
    for r in range(rounds):
        for m in range(pop):
            score = r * (1.0 + 0.1 * (pop - m)) + rng.normal(0, 0.01)
            rows.append(Row(member=m, round=r, steps=(r + 1) * 10, wall_s=float(r), score=score,
                            test_score=float("nan"), parent=m, explored=False, config=configs[m]))
    return History(space.names).with_rows(rows)


def rate_history(space: Space, rate: Callable[[Config], float], rounds: int, pop: int, seed: int = 0,
                 noise: float = 0.02, steps: int = 100) -> History:
    """Every member draws a fresh config each round and improves at ``rate(config)`` plus noise per step."""
    rng = np.random.default_rng(seed)
    scores = np.zeros(pop)
    rows = []
    for r in range(rounds):
        for m in range(pop):
            config = space.sample(rng)
            if r:
                scores[m] += steps * (rate(config) + rng.normal(0, noise))
            rows.append(Row(member=m, round=r, steps=(r + 1) * steps, wall_s=float(r), score=float(scores[m]),
                            test_score=float("nan"), parent=m, explored=r > 0, config=config))
    return History(space.names).with_rows(rows)


ROOT = Path(__file__).resolve().parent.parent


def start_train(*args: str) -> subprocess.Popen:
    """``python -m pbx.train ARGS`` as a user starts it, in the background."""
    return subprocess.Popen([sys.executable, "-m", "pbx.train", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_after(proc: subprocess.Popen, history: Path, rows: int, timeout: float = 120) -> None:
    """SIGKILL ``proc`` as soon as ``history`` holds more than ``rows`` data rows (a kill mid-run)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if history.exists() and len(history.read_text().splitlines()) > 1 + rows:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


CHUNKED_TOY = str(ROOT / "tests" / "mpi" / "chunked_toy.py")
"""The script that runs a pbx command with ``--env toy-chunked`` registered: the toy in whole chunks of 3 to 7
steps against its t_ready of 4, so members skip rounds (see the script)."""


def round_starts(frame: pd.DataFrame) -> np.ndarray:
    """Each row's steps at its round's start: its parent's after the round before (0 in the first round)."""
    steps = frame.set_index(["member", "round"])["steps"]
    return np.array([steps[(p, r - 1)] if r else 0 for p, r in zip(frame["parent"], frame["round"])])


def check_skips(frame: pd.DataFrame, t_ready: int, chunk: pd.Series) -> pd.Series:
    """Assert :meth:`pbx.config.RunConfig.steps_due`'s rule on a history whose plan is ``t_ready`` a round and whose
    rows trained whole chunks of ``chunk`` steps: a member skips exactly the rounds it begins at or past their
    planned end, carrying its score, and one that trains ends it less than a chunk past the plan and at most
    half a chunk short. Returns which rows skipped."""
    start, plan = round_starts(frame), t_ready * (frame["round"] + 1)
    skipped = frame["steps"] == start
    assert (skipped == (start >= plan)).all()
    assert frame.loc[skipped, "carried"].all()
    ahead, chunk = (frame["steps"] - plan)[~skipped], chunk[~skipped]
    assert ((-chunk / 2 <= ahead) & (ahead < chunk)).all()
    return skipped


class UserFolder:
    """A folder of a user's own files (none of them pbx's, some under names a run writes), and the check that a
    command pointed at it left every one of them byte for byte as it was, and added nothing."""

    FILES = {"checkpoints/my_model.pt": b"\x80\x04weights", "tb/events.out.tfevents.1": b"\x00\x01events",
             "history.csv": b"epoch,loss\n1,0.5\n", "notes.txt": b"mine\n"}

    def __init__(self, path: Path) -> None:
        self.path = path
        for name, data in self.FILES.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(data)
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, bytes | None]:
        """Every file (its bytes) and folder (None) under the folder, by relative path."""
        return {str(p.relative_to(self.path)): p.read_bytes() if p.is_file() else None
                for p in sorted(self.path.rglob("*"))}

    def assert_unchanged(self) -> None:
        assert self.snapshot() == self.before


@pytest.fixture
def user_folder(tmp_path: Path) -> UserFolder:
    """:class:`UserFolder` at ``tmp_path / "mine"``."""
    (tmp_path / "mine").mkdir()
    return UserFolder(tmp_path / "mine")
