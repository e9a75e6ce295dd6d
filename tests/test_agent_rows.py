"""Every agent's row of every task family (``SB3Agent.defaults``) trains, and resumes at a round boundary as a
kill leaves it there (the round's checkpoint, read by a fresh member): exactly where the family saves its envs,
and the same way on every resume where it restarts them. Rows another test trains and resumes after a kill are
listed with that test; the others train here, at tiny sizes, with the row's settings. And an image env that restarts
its episodes on a resume restarts them as the agent sees its frames."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from pbx.config import resolve
from pbx.envs import family
from pbx.members import ALGOS, algo_class
from pbx.members.base import MemberContext
from pbx.members.offpolicy.member import OffPolicyMember
from pbx.members.offpolicy.replay_store import fields as buffer_fields
from pbx.members.offpolicy.replay_store import rows
from pbx.members.ppo.drac import DrACMember
from pbx.members.sb3.agent import SB3Agent


class Line(gym.Env):
    """A point on a line to bring to 0, with moves in [-1, 1] or left/stay/right: a gymnasium id of no other
    family (the catch-all's rows), of either kind of actions."""

    observation_space = spaces.Box(-10, 10, (1,), np.float32)
    action_space: spaces.Space = spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x, self.t = self.np_random.uniform(-5, 5, 1).astype(np.float32), 0
        return self.x.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        move = np.asarray(action, np.float32) - 1 if isinstance(self.action_space, spaces.Discrete) else action
        self.x, self.t = np.clip(self.x + move, -10, 10).astype(np.float32), self.t + 1
        return self.x.copy(), -float(abs(self.x[0])), False, self.t >= 20, {}


class SteppedLine(Line):
    action_space = spaces.Discrete(3)


gym.register("RowsLine-v0", entry_point=Line)
gym.register("RowsSteppedLine-v0", entry_point=SteppedLine)

ENVS = {"ProcGen": ("bigfish", "bigfish"), "classic control": ("CartPole-v1", "Pendulum-v1"),
        "Box2D": ("LunarLander-v3", "LunarLanderContinuous-v3"), "MuJoCo": (None, "Hopper-v5"),
        "Atari": ("ALE/Pong-v5", None), "gymnasium": ("RowsSteppedLine-v0", "RowsLine-v0")}
"""An env of each family, by the kind of actions: (discrete, continuous)."""

COVERED = {
    ("ppo", "ProcGen"): "test_stops.py::test_a_kill_after_a_periodic_save_and_a_sigterm_each_keep_the_round",
    ("ppo-drac", "ProcGen"): "test_ppo_runs.py::test_a_drac_run_resumed_with_its_device_given_continues_bit_for_bit",
    ("ppo", "classic control"): "test_ppo_runs.py::test_a_killed_ppo_population_resumes_to_the_uninterrupted_history",
    ("ppo", "MuJoCo"): "test_continuous.py::test_a_killed_hopper_run_with_a_changing_rollout_resumes_to_the_"
                       "uninterrupted_history",
    ("ppo", "Box2D"): "test_continuous.py::test_a_killed_bipedalwalker_pb2_run_restarts_its_episodes_and_completes",
    ("ppo", "Atari"): "test_atari.py::test_a_killed_pong_run_resumes_to_the_uninterrupted_weights",
    ("dqn", "Atari"): "test_atari.py::test_a_killed_dqn_pong_run_resumes_to_the_uninterrupted_weights",
    **{(algo, "classic control"): "test_agents.py::test_a_killed_run_resumes_to_the_uninterrupted_history_which_two_"
                                  "ranks_write_too" for algo in ("a2c", "dqn", "sac", "td3")},
    ("sac", "gymnasium"): "test_own_env.py::test_an_env_of_the_users_own_module_trains_resumes_and_is_scored",
}
"""Rows whose run is another test's: a kill and a resume that continues (exactly where the family saves its envs)."""

AGENTS: dict[str, type[SB3Agent]] = {**{algo: algo_class(algo) for algo in ALGOS}, "ppo-drac": DrACMember}


def _rows() -> list[tuple[str, str]]:
    return [(name, task) for name, cls in AGENTS.items() for task in cls.defaults]


TRAINED_HERE = [row for row in _rows() if row not in COVERED]

TINY = {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "buffer_size": 40, "learning_starts": 8,
        "train_freq": 2, "eval_episodes": 0}
"""Sizes small enough for a round of a few env steps; an off-policy buffer of 20 rows that two rounds wrap."""
ROUND = 32


def test_every_agent_row_is_trained_and_resumed_by_a_test() -> None:
    assert set(COVERED) <= set(_rows()), "COVERED names a row no agent has"
    assert TRAINED_HERE, "no row left to train here"


def _env(cls: type[SB3Agent], task: str) -> str:
    discrete, continuous = ENVS[task]
    env = discrete if discrete is not None and spaces.Discrete in cls.action_spaces else continuous
    assert env is not None and family(env).name == task
    return env


def _member(cls: type[SB3Agent], env: str, algo: str) -> Any:
    """A member of the row's settings and its space's defaults, at :data:`TINY`'s sizes."""
    cfg = resolve([{"run": {"env": env, "algo": algo, "search": "PBT", "pop_size": 2}}])
    tiny = {**TINY, **({} if cfg.member.normalize_obs or _image(env) else {"net_arch": [16, 16]})}
    gradient_steps = getattr(cfg.member, "gradient_steps", None)
    if gradient_steps is not None and gradient_steps > 2:  # DQN's classic row: 128 per update
        tiny["gradient_steps"] = 2
    names = {f.name for f in fields(cfg.member)}
    settings = replace(cfg.member, **{k: v for k, v in tiny.items() if k in names})
    config = {name: tiny.get(name, param.default) for name, param in cfg.space.params.items()}
    return cls(MemberContext(env=env, index=0, seed=3, device="cpu"), settings, config)


def _image(env: str) -> bool:
    return family(env).name in ("ProcGen", "Atari")


def _state(member: Any) -> dict[str, Any]:
    """The weights, and an off-policy member's buffer."""
    state: dict[str, Any] = {k: v.clone() for k, v in member.model.policy.state_dict().items()}
    if isinstance(member, OffPolicyMember):
        buffer = member.model.replay_buffer
        state.update({f"buffer.{k}": torch.from_numpy(v) for k, v in
                      rows(buffer, 0, buffer.buffer_size).items() if k in buffer_fields(buffer)})
    return state


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(("algo", "task"), TRAINED_HERE, ids=[f"{a}-{t}" for a, t in TRAINED_HERE])
def test_a_row_trains_and_resumes_from_its_round_boundary(algo: str, task: str, tmp_path: Path,
                                                          one_core: None) -> None:
    cls = AGENTS[algo]
    env = _env(cls, task)
    whole = _member(cls, env, algo)
    initial = {k: v for k, v in _state(whole).items() if not k.startswith("buffer.")}
    whole.train(ROUND)
    whole.save(tmp_path / "member_0.r0.ckpt")
    score = whole.train(ROUND)
    expected = _state(whole)
    resumed = []
    for _ in range(1 if family(env).resume == "exact" else 2):
        member = _member(cls, env, algo)
        member.load(tmp_path / "member_0.r0.ckpt", own=True)
        resumed.append((member.train(ROUND), _state(member), member.steps))
        member.close()
    if family(env).resume == "exact":
        assert np.array_equal(resumed[0][0], score, equal_nan=True)
        assert _same(resumed[0][1], expected), "the resumed member did not continue as the uninterrupted one"
    else:  # the episodes restart from the member's own seeds: the same on every resume
        assert np.array_equal(resumed[0][0], resumed[1][0], equal_nan=True) and _same(resumed[0][1], resumed[1][1])
        assert not _same(resumed[0][1], expected), "restarted episodes should differ from the uninterrupted ones"
    assert resumed[0][2] == whole.steps and not _same({k: expected[k] for k in initial}, initial), "no update"
    whole.close()


def test_image_envs_that_restart_on_a_resume_start_their_episodes_as_the_agent_sees_them(tmp_path: Path,
                                                                                        one_core: None) -> None:
    """CarRacing (Box2D, frames channels last) restarts its episodes on a resume: their first frames go through
    SB3's transpose, as every frame the agent gets does (the resumed PPO crashed on untransposed ones)."""
    env, sizes = "CarRacing-v3", {"normalize_obs": False, "n_envs": 1, "n_steps": 8, "batch_size": 8, "n_epochs": 1,
                                  "eval_episodes": 0}
    cfg = resolve([{"run": {"env": env, "search": "PBT", "pop_size": 2}, "member": sizes}])
    config = {name: sizes.get(name, param.default) for name, param in cfg.space.params.items()}
    member = cfg.member_cls(MemberContext(env=env, index=0, seed=0, device="cpu"), cfg.member, config)
    member.train(8)
    member.save(tmp_path / "member_0.r0.ckpt")
    member.close()
    resumed = cfg.member_cls(MemberContext(env=env, index=0, seed=0, device="cpu"), cfg.member, config)
    resumed.load(tmp_path / "member_0.r0.ckpt", own=True)
    assert resumed.model._last_obs.shape == (1, *resumed.model.observation_space.shape) == (1, 3, 96, 96)
    resumed.train(8)
    assert resumed.steps == 16
    resumed.close()
