"""Atari (``ALE/<Game>-v5`` through ale-py): a saved env continues frame for frame in a freshly built one, at a
game's start, after a lost life and after a new game; PBT trains PPO and DQN on Pong and each resumes exactly after a
kill -9; each agent gets rl-zoo's atari row, and DQN's buffers of 4 members fit a 24 GB machine; an agent that cannot act in Atari's actions, or a game ale-py does not have, is
refused in one line."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from pbx import export
from pbx.config import resolve
from pbx.envs.atari import make_atari_env
from pbx.history import read_csv
from pbx.envs import make_env, observation_and_action_spaces
from pbx.errors import UsageError
from pbx.evaluation import find_target
from pbx.members.base import MemberContext
from pbx.members.offpolicy import member as offpolicy
from pbx.members.offpolicy.dqn import DQNMember, DQNSettings
from pbx.members.offpolicy.replay_store import fields
from pbx.runners.start import default_name, new_run
from pbx.train import main

from conftest import built_once, kill_after, start_train

pytest.importorskip("ale_py")

# 2 members, 2 rounds of one rollout of 2 envs x 32 steps; no test episodes (a Pong game lasts thousands of steps):
# the weights tell whether the envs came back as they were
RUN = ["--env", "ALE/Pong-v5", "--search", "PBT", "--batchsize", "2", "--quantile", "0.5", "--device", "cpu",
       "--t_ready", "64", "--max_budget", "128", "-m", "n_envs=2", "n_steps=32", "batch_size=64", "n_epochs=1",
       "eval_episodes=0"]
# DQN: 2 rounds of 32 steps of one env, updates from step 16 on, a buffer of 40 (the row stores each frame stack once)
DQN_RUN = ["--algo", "dqn", *RUN[:RUN.index("--t_ready")], "--t_ready", "32", "--max_budget", "64", "-m",
           "buffer_size=40", "learning_starts=16", "eval_episodes=0"]


def _history(run_dir: Path) -> pd.DataFrame:
    return read_csv(run_dir / "history.csv").drop(columns="wall_s")


def _weights(run_dir: Path, member: int) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / f"member_{member}.r1.ckpt", weights_only=False)["policy"]


# Saved after 5 steps, after the first lost life and after the first game over (Breakout: lives lost at steps 22,
# 45, 66, 89 and the game at 110; Pong's first game ends at step 756), each env playing the actions in turn.
# Restored without the replay, Pong's env 0 differs at all 50 steps after step 770
@pytest.mark.parametrize(("game", "saves"), [("Breakout", (5, 30, 120)), ("Pong", (5, 770))])
def test_a_saved_env_continues_frame_for_frame_in_a_fresh_one(game: str, saves: tuple[int, ...]) -> None:
    venv = make_atari_env(f"ALE/{game}-v5", n_envs=2, seed=3)
    venv.reset()
    actions = (np.arange(saves[-1] + 50)[:, None] + [0, 1]) % venv.action_space.n
    states = {}
    played = []
    for step, action in enumerate(actions):
        if step in saves:
            states[step] = venv.get_state()
        played.append(venv.step(action)[:3])
    assert any(played[s][2].any() for s in range(saves[-1])), "no episode ended before the last save"
    for step, state in states.items():
        fresh = make_atari_env(f"ALE/{game}-v5", n_envs=2, seed=4)
        fresh.reset()
        fresh.set_state(state)
        for t, action in enumerate(actions[step:step + 50]):
            assert all(np.array_equal(got, was) for got, was in zip(fresh.step(action)[:3], played[step + t])), \
                f"saved at step {step}: step {t} after the restore differs"


def test_a_state_saved_before_the_replay_still_restores() -> None:
    """A run folder of an older pbx holds env states of three parts, with no replay: they restore as they did then
    (all but the TIA's state), and the envs play on."""
    venv = make_atari_env("ALE/Breakout-v5", n_envs=2, seed=3)
    venv.reset()
    for _ in range(5):
        venv.step(np.array([1, 2]))
    envs, stacked = pickle.loads(venv.get_state())
    fresh = make_atari_env("ALE/Breakout-v5", n_envs=2, seed=4)
    fresh.reset()
    fresh.set_state(pickle.dumps(([env[:3] for env in envs], stacked)))
    (reward, done), (reward0, done0) = fresh.step(np.array([3, 0]))[1:3], venv.step(np.array([3, 0]))[1:3]
    assert np.array_equal(reward, reward0) and np.array_equal(done, done0)


@pytest.fixture(scope="module")
def dqn_pong(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DQN run on Pong of two rounds (:data:`DQN_RUN`), trained once for the tests that read it."""
    return built_once(tmp_path_factory, "dqn-pong", lambda folder: main([*DQN_RUN, "--run-dir", str(folder)]))


def _killed_and_resumed(run: list[str], whole: Path, tmp_path: Path) -> None:
    """Assert that ``run`` killed after its first round and resumed ends as the uninterrupted run ``whole``: its
    history and both members' weights."""
    killed = start_train(*run, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=0)  # once round 0 is written
    assert read_csv(tmp_path / "killed" / "history.csv")["round"].max() == 0, "the kill should land mid-run"
    resumed = start_train("--resume", str(tmp_path / "killed"))
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    pd.testing.assert_frame_equal(_history(tmp_path / "killed"), _history(whole))
    for m in (0, 1):
        assert all(torch.equal(_weights(tmp_path / "killed", m)[k], v)
                   for k, v in _weights(whole, m).items()), f"member {m}'s weights differ"


def test_a_killed_pong_run_resumes_to_the_uninterrupted_weights(tmp_path: Path, one_core: None) -> None:
    assert main([*RUN, "--run-dir", str(tmp_path / "whole")]) == 0
    _killed_and_resumed(RUN, tmp_path / "whole", tmp_path)


def test_a_killed_dqn_pong_run_resumes_to_the_uninterrupted_weights(dqn_pong: Path, tmp_path: Path,
                                                                   one_core: None) -> None:
    """DQN on Pong trains (it failed at its first stored transition: the replay buffer, built for the transposed
    frames, was handed them untransposed) and resumes exactly from its replay segments, each frame stack stored
    once (``optimize_memory_usage``, the row's): a buffer of 40 that the second round wraps, updates from step 16."""
    _killed_and_resumed(DQN_RUN, dqn_pong, tmp_path)
    with np.load(next((dqn_pong / "checkpoints").glob("member_0.replay.*.npz"))) as segment:
        assert "next_observations" not in segment.files and segment["observations"].shape[2:] == (4, 84, 84)


def test_dqn_on_atari_gets_rl_zoos_atari_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offpolicy, "_available_memory", lambda: 10**12)  # 100k frame stacks of 84x84x4 per member
    cfg = resolve([{"run": {"env": "ALE/Pong-v5", "algo": "dqn", "search": "PBT", "pop_size": 2}}])
    m = cfg.member
    assert (m.buffer_size, m.learning_starts, m.target_update_interval, m.train_freq, m.gradient_steps,
            m.exploration_fraction, m.optimize_memory_usage) == (100_000, 100_000, 1_000, 4, 1, 0.1, True)
    assert cfg.space.params["learning_rate"].default == 1e-4
    assert cfg.space.params["exploration_final_eps"].default == 0.01
    assert (cfg.run.t_ready, cfg.run.max_budget) == (250_000, 10_000_000)


def test_a_dqn_population_of_4_on_pong_fits_a_24_gb_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each 84x84x4 observation stored once: 2.8 GB of buffer a member, 11.3 GB for 4 (22.6 GB stored twice, which
    a 24 GB machine with 20 GB free refused)."""
    monkeypatch.setattr(offpolicy, "_available_memory", lambda: 20 * 10**9)
    layers = [{"run": {"env": "ALE/Pong-v5", "algo": "dqn", "search": "PBT", "pop_size": 4}}]
    resolve(layers)
    with pytest.raises(UsageError, match=r"buffer_size 100,000 x 8 members needs 22\.6 GB of replay buffers, 20\.0 GB"):
        resolve([{"run": {**layers[0]["run"], "pop_size": 8}}])


@pytest.mark.parametrize("optimize", [True, False])
def test_the_memory_check_counts_the_bytes_the_buffer_allocates(optimize: bool) -> None:
    """The estimate is the buffer's arrays, byte for byte: 51 transitions over 2 envs are 25 rows of 2."""
    settings = DQNSettings(buffer_size=51, n_envs=2, learning_starts=0, eval_episodes=0,
                           optimize_memory_usage=optimize)
    member = DQNMember(MemberContext(env="ALE/Pong-v5", index=0, seed=0, device="cpu"), settings, {})
    buffer = member.model.replay_buffer
    assert offpolicy.replay_bytes(*observation_and_action_spaces("ALE/Pong-v5"), settings) == \
        sum(getattr(buffer, name).nbytes for name in fields(buffer))
    assert ("next_observations" in fields(buffer)) != optimize
    member.close()


@pytest.mark.parametrize("argv, message", [
    # it said SAC lacked an Atari row, to be added to SACMember.defaults: the user's fix is an agent that acts there
    (["--algo", "sac", "--env", "ALE/Pong-v5"],
     "--algo sac cannot act in ALE/Pong-v5's action space Discrete(6): SAC needs continuous (Box) actions and "
     "ALE/Pong-v5's are discrete; use --algo ppo, a2c or dqn"),
    # it said Atari was not installed, and to pip install pbx[atari], with ale-py installed
    (["--env", "ALE/Pongg-v5"], "unknown env 'ALE/Pongg-v5': ale_py is installed and has no such Atari id; did you "
                                "mean ALE/Pong-v5 or ALE/Pooyan-v5? list them with python -c"),
    (["--env", "ALE/NoSuchGame-v5"], "unknown env 'ALE/NoSuchGame-v5': ale_py is installed and has no such Atari id; "
                                     "list them with python -c"),
])
def test_an_agent_or_a_game_that_cannot_run_is_one_line_naming_the_fix(argv: list[str], message: str, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_the_default_run_folder_of_an_atari_id_is_one_folder_in_runs(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --run-dir an ALE/Pong-v5 run went to runs/ALE/Pong-v5-...: the id's namespace as a folder."""
    monkeypatch.chdir(tmp_path)
    setup = new_run([{"run": {"env": "ALE/Pong-v5", "search": "PBT", "seed": 2}}])
    assert setup.run_dir.path.parent == Path("runs") and [p.name for p in (tmp_path / "runs").iterdir()] == \
        [setup.cfg.run.name]
    assert setup.cfg.run.name.startswith("ALE-Pong-v5-PBT-s2-")
    assert default_name(replace(setup.cfg.run, env="my_tasks:Point-v0")).startswith("my_tasks-Point-v0-PBT-s2-")


# Put first on the import path of the process that runs the printed snippet: pbx is installed (editable) for every
# process of this interpreter, so it is refused by name, as where it is not installed.
NO_PBX = """
import sys
class NoPbx:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pbx":
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, NoPbx())
try:
    import pbx
except ImportError:
    pass
else:
    raise SystemExit("pbx is importable")
"""


def test_the_exported_pong_member_plays_in_plain_sb3_as_its_test_episodes_play(dqn_pong: Path, tmp_path: Path,
                                                                              one_core: None,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The snippet pbx.export prints plays one whole game of Pong (about 760 agent steps, 3,056 frames here) in plain
    SB3 without pbx, frame for frame as the member's own test episode on seed 0: the same score and length. With
    SB3's make_atari_env("ALE/Pong-v5") alone each action would last 16 frames (v5's skip under AtariWrapper's)."""
    capsys.readouterr()
    assert export.main([str(dqn_pong), "--out", str(tmp_path / "export")]) == 0
    out = capsys.readouterr().out
    recorded = yaml.safe_load((tmp_path / "export" / "env.yaml").read_text())["env_kwargs"]
    assert recorded == {"frameskip": 1, "repeat_action_probability": 0.25}  # the run's env settings
    code = out[out.index("import gymnasium"):]
    member = find_target(dqn_pong).load_member("cpu")
    venv = make_env("ALE/Pong-v5", 1, 0, train=False)
    obs, done = venv.reset(), [False]
    while not done[0]:
        obs, _, done, info = venv.step(member.act(obs, deterministic=True))
    member.close()
    played = subprocess.run([sys.executable, "-c", NO_PBX + code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert played.returncode == 0, played.stderr
    assert played.stdout == f"episode return {info[0]['episode']['r']}, length {info[0]['episode']['l']}\n"
