"""Whole runs of real SB3 PPO members through ``python -m pbx.train``, at tiny budgets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pbx.history import read_csv

from conftest import tensorboard_tags

ROOT = Path(__file__).resolve().parent.parent
# One rollout of 2 envs x 32 steps per round, two rounds, one test episode per member and round.
TINY = ["-m", "n_envs=2", "n_steps=32", "batch_size=32", "n_epochs=1", "eval_episodes=1",
        "--t_ready", "64", "--max_budget", "128", "--device", "cpu"]


def _train(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *TINY, *args, "--run-dir", str(run_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", "third-party banners or warnings reached the terminal"
    return proc


def test_pbt_on_bigfish_two_members_two_rounds(tmp_path) -> None:
    run_dir = tmp_path / "run"
    _train(run_dir, "--env", "bigfish", "--search", "PBT", "--batchsize", "2")
    history = read_csv(run_dir / "history.csv")
    assert len(history) == 4 and history["steps"].tolist() == [64, 64, 128, 128]
    assert history["test_score"].notna().all()  # one finished test episode each round
    second = history[history["round"] == 1]
    assert (second["parent"] != second["member"]).sum() == 1  # the worse member copied the better
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["member_0.r1.ckpt", "member_1.r1.ckpt"]
    # TensorBoard: per member pbx's scores and hyperparameters and SB3's own losses; the population's best
    for member in ("member_0", "member_1"):
        tags = tensorboard_tags(run_dir / "tb" / member)
        # (no pbx/score: no bigfish episode ends in 64 steps, and NaN scores are not logged)
        assert {"pbx/test_score", "hp/learning_rate", "hp/ent_coef", "train/value_loss"} <= tags
    assert {"pbx/best_score", "pbx/best_test_score"} <= tensorboard_tags(run_dir / "tb" / "population")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["member"]["n_envs"] == 2 and config["space"]["learning_rate"]["log"] is True


def test_none_on_bigfish_trains_the_fixed_baseline_and_never_copies(tmp_path) -> None:
    run_dir = tmp_path / "run"
    _train(run_dir, "--search", "none", "--batchsize", "2")  # bigfish is the default env
    history = read_csv(run_dir / "history.csv")
    assert (history["parent"] == history["member"]).all() and not history["explored"].any()
    baseline = {"learning_rate": 5e-4, "ent_coef": 0.01, "clip_range": 0.2}  # the ProcGen paper's PPO
    for name, value in baseline.items():
        assert (history[name] == value).all(), name


def test_pb2_on_cartpole_end_to_end(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = _train(run_dir, "--env", "CartPole-v1", "--search", "PB2", "--batchsize", "2",
                  "--max_budget", "256")
    history = read_csv(run_dir / "history.csv")
    assert history["round"].max() == 3
    # untrained CartPole episodes last ~20 steps: every member finishes some in its first 64 steps
    assert history[history["round"] == 0]["score"].notna().all()
    assert history["n_epochs"].isin([5, 10, 20]).all()
    assert sum(line.startswith("round ") for line in proc.stdout.splitlines()) == 4


@pytest.mark.parametrize("args, message", [
    (["--env", "bigfsh"], "bigfish"),  # the error lists the valid games
    (["--env", "bigfish", "-m", "batch_size=30"], "batch_size 30 does not divide n_envs * n_steps = 64"),
    (["--env", "bigfish", "-m", "space=toy.yaml"], "h0"),
])
def test_ppo_bad_input_is_one_line_and_exit_2(tmp_path, args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *TINY, *args, "--run-dir", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
