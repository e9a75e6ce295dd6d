"""Continuous control (Box2D, MuJoCo) with real envs: family defaults, observation statistics as learner state,
a rollout length that changes between rounds, resume after kill -9 on envs that can and cannot be saved, and
the bad input that comes with them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pbx import replay
from pbx.config import resolve
from pbx.history import read_csv
from pbx.members.base import MemberContext
from pbx.members.ppo.ppo import PPOMember
from pbx.members.ppo.settings import PPOSettings, fit_rollout
from pbx.schedule import lineage
from pbx.space import Integer, Space
from pbx.train import main

from conftest import ROOT, kill_after, start_train

# 2 envs, rollouts of 2 x n_steps, minibatches of 32 (n_steps a multiple of 16 fits), one test episode a round.
SMALL = ["-m", "n_envs=2", "batch_size=32", "n_epochs=2", "eval_episodes=1", "eval_max_steps=2000",
         "--device", "cpu"]


def _space_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


ROLLOUT_SPACE = """\
learning_rate: {type: continuous, low: 1.0e-4, high: 1.0e-3, log: true}
n_steps: {type: integer, low: 40, high: 120}
"""


def test_continuous_control_gets_its_familys_defaults_not_cartpoles() -> None:
    walker = resolve([{"run": {"env": "BipedalWalker-v3"}}])
    assert walker.space_source == "ppo_continuous.yaml" and walker.run.t_ready == 50_000
    assert walker.member.normalize_obs and walker.member.n_epochs == 10 and walker.member.gamma == 0.99
    assert walker.member.ent_coef == 0.0  # SB3's, not the ProcGen paper's 0.01
    assert resolve([{"run": {"env": "Hopper-v5"}}]).member.normalize_obs
    cartpole = resolve([{"run": {"env": "CartPole-v1"}}])
    assert cartpole.space_source == "ppo_classic.yaml" and not cartpole.member.normalize_obs


def _member(seed: int, **settings: object) -> PPOMember:
    s = PPOSettings(**{"n_envs": 2, "n_steps": 64, "batch_size": 32, "n_epochs": 2, "value_loss": "sb3",
                       "normalize_obs": True, "net_arch": [16, 16], "eval_episodes": 1, **settings})
    return PPOMember(MemberContext(env="Pendulum-v1", index=seed, seed=seed, device="cpu"), s,
                     {"learning_rate": 1e-3})


def test_an_exploit_copies_the_observation_statistics_so_the_recipient_acts_as_the_donor(tmp_path) -> None:
    donor, recipient = _member(1), _member(2)
    donor.train(512)
    recipient.train(128)
    raw = np.random.default_rng(0).normal(0, 3, size=(16, 3)).astype(np.float32)
    donor.save(tmp_path / "donor.ckpt")

    # Weights alone, the recipient's own statistics: a different policy on the same raw observation.
    weights_only = _member(3)
    weights_only.model.policy.load_state_dict(donor.model.policy.state_dict())
    assert not np.allclose(weights_only.act(raw, deterministic=True), donor.act(raw, deterministic=True))

    recipient.load(tmp_path / "donor.ckpt", own=False)
    assert np.array_equal(recipient.act(raw, deterministic=True), donor.act(raw, deterministic=True))
    obs = torch.as_tensor(recipient._norm.observe(raw))
    ours, theirs = recipient.model.policy.get_distribution(obs), donor.model.policy.get_distribution(obs)
    assert torch.equal(ours.distribution.mean, theirs.distribution.mean)
    assert torch.equal(ours.distribution.stddev, theirs.distribution.stddev)
    # The envs' current observations, which the recipient keeps, are renormalised with the donor's statistics.
    assert np.array_equal(recipient.model._last_obs, recipient._norm.observe(recipient._norm.raw_obs()))

    mean = recipient._norm.obs_rms.mean.copy()
    recipient.evaluate(seed=5)
    assert np.array_equal(recipient._norm.obs_rms.mean, mean), "testing must not update the statistics"


def test_a_new_rollout_length_trains_whole_rollouts_of_it() -> None:
    member = _member(0)
    member.train(128)
    assert member.steps == 128 and member.model.rollout_buffer.buffer_size == 64
    member.apply({"n_steps": 48})
    assert member.model.n_steps == 48 and member.model.rollout_buffer.buffer_size == 48
    member.train(200)  # the nearest whole number of 96-step rollouts
    assert member.steps == 128 + 192


def test_a_pick_the_minibatch_cannot_divide_moves_to_the_nearest_length_that_it_does() -> None:
    settings = PPOSettings(n_envs=4, batch_size=128)
    space = Space({"n_steps": Integer(250, 15_000)})
    assert fit_rollout({"n_steps": 1234}, settings, space) == (
        {"n_steps": 1248}, ["n_steps 1234 -> 1248 (batch_size 128 divides n_envs * n_steps)"])
    assert fit_rollout({"n_steps": 1248}, settings, space) == ({"n_steps": 1248}, [])
    batches = Space({"batch_size": Integer(60, 70)})
    assert fit_rollout({"batch_size": 61}, PPOSettings(n_envs=8, n_steps=64), batches)[0] == {"batch_size": 64}


def test_a_killed_hopper_run_with_a_changing_rollout_resumes_to_the_uninterrupted_history(tmp_path) -> None:
    args = ["--env", "Hopper-v5", "--search", "PBT", "--batchsize", "2", "--t_ready", "128", "--max_budget", "640",
            "--space", _space_file(tmp_path, ROLLOUT_SPACE), *SMALL]
    assert main([*args, "--run-dir", str(tmp_path / "whole")]) == 0  # in this process: one start-up fewer
    killed = start_train(*args, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=2)
    before = read_csv(tmp_path / "killed" / "history.csv")
    assert before["round"].max() < 4, "the kill should land mid-run"
    resumed = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", str(tmp_path / "killed")],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0 and resumed.stderr == "", resumed.stderr
    assert "restarts the episodes" not in resumed.stdout  # MuJoCo's state is saved: an exact resume
    after, expected = (read_csv(tmp_path / run / "history.csv").drop(columns="wall_s") for run in ("killed", "whole"))
    pd.testing.assert_frame_equal(after, expected)
    # The rollout length changed between rounds, and each member trained whole rollouts of its own.
    lengths = expected.pivot(index="round", columns="member", values="n_steps")
    assert (lengths.diff().iloc[1:] != 0).any().any()
    assert set(expected["n_steps"] * 2 % 32) == {0}
    strategy = pd.read_csv(tmp_path / "whole" / "strategy.csv")
    assert strategy["ops"].str.contains("n_steps").any()


def test_a_replay_follows_a_lineage_whose_rollout_length_changed(tmp_path) -> None:
    args = ["--env", "Pendulum-v1", "--search", "PBT", "--batchsize", "2", "--t_ready", "100", "--max_budget", "400",
            "--space", _space_file(tmp_path, ROLLOUT_SPACE), *SMALL]
    assert main([*args, "--run-dir", str(tmp_path / "run")]) == 0
    # both in this process (test_replay.py starts the command itself)
    assert replay.main([str(tmp_path / "run"), "--member", "0", "--run-dir", str(tmp_path / "replay")]) == 0
    original = lineage(read_csv(tmp_path / "run" / "history.csv"), 0)
    replayed = read_csv(tmp_path / "replay" / "history.csv")
    assert original["steps"].tolist() != [100, 200, 300, 400]  # whole rollouts of each round's length, off the plan
    assert replayed["steps"].tolist() == original["steps"].tolist()  # the same boundaries, the same configs
    assert replayed["n_steps"].tolist() == original["n_steps"].tolist()


def test_a_killed_bipedalwalker_pb2_run_restarts_its_episodes_and_completes(tmp_path) -> None:
    args = ["--env", "BipedalWalker-v3", "--search", "PB2", "--batchsize", "2", "--t_ready", "128",
            "--max_budget", "768", "--space", _space_file(tmp_path, ROLLOUT_SPACE), *SMALL]
    killed = start_train(*args, "--run-dir", str(tmp_path / "run"))
    history = tmp_path / "run" / "history.csv"
    kill_after(killed, history, rows=2)
    before = read_csv(history)
    assert before["round"].max() < 5, "the kill should land mid-run"
    resumed = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", str(tmp_path / "run")],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0 and resumed.stderr == "", resumed.stderr
    assert "BipedalWalker-v3's envs cannot be saved (Box2D): a resume restarts the episodes" in resumed.stdout
    after = read_csv(history)
    assert after["round"].max() == 5 and len(after) == 12
    pd.testing.assert_frame_equal(after.iloc[:len(before)], before)  # the finished rounds, untouched


@pytest.mark.parametrize("hidden, env, fix", [
    ("Box2D", "BipedalWalker-v3", 'BipedalWalker-v3 needs Box2D, which is not installed: pip install "pbx[box2d]"'),
    ("mujoco", "Hopper-v5", 'Hopper-v5 needs MuJoCo, which is not installed: pip install "pbx[mujoco]"'),
    ("ale_py", "ALE/Pong-v5", 'ALE/Pong-v5 needs Atari, which is not installed: pip install "pbx[atari]"'),
])
def test_a_missing_simulator_is_one_line_naming_the_pip_command(tmp_path, hidden: str, env: str, fix: str) -> None:
    # The package made unimportable, as on a machine without the extra.
    code = (f"import runpy, sys; sys.modules[{hidden!r}] = None; "
            f"sys.argv = ['pbx.train', '--env', {env!r}, '--run-dir', {str(tmp_path / 'r')!r}]; "
            f"runpy.run_module('pbx.train', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr == f"error: {fix}\n", proc.stderr



def test_a_rendering_backend_mujoco_cannot_load_is_one_line_naming_it(tmp_path) -> None:
    # MuJoCo reads MUJOCO_GL when it is imported: a value it does not know raises there, before any env exists.
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--env", "Hopper-v5", "--run-dir", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "MUJOCO_GL": "vga"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: Hopper-v5: importing gymnasium.envs.mujoco") and "MUJOCO_GL=vga" in proc.stderr
    assert not (tmp_path / "r").exists()

@pytest.mark.parametrize("space, message", [
    ("n_steps: {type: integer, low: 40.5, high: 120}", "low must be a whole number for an integer parameter, "
                                                      "got 40.5 (use 40 or 41)"),
    ("n_steps: {type: integer, low: 41, high: 47}", "batch_size 32 divides no rollout the search space allows "
                                                    "(n_envs 2 x n_steps in [41, 47])"),
    ("n_steps: {type: continuous, low: 40, high: 120}", "n_steps is an integer: make it {type: integer"),
])
def test_bad_integer_spaces_are_one_line_and_exit_2(tmp_path, space: str, message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--env", "Pendulum-v1", *SMALL, "--space",
                           _space_file(tmp_path, space), "--run-dir", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_normalize_obs_is_refused_for_images(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--env", "bigfish", "-m", "n_envs=2", "n_steps=32",
                           "batch_size=32", "normalize_obs=true", "--run-dir", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "normalize_obs is for MLP policies" in proc.stderr, proc.stderr
