"""The MPI runner under a real ``mpiexec -n 2`` (the mpich wheel's): the synchronous runner's history,
checkpoints that cross ranks, failures that end the job, resume across runners, and bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from pbx.history import read_csv
from conftest import CHUNKED_TOY, ROOT, check_skips

MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
TOY = ["--env", "toy", "--seed", "0", "--batchsize", "4"]


def mpiexec(*args: str, n: int = 2, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def train(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pbx.train", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def history(run_dir: Path) -> pd.DataFrame:
    return read_csv(run_dir / "history.csv").drop(columns="wall_s")


@pytest.mark.parametrize("args", [
    ["--search", "PB2"],
    ["--search", "PBT", "--selection", "wta", "--comm", "collective"],
])
def test_two_ranks_write_the_synchronous_history(args: list[str], tmp_path: Path) -> None:
    sync = train(*TOY, *args, "--run-dir", str(tmp_path / "sync"))
    assert sync.returncode == 0, sync.stderr
    mpi = mpiexec("-m", "pbx.train", *TOY, *args, "--run-dir", str(tmp_path / "mpi"))
    assert mpi.returncode == 0, mpi.stderr
    assert "4 members on 2 MPI ranks" in mpi.stdout and mpi.stdout.count("round 50/50") == 1  # rank 0 prints
    pd.testing.assert_frame_equal(history(tmp_path / "mpi"), history(tmp_path / "sync"))
    assert history(tmp_path / "mpi")["parent"].ne(history(tmp_path / "mpi")["member"]).any()  # copies happened


def test_two_ranks_write_the_synchronous_history_of_members_that_skip_rounds(tmp_path: Path) -> None:
    """Members whose chunks outlast t_ready skip rounds on each rank as the synchronous runner has them skip
    (the decision reads a member's own steps and config), so the gathered history is the synchronous one."""
    args = [CHUNKED_TOY, "train", "--env", "toy-chunked", "--seed", "0", "--batchsize", "4", "--search", "PBT",
            "--max_budget", "80"]
    sync = subprocess.run([sys.executable, *args, "--run-dir", str(tmp_path / "sync")], capture_output=True,
                          text=True, timeout=240)
    assert sync.returncode == 0, sync.stderr
    mpi = mpiexec(*args, "--run-dir", str(tmp_path / "mpi"))
    assert mpi.returncode == 0, mpi.stderr
    pd.testing.assert_frame_equal(history(tmp_path / "mpi"), history(tmp_path / "sync"))
    frame = history(tmp_path / "mpi")
    assert check_skips(frame, 4, 3 + (4 * frame["h0"]).round()).any()
    assert mpi.stdout.count("no score: skipped the round") == sync.stdout.count("no score: skipped the round") > 0


@pytest.mark.parametrize("comm", ["p2p", "collective"])
def test_a_recipient_on_another_rank_gets_the_donors_weights_and_optimizer(comm: str, tmp_path: Path) -> None:
    proc = mpiexec("tests/mpi/transfer.py", str(tmp_path), comm)
    assert proc.returncode == 0, proc.stderr
    donor = torch.load(tmp_path / "checkpoints" / "member_0.r0.ckpt", weights_only=False)
    own = torch.load(tmp_path / "checkpoints" / "member_1.r0.ckpt", weights_only=False)
    after = torch.load(tmp_path / "after.ckpt", weights_only=False)
    assert after["member"] == 1 and after["optimizer"]["state"], "the optimizer has state after a round"
    for key in ("policy",):
        assert all(torch.equal(after[key][k], donor[key][k]) for k in donor[key])
        assert not all(torch.equal(own[key][k], donor[key][k]) for k in donor[key])  # the copy changed something
    for name, value in donor["optimizer"]["state"][0].items():
        assert torch.equal(after["optimizer"]["state"][0][name], value), name


def rank_pid(run_dir: Path, rank: int, timeout: float = 60) -> int:
    """The pid of the ``pbx.train`` process of MPI rank ``rank`` training into ``run_dir``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(run_dir).encode() in cmdline and f"PMI_RANK={rank}".encode() in environ:
                return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank} process for {run_dir}")


def test_a_stopped_rank_stops_the_job_and_a_synchronous_resume_completes_it(tmp_path: Path) -> None:
    # A scheduler or a user stops one rank (SIGTERM): it tells the other, both stop at their next member with
    # everything saved, the job exits 75 with rank 0's one line, and a resume without MPI completes the run.
    args = [*TOY, "--search", "PBT", "--max_budget", "400"]
    whole = train(*args, "--run-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    run_dir = tmp_path / "killed"
    job = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "pbx.train", *args, "--run-dir", str(run_dir)],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    victim = rank_pid(run_dir, 1)
    deadline = time.time() + 120
    while not (run_dir / "history.csv").exists() or len((run_dir / "history.csv").read_text().splitlines()) < 41:
        assert job.poll() is None and time.time() < deadline, "the job ended or stalled before round 10"
        time.sleep(0.01)
    os.kill(victim, signal.SIGTERM)
    killed = time.time()
    _, stderr = job.communicate(timeout=30)
    assert job.returncode == 75 and time.time() - killed < 10, stderr
    assert stderr.startswith("stopped by rank 1's SIGTERM in round ") and stderr.count("\n") == 1, stderr
    assert stderr.endswith(f"continue with --resume {run_dir}\n")
    assert 9 <= read_csv(run_dir / "history.csv")["round"].max() < 99, "the stop should land mid-run"
    resumed = train("--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    pd.testing.assert_frame_equal(history(run_dir), history(tmp_path / "whole"))


def test_a_failing_member_ends_the_job_and_resumes_under_mpi_then_synchronously(tmp_path: Path) -> None:
    args = [*TOY, "--search", "PB2", "--max_budget", "120"]
    whole = train(*args, "--run-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    run_dir = str(tmp_path / "run")
    started = time.time()
    failed = mpiexec("tests/mpi/fail_member.py", "3", "10", "", "train", *args, "--run-dir", run_dir)
    assert failed.returncode == 1 and time.time() - started < 30
    errors = [line for line in failed.stderr.splitlines() if line.strip()]
    assert errors[0].startswith("error: rank 1, member 3: RuntimeError: injected failure"), failed.stderr
    assert all("application called MPI_Abort(MPI_COMM_WORLD, 1)" in line for line in errors[1:]), failed.stderr
    assert read_csv(tmp_path / "run" / "history.csv")["round"].max() == 9  # the finished rounds stay
    # resumed under MPI, failing again later; then synchronously to the end
    again = mpiexec("tests/mpi/fail_member.py", "1", "20", "", "train", "--resume", run_dir)
    assert again.returncode == 1 and "error: rank 1, member 1: RuntimeError" in again.stderr, again.stderr
    assert read_csv(tmp_path / "run" / "history.csv")["round"].max() == 19
    done = train("--resume", run_dir)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(history(tmp_path / "run"), history(tmp_path / "whole"))


def test_a_synchronous_run_resumes_on_two_ranks(tmp_path: Path) -> None:
    args = [*TOY, "--search", "PBT", "--max_budget", "80"]
    whole = train(*args, "--run-dir", str(tmp_path / "whole"))
    stopped = subprocess.run([sys.executable, "tests/mpi/fail_member.py", "0", "5", "", "train", *args, "--run-dir",
                              str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0 and stopped.returncode != 0
    resumed = mpiexec("-m", "pbx.train", "--resume", str(tmp_path / "run"), "--comm", "collective")
    assert resumed.returncode == 0, resumed.stderr
    pd.testing.assert_frame_equal(history(tmp_path / "run"), history(tmp_path / "whole"))


@pytest.mark.parametrize("args, launcher, message", [
    (["--search", "none", "--batchsize", "1"], True, "population 1 is smaller than the 2 MPI ranks"),
    (["--comm", "broadcast"], True, "comm must be one of p2p, collective, got 'broadcast'"),
    (["--runner", "sync"], True, "--runner sync under an MPI launcher with 2 ranks"),
    (["--runner", "mpi"], False, "--runner mpi needs an MPI launcher"),
    (["--bogus"], True, "unrecognized arguments: --bogus"),
])
def test_bad_mpi_input_is_one_line_on_rank_0_and_exit_2(args: list[str], launcher: bool, message: str,
                                                          tmp_path: Path) -> None:
    argv = ["--env", "toy", *args, "--run-dir", str(tmp_path / "r")]
    proc = mpiexec("-m", "pbx.train", *argv) if launcher else train(*argv)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists() or not (tmp_path / "r" / "config.yaml").exists()


def test_ranks_on_one_machine_take_gpus_round_robin(monkeypatch: pytest.MonkeyPatch) -> None:
    from pbx.members.sb3 import process

    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert process.resolve_device("cuda", True, local_rank=3) == torch.device("cuda", 1)
    assert process.resolve_device("auto", True, local_rank=2) == torch.device("cuda", 0)
    assert process.resolve_device("auto", False, local_rank=3) == torch.device("cpu")  # MLP policies stay on the CPU
    assert chosen == [torch.device("cuda", 1), torch.device("cuda", 0)]
