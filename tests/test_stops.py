"""A run stopped inside a round (a signal, its time limit, a kill after a periodic save) resumes from its last
rollout and ends with the uninterrupted run's history and curves: real ProcGen, real SB3 PPO, real signals, a real
``mpiexec -n 2``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from pbx.history import read_csv
from pbx.run_dir import RunDir
from pbx.runners.start import launch, new_run, resumed_run
from pbx.runners.stopping import STOPPED_EXIT, RunStopped, StopClock, stop_message
from pbx.train import main

from conftest import built_once

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")

# bigfish, two members under PBT, 3 rounds of 4 rollouts (2 envs x 16 steps) each: 24 rollouts to stop between.
BIGFISH = ["--env", "bigfish", "--search", "PBT", "--batchsize", "2", "--quantile", "0.5", "--t_ready", "128",
           "--max_budget", "384", "--device", "cpu", "-m", "n_envs=2", "n_steps=16", "batch_size=16", "n_epochs=1",
           "eval_episodes=1", "eval_max_steps=300"]
LAYER = {"run": {"env": "bigfish", "search": "PBT", "pop_size": 2, "quantile": 0.5, "t_ready": 128,
                 "max_budget": 384, "device": "cpu"},
         "member": {"n_envs": 2, "n_steps": 16, "batch_size": 16, "n_epochs": 1, "eval_episodes": 1,
                    "eval_max_steps": 300}}


def records(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run's history (less its wall clock) and curves."""
    return (read_csv(folder / "history.csv").drop(columns="wall_s"),
            pd.read_csv(folder / "curves.csv"))


def assert_same_run(folder: Path, whole: Path) -> None:
    for mine, theirs in zip(records(folder), records(whole)):
        pd.testing.assert_frame_equal(mine, theirs)


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run, trained once for the module's tests (and their workers)."""
    return built_once(tmp_path_factory, "stops-whole", lambda folder: launch(lambda comm: new_run([LAYER],
                                                                                                  run_dir=folder)))


