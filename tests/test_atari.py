"""Atari (``ALE/<Game>-v5`` through ale-py): a saved env continues frame for frame in a freshly built one, at a
game's start, after a lost life and after a new game; PBT trains PPO on Pong and resumes exactly after a kill -9;
each agent gets rl-zoo's atari row; an agent that cannot act in Atari's actions, or a game ale-py does not have, is
refused in one line."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pytest
import torch

from pbx.config import resolve
from pbx.envs.atari import make_atari_env
from pbx.history import read_csv
from pbx.members.offpolicy import member as offpolicy
from pbx.train import main

from conftest import kill_after, start_train

pytest.importorskip("ale_py")

# 2 members, 2 rounds of one rollout of 2 envs x 32 steps; no test episodes (a Pong game lasts thousands of steps):
# the weights tell whether the envs came back as they were
RUN = ["--env", "ALE/Pong-v5", "--search", "PBT", "--batchsize", "2", "--quantile", "0.5", "--device", "cpu",
       "--t_ready", "64", "--max_budget", "128", "-m", "n_envs=2", "n_steps=32", "batch_size=64", "n_epochs=1",
       "eval_episodes=0"]


@pytest.fixture
def one_core() -> Iterator[None]:
    """This process and the runs it starts on one core: a CNN member takes a torch thread per core, and on a
    busy machine two threads wait on each other (the Nature CNN on 2 shared cores: 20x slower than on one)."""
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    yield
    os.sched_setaffinity(0, cores)


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


def test_a_killed_pong_run_resumes_to_the_uninterrupted_weights(tmp_path: Path, one_core: None) -> None:
    assert main([*RUN, "--run-dir", str(tmp_path / "whole")]) == 0
    killed = start_train(*RUN, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=0)  # once round 0 is written
    assert read_csv(tmp_path / "killed" / "history.csv")["round"].max() == 0, "the kill should land mid-run"
    resumed = start_train("--resume", str(tmp_path / "killed"))
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    pd.testing.assert_frame_equal(_history(tmp_path / "killed"), _history(tmp_path / "whole"))
    same = [all(torch.equal(_weights(tmp_path / "killed", m)[k], v) for k, v in _weights(tmp_path / "whole", m).items())
            for m in (0, 1)]
    assert same[0], "member 0's weights differ from the uninterrupted run's"
    assert same[1], "member 1's weights differ from the uninterrupted run's"


def test_dqn_on_atari_gets_rl_zoos_atari_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offpolicy, "_available_memory", lambda: 10**12)  # 100k frames of 84x84x4, twice, per member
    cfg = resolve([{"run": {"env": "ALE/Pong-v5", "algo": "dqn", "search": "PBT", "pop_size": 2}}])
    m = cfg.member
    assert (m.buffer_size, m.learning_starts, m.target_update_interval, m.train_freq, m.gradient_steps,
            m.exploration_fraction) == (100_000, 100_000, 1_000, 4, 1, 0.1)
    assert cfg.space.params["learning_rate"].default == 1e-4
    assert cfg.space.params["exploration_final_eps"].default == 0.01
    assert (cfg.run.t_ready, cfg.run.max_budget) == (250_000, 10_000_000)


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
