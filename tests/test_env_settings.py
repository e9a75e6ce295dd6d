"""A task family's env settings: recorded in config.yaml's ``env_settings`` section only for the family that has
them (a Pong run has no ProcGen levels, a bigfish run has them), set by flags, ``-m`` and :func:`pbx.run`, refused
in one line for another family's env, and reaching the envs; a run folder written before the section existed
(``tests/fixtures/old_layout``, written by the pbx before it) resumes."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
import yaml
from gymnasium import spaces
from stable_baselines3.common.atari_wrappers import EpisodicLifeEnv, MaxAndSkipEnv, NoopResetEnv

from pbx.config import resolve
from pbx.envs import AtariSettings, GymSettings, ProcgenSettings, family, make_env
from pbx.errors import UsageError
from pbx.history import read_csv
from pbx.runners.start import resumed_run
from pbx.settings import load_yaml, parse_override
from pbx.train import ENV_FLAGS, main

OLD = Path(__file__).resolve().parent / "fixtures" / "old_layout"
# One member, one rollout of 1 env x 32 steps, no test episodes: the smallest run an SB3 member makes.
TINY = ["--search", "none", "--batchsize", "1", "--t_ready", "32", "--max_budget", "32", "--device", "cpu",
        "-m", "n_envs=1", "n_steps=32", "batch_size=32", "n_epochs=1", "eval_episodes=0"]
LEVELS = ("num_levels", "start_level", "distribution_mode")
atari = pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="needs the atari extra (ale-py)")


def _config(run_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((run_dir / "config.yaml").read_text())


@atari
def test_a_pong_run_records_atari_settings_and_no_levels(tmp_path: Path) -> None:
    assert main(["--env", "ALE/Pong-v5", *TINY, "frame_skip=2", "--run-dir", str(tmp_path / "pong")]) == 0
    config = _config(tmp_path / "pong")
    assert config["env_settings"] == {"repeat_action_probability": 0.25, "frame_skip": 2, "frame_stack": 4,
                                      "noop_max": 30, "terminal_on_life_loss": True, "clip_reward": True}
    assert not any(key in section for section in config.values() for key in LEVELS)


def test_a_bigfish_run_records_its_levels_from_the_flags(tmp_path: Path) -> None:
    assert main(["--env", "bigfish", *TINY, "--num_levels", "5", "--distribution-mode", "hard", "--run-dir",
                 str(tmp_path / "bigfish")]) == 0
    config = _config(tmp_path / "bigfish")
    assert config["env_settings"] == {"num_levels": 5, "start_level": 0, "distribution_mode": "hard"}
    assert not any(key in config["member"] for key in LEVELS)


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--env", "ALE/Pong-v5", "--num_levels", "5"],
                 "num_levels is an env setting of the ProcGen family, not of ALE/Pong-v5 (Atari), whose env settings "
                 "are repeat_action_probability, frame_skip, frame_stack, noop_max, terminal_on_life_loss, "
                 "clip_reward", marks=atari),
    (["--env", "bigfish", "-m", "frame_skip=2"], "frame_skip is an env setting of the Atari family, not of bigfish "
                                                 "(ProcGen), whose env settings are num_levels, start_level"),
    (["--env", "toy", "--distribution_mode", "hard"], "toy trains its own member, whose env takes no env settings"),
    (["--env", "bigfish", "--num_levels", "-1"], "num_levels must be an integer from 0 to 2,147,483,647"),
    pytest.param(["--env", "ALE/Pong-v5", "-m", "repeat_action_probability=1.5"],
                 "repeat_action_probability must be a probability in [0, 1], got 1.5", marks=atari),
    (["--env", "CartPole-v1", "-m", "env_kwargs={length: 3}"], "env_kwargs {'length': 3}: CartPole-v1 cannot be "
                                                               "made with them (TypeError"),
    (["--env", "CartPole-v1", "-m", "env_kwargs={render_mode: human}"], "env_kwargs may not set render_mode"),
])
def test_an_env_setting_its_family_has_not_is_one_line(argv: list[str], message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_a_mapping_a_shell_split_is_one_line_not_a_yaml_traceback() -> None:
    with pytest.raises(UsageError, match=r"^-m 'env_kwargs=\{x:': the value is not YAML \(.*\); quote an item"):
        parse_override("env_kwargs={x:")  # -m env_kwargs={x: 1} unquoted


def test_the_flags_are_procgens_settings() -> None:
    assert [dest for _, dest, _, _ in ENV_FLAGS] == list(LEVELS) == list(ProcgenSettings.__dataclass_fields__)


@atari
def test_atari_settings_reach_the_wrappers() -> None:
    settings = AtariSettings(repeat_action_probability=0.0, frame_skip=2, frame_stack=3, noop_max=0,
                             terminal_on_life_loss=True)
    train, test = (make_env("ALE/Pong-v5", 1, 0, settings, train=train) for train in (True, False))
    game = train.venv.envs[0]
    assert game.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    assert train.observation_space.shape == (84, 84, 3)
    wrappers = [type(w) for w in _chain(game)]
    assert MaxAndSkipEnv in wrappers and NoopResetEnv not in wrappers and EpisodicLifeEnv in wrappers
    assert next(w for w in _chain(game) if isinstance(w, MaxAndSkipEnv))._skip == 2
    assert EpisodicLifeEnv not in [type(w) for w in _chain(test.venv.envs[0])]  # test episodes play whole games
    exported = family("ALE/Pong-v5").plain("ALE/Pong-v5", settings).record()  # env.yaml of an exported member
    assert exported["env_kwargs"]["repeat_action_probability"] == 0.0 and exported["frame_stack"] == 3
    assert exported["env_wrapper"]["stable_baselines3.common.atari_wrappers.AtariWrapper"] == {
        "noop_max": 0, "frame_skip": 2, "clip_reward": True, "terminal_on_life_loss": False}
    default = make_env("ALE/Pong-v5", 1, 0)
    assert default.venv.envs[0].unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    for venv in (train, test, default):
        venv.close()


def _chain(env: gymnasium.Env) -> list[gymnasium.Env]:
    chain = [env]
    while isinstance(chain[-1], gymnasium.Wrapper):
        chain.append(chain[-1].env)
    return chain


class _Switch(gymnasium.Env):
    """A user's env whose keyword argument decides its actions: continuous ones, or two discrete ones."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, continuous: bool = False) -> None:
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(2, np.float32), 0.0, True, False, {}