class StopAt(StopClock):
    """A clock that stops the run at its members' ``at``-th rollout boundary, counted over the process."""

    def __init__(self, at: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.at, self.boundaries = at, 0

    def due(self) -> bool:
        self.boundaries += 1
        if self.boundaries == self.at:
            self.request("the test")
        return super().due()


def stopped_every(at: int, layer: dict[str, Any], folder: Path, each: Callable[[RunStopped], None]) -> int:
    """The run of ``layer`` in ``folder`` stopped at every ``at``-th rollout boundary of its process and resumed
    after each stop (``each`` sees the stop) until it ends; how many stops it took."""
    setup = lambda comm: new_run([layer], run_dir=folder)
    stops = 0
    while True:
        try:
            launch(setup, clock=StopAt(at))
            return stops
        except RunStopped as err:
            stops += 1
            each(err)
        setup = lambda comm: resumed_run(folder)


def test_stopped_inside_every_few_rollouts_resumes_to_the_uninterrupted_run(whole: Path, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Stopped at every third rollout boundary of each process (so inside rounds, between members and at a
    round's first rollout), resumed each time: the history and curves are the uninterrupted run's."""
    folder = tmp_path / "stopped"

    def each(err: RunStopped) -> None:
        assert f"continue with --resume {folder}" in str(err)
        parts = list((folder / "checkpoints").glob("*.part.ckpt"))
        assert parts or "not begun" in str(err) or "through it" in str(err), err

    assert stopped_every(3, LAYER, folder, each) >= 8
    assert_same_run(folder, whole)
    assert not list((folder / "checkpoints").glob("*.part.*")) and not list((folder / "checkpoints").glob("*.done.*"))


def wait_for(pattern: str, folder: Path, proc: subprocess.Popen, count: int = 1, timeout: float = 120) -> None:
    """Wait until ``count`` files match ``pattern`` in ``folder``'s checkpoints (the process still running)."""
    deadline = time.time() + timeout
    while len(list((folder / "checkpoints").glob(pattern))) < count:
        assert proc.poll() is None and time.time() < deadline, f"no {pattern} before the process ended"
        time.sleep(0.02)


def train(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pbx.train", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_kill_after_a_periodic_save_and_a_sigterm_each_keep_the_round(whole: Path, tmp_path: Path) -> None:
    """``kill -9`` once a member has saved inside round 0 (periodic saves at every rollout, each trained on in the
    same process), a resume, SIGTERM inside round 1: exit 75 with one line naming how to go on; a resume ends with
    the uninterrupted run's history."""
    folder = str(tmp_path / "run")
    job = train(*BIGFISH, "-m", "checkpoint_minutes=1e-9", "--run-dir", folder)
    wait_for("member_0.r0.part.ckpt", Path(folder), job)
    job.kill()
    job.wait()
    assert not (Path(folder) / "history.csv").read_text().count("\n") > 1, "the kill should land inside round 0"
    job = train("--resume", folder)
    wait_for("member_*.r1.part.ckpt", Path(folder), job)
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    assert job.returncode == STOPPED_EXIT, err
    assert err.startswith("stopped by SIGTERM in round 1 (") and err.endswith(f"continue with --resume {folder}\n")
    assert err.count("\n") == 1, err
    done = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", folder], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert_same_run(Path(folder), whole)


def test_a_time_limit_stops_in_time_and_a_resume_goes_on(whole: Path, tmp_path: Path) -> None:
    """``--time-limit`` (from the command's start) stops inside the run within the limit plus a rollout, exit 75;
    a resume ends with the uninterrupted history."""
    folder = str(tmp_path / "run")
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *BIGFISH, "--run-dir", folder, "--time-limit", "10"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == STOPPED_EXIT, proc.stderr
    # a rollout here is well under a second; the rest is the save and the process's end, seconds on a loaded
    # machine (2 cores at load 10 took 12.7 s): the bound tells a stop in time from a run that went on (50 s)
    assert time.monotonic() - began < 10 + 6, "past the limit by more than a rollout, the save and the exit"
    assert proc.stderr.startswith("stopped by its time limit of 10 s in round ") and proc.stderr.count("\n") == 1
    assert (Path(folder) / "history.csv").read_text().count("\n") < 1 + 6, "the limit should land inside the run"
    done = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", folder], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert_same_run(Path(folder), whole)


def rank_pid(folder: str, rank: int, timeout: float = 60) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if folder.encode() in cmdline and f"PMI_RANK={rank}".encode() in environ:
                return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank} process for {folder}")


def test_two_ranks_stop_inside_the_round_on_a_signal_to_mpiexec_or_to_one_rank(whole: Path, tmp_path: Path) -> None:
    """Under ``mpiexec -n 2`` (a member on each rank, saving inside its round at every rollout): SIGTERM to mpiexec
    inside round 0, then, resumed, SIGTERM to rank 1 alone inside round 1, which tells rank 0: each job exits 75
    with rank 0's line; the last resume ends with the synchronous uninterrupted run's history and curves."""
    folder = str(tmp_path / "mpi")

    def job(*args: str) -> subprocess.Popen:
        return subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "pbx.train", *args], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = job(*BIGFISH, "-m", "checkpoint_minutes=1e-9", "--run-dir", folder)
    wait_for("member_*.r0.part.ckpt", Path(folder), first, count=2)
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    assert first.returncode == STOPPED_EXIT and err.startswith("stopped by SIGTERM in round 0 ("), err
    assert "member 0 saved inside it" in err and "member 1 saved inside it" in err, err
    second = job("--resume", folder)
    wait_for("member_*.r1.part.ckpt", Path(folder), second, count=2)
    os.kill(rank_pid(folder, 1), signal.SIGTERM)
    _, err = second.communicate(timeout=120)
    assert second.returncode == STOPPED_EXIT and err.startswith("stopped by rank 1's SIGTERM in round 1 ("), err
    last = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "pbx.train", "--resume", folder], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert last.returncode == 0, last.stderr
    assert_same_run(Path(folder), whole)
    assert sorted(p.name for p in (Path(folder) / "tb").iterdir()) == ["member_0", "member_1", "population"]


def test_a_bad_time_limit_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("nan", "-5", "0", "inf", "soon"):
        assert main(["--env", "toy", "--time-limit", bad, "--run-dir", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --time-limit must be a") and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()


def test_the_stop_line_says_how_far_the_round_got(tmp_path: Path) -> None:
    line = str(RunStopped(stop_message("SIGTERM", 3, [0, 2], {1: 4096}, 4), tmp_path))
    assert line == (f"stopped by SIGTERM in round 3 (members 0, 2 through it; member 1 saved inside it at 4,096 "
                    f"steps; 1 not begun): continue with --resume {tmp_path}")


def test_a_resume_keeps_the_round_in_progress_and_the_prune_after_it_clears_it(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.checkpoints.mkdir()
    names = ["member_0.r4.ckpt", "member_0.r5.part.ckpt", "member_0.r5.part.json", "member_1.r5.ckpt",
             "member_1.r5.done.json", "member_1.r4.ckpt", "member_1.r6.ckpt.tmp", "member_0.replay.000001.npz"]
    for name in names:
        (run_dir.checkpoints / name).write_text("x")
    run_dir.prune_checkpoints(keep_round=4, in_progress=True)
    assert sorted(p.name for p in run_dir.checkpoints.iterdir()) == sorted(set(names) - {"member_1.r6.ckpt.tmp"})
    run_dir.prune_checkpoints(keep_round=5)
    assert sorted(p.name for p in run_dir.checkpoints.iterdir()) == ["member_0.replay.000001.npz",
                                                                      "member_1.r5.ckpt"]


def test_the_signals_stop_at_the_next_boundary_and_a_second_interrupts() -> None:
    """SIGUSR1 (Slurm's warning) and SIGTERM only mark the clock (a boundary stops the member); a second SIGTERM or
    SIGINT raises KeyboardInterrupt at once; outside the block the process's own handlers are back."""
    before = signal.getsignal(signal.SIGTERM)
    clock = StopClock()
    with clock.on_signals():
        os.kill(os.getpid(), signal.SIGUSR1)
        assert clock.reason == "SIGUSR1" and clock.due()
        os.kill(os.getpid(), signal.SIGUSR1)  # a repeated warning is no reason to interrupt
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is before
    limited = StopClock(time_limit=3600.0)
    assert not limited.due() and not limited.stopping
    limited.started -= 3600.0 - 1.5  # 1.5 s left, less than the save's reserve before any save was measured
    assert limited.stopping and limited.reason == "its time limit of 3600 s"
