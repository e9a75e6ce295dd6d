"""An IPBT restart's candidates built past ``pop_size`` start with their donor's replay buffer (SAC, TD3, DQN), as
the candidates that go on from their members keep theirs: in one process, across MPI ranks (the buffer's segment
files travel with the donor's checkpoint), and through a kill -9 and ``--resume``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pbx.history import read_csv
from pbx.members.base import MemberContext
from pbx.members.offpolicy.replay_store import FIELDS, rows
from pbx.members.offpolicy.td3 import TD3Member, TD3Settings
from pbx.run_dir import RunDir

from conftest import ROOT, kill_after, start_train
from test_mpi import MPIEXEC, history

SCRIPT = str(ROOT / "tests" / "mpi" / "candidates.py")


def _buffer(checkpoint: Path) -> dict[str, np.ndarray]:
    """The filled rows of the replay buffer that a TD3 checkpoint on Pendulum rebuilds from the files it lists."""
    member = TD3Member(MemberContext(env="Pendulum-v1", index=0, seed=0, device="cpu"),
                       TD3Settings(buffer_size=1000, net_arch=[16, 16]), {})
    try:
        member.load(checkpoint, own=True)
        buffer = member.model.replay_buffer
        return rows(buffer, 0, buffer.size())
    finally:
        member.close()


def _segments(checkpoint: Path) -> list[str]:
    return [name for name, _, _ in torch.load(checkpoint, weights_only=False)["replay"]["segments"]]


@pytest.mark.parametrize("mode", ["sync", "p2p", "collective"])
def test_a_candidate_built_for_a_restart_starts_with_its_donors_buffer(mode: str, tmp_path: Path) -> None:
    """Round 0 collects 200 rows per member; candidates 2 and 3 are built from members 1 and 0 (on the other rank
    under MPI) and train 200 steps more: their buffers hold the donor's 200 rows and their own 200, as candidates
    0 and 1 hold 400 of their own, and each candidate's checkpoint lists only files of its own."""
    launcher = [] if mode == "sync" else [MPIEXEC, "-n", "2"]
    proc = subprocess.run([*launcher, sys.executable, SCRIPT, str(tmp_path), mode], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    folder = RunDir(tmp_path)
    for candidate in range(4):
        checkpoint = folder.checkpoint(candidate, 1)
        assert len(_buffer(checkpoint)["rewards"]) == 400, f"candidate {candidate}"
        assert all(name.startswith(f"member_{candidate}.replay.") for name in _segments(checkpoint))
    for candidate, donor in ((2, 1), (3, 0)):
        taken, given = _buffer(folder.checkpoint(candidate, 1)), _buffer(folder.checkpoint(donor, 0))
        for field in FIELDS:
            assert np.array_equal(taken[field][:200], given[field]), (candidate, field)


IPBT_TD3 = ["--algo", "td3", "--env", "Pendulum-v1", "--search", "IPBT", "--batchsize", "2", "--device", "cpu",
            "--t_ready", "200", "--max_budget", "1400", "--seed", "0", "-m", "buffer_size=2000", "learning_starts=64",
            "net_arch=[16,16]", "batch_size=32", "train_freq=8", "eval_episodes=0"]
"""Pendulum's episodes last 200 steps, a round each. ``patience`` 1 restarts after round 2, the first whose best fell;
``step_factor`` 1 keeps the rounds at 200 steps, so the restart fits a budget of 1,400: round 0 (4 members, 2 rounds
of the budget), 1, 2, the restart round (4 candidates, 2 rounds), 4."""


def test_a_run_killed_after_its_restart_round_resumes_to_the_uninterrupted_history(tmp_path: Path) -> None:
    config = tmp_path / "ipbt.yaml"
    config.write_text("strategy:\n  patience: 1\n  step_factor: 1\n")
    args = [*IPBT_TD3, "--config", str(config)]
    whole = subprocess.run([sys.executable, "-m", "pbx.train", *args, "--run-dir", str(tmp_path / "whole")], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr
    expected = history(tmp_path / "whole")
    restart = expected.groupby("round")["restart"].first()
    assert list(restart[restart].index) == [3], "the run should restart after round 2"
    killed = start_train(*args, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=4 + 2 + 2 + 3)  # within the restart round's rows
    frame = read_csv(tmp_path / "killed" / "history.csv")
    assert frame["round"].max() == 3 and len(frame) == 12, "the kill should land after the restart round"
    folder, parents = RunDir(tmp_path / "killed"), frame[frame["round"] == 3].set_index("member")["parent"]
    for candidate in (2, 3):
        # the donor's 600 rows after round 2 and the candidate's own 200 of the restart round
        assert len(_buffer(folder.checkpoint(candidate, 3))["rewards"]) == 800, f"candidate {candidate}"
        assert parents[candidate] != candidate
    resumed = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", str(tmp_path / "killed")], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    pd.testing.assert_frame_equal(history(tmp_path / "killed"), expected)