gymnasium.register("pbx-test/Switch-v0", entry_point=_Switch, max_episode_steps=10)


def test_env_kwargs_make_the_users_env_and_decide_which_agent_acts_in_it() -> None:
    with pytest.raises(UsageError, match="--algo sac cannot act in pbx-test/Switch-v0's action space Discrete"):
        resolve([{"run": {"env": "pbx-test/Switch-v0", "algo": "sac"}}])
    cfg = resolve([{"run": {"env": "pbx-test/Switch-v0", "algo": "sac"}, "env_kwargs": {"continuous": True}}])
    assert cfg.env_settings == GymSettings({"continuous": True})
    assert cfg.to_dict()["env_settings"] == {"env_kwargs": {"continuous": True}}
    venv = make_env("pbx-test/Switch-v0", 2, 0, cfg.env_settings)
    assert isinstance(venv.action_space, spaces.Box)
    venv.close()
    plain = family("pbx-test/Switch-v0").plain
    assert plain is not None and plain("pbx-test/Switch-v0", cfg.env_settings).record()["env_kwargs"] == {
        "continuous": True}  # what an exported member's env.yaml gives make_vec_env


def test_a_run_folder_written_before_the_env_settings_resumes(tmp_path: Path) -> None:
    """A finished CartPole run of the pbx before (PPO's member section held ``num_levels: 200``) is extended: it
    trains its second round, keeps its first, and its config.yaml is written anew without the levels."""
    run_dir = shutil.copytree(OLD / "cartpole", tmp_path / "cartpole")
    before = read_csv(run_dir / "history.csv")
    assert main(["--resume", str(run_dir), "-m", "max_budget=128"]) == 0
    after = read_csv(run_dir / "history.csv")
    assert sorted(after["round"].unique()) == [0, 1]
    assert after[after["round"] == 0].drop(columns="wall_s").reset_index(drop=True).equals(
        before.drop(columns="wall_s").reset_index(drop=True))
    config = _config(run_dir)
    assert config["env_settings"] == {"env_kwargs": {}} and not any(key in config["member"] for key in LEVELS)
    assert config["run"]["max_budget"] == 128


def test_an_old_bigfish_folder_keeps_its_levels(tmp_path: Path) -> None:
    """Its levels move from the member section to the env's settings, on a resume and on a rebuild from its
    config.yaml (``--config``)."""
    run_dir = shutil.copytree(OLD / "bigfish", tmp_path / "bigfish")
    setup = resumed_run(run_dir)
    assert setup.cfg.env_settings == ProcgenSettings(num_levels=7, start_level=3, distribution_mode="hard")
    rebuilt = resolve([load_yaml(OLD / "bigfish" / "config.yaml")])
    assert rebuilt.env_settings == setup.cfg.env_settings
    assert rebuilt.to_dict()["env_settings"] == {"num_levels": 7, "start_level": 3, "distribution_mode": "hard"}
