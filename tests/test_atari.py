"""Atari (``ALE/<Game>-v5`` through ale-py): PBT trains PPO on Pong and resumes exactly after a kill -9; each agent
gets rl-zoo's atari row; an agent with no Atari row is refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pbx.config import resolve
from pbx.history import read_csv
from pbx.members.offpolicy import member as offpolicy
from pbx.train import main

from conftest import ROOT, kill_after, start_train

pytest.importorskip("ale_py")

# 2 members of 2 envs x 32 steps, 3 rounds of 64 steps; test episodes cut at 64 steps (Pong's last thousands)
RUN = ["--env", "ALE/Pong-v5", "--search", "PBT", "--batchsize", "2", "--quantile", "0.5", "--device", "cpu",
       "--t_ready", "64", "--max_budget", "192", "-m", "n_envs=2", "n_steps=32", "batch_size=32", "n_epochs=1",
       "eval_episodes=1", "eval_max_steps=64"]


def _train(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr


def _history(run_dir: Path) -> pd.DataFrame:
    return read_csv(run_dir / "history.csv").drop(columns="wall_s")


def test_a_killed_pong_run_resumes_to_the_uninterrupted_history(tmp_path: Path) -> None:
    _train(*RUN, "--run-dir", str(tmp_path / "whole"))
    killed = start_train(*RUN, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=2)
    assert read_csv(tmp_path / "killed" / "history.csv")["round"].max() < 2, "the kill should land mid-run"
    _train("--resume", str(tmp_path / "killed"))
    pd.testing.assert_frame_equal(_history(tmp_path / "killed"), _history(tmp_path / "whole"))


def test_dqn_on_atari_gets_rl_zoos_atari_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offpolicy, "_available_memory", lambda: 10**12)  # 100k frames of 84x84x4, twice, per member
    cfg = resolve([{"run": {"env": "ALE/Pong-v5", "algo": "dqn", "search": "PBT", "pop_size": 2}}])
    m = cfg.member
    assert (m.buffer_size, m.learning_starts, m.target_update_interval, m.train_freq, m.gradient_steps,
            m.exploration_fraction) == (100_000, 100_000, 1_000, 4, 1, 0.1)
    assert cfg.space.params["learning_rate"].default == 1e-4
    assert cfg.space.params["exploration_final_eps"].default == 0.01
    assert (cfg.run.t_ready, cfg.run.max_budget) == (250_000, 10_000_000)


def test_an_agent_without_an_atari_row_is_one_line_naming_both(tmp_path: Path, capsys) -> None:
    assert main(["--algo", "sac", "--env", "ALE/Pong-v5", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --algo sac has no defaults for the Atari family (ALE/Pong-v5)"), err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()
