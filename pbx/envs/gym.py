"""Any registered gymnasium id (e.g. ``CartPole-v1``) as an SB3 ``VecEnv``, for quick runs.

SB3's ``make_vec_env`` wraps each env in its ``Monitor``, which reports finished
episodes the same way the ProcGen adapter does (``info["episode"]``).
"""

from __future__ import annotations

import pickle

import gymnasium
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv


def is_registered(env_id: str) -> bool:
    """Whether gymnasium knows ``env_id`` (without building the env)."""
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error:
        return False
    return True


class GymVecEnv(DummyVecEnv):
    """SB3's ``DummyVecEnv`` whose envs (with their RNGs and episode sums) can be saved and restored.

    A checkpoint must continue the episodes in progress bit for bit; gymnasium has no
    state API, so the env objects themselves are pickled (classic-control envs pickle fine).
    """

    def get_state(self) -> bytes:
        return pickle.dumps(self.envs)

    def set_state(self, state: bytes) -> None:
        self.envs = pickle.loads(state)


def make_gym_env(env_id: str, n_envs: int, seed: int, render: bool = False) -> GymVecEnv:
    """``n_envs`` copies of ``env_id``, env i seeded with ``seed + i`` at its first reset; ``render``: each
    env's ``render()`` returns an RGB frame."""
    kwargs = {"render_mode": "rgb_array"} if render else None
    return make_vec_env(env_id, n_envs=n_envs, seed=seed, env_kwargs=kwargs,  # type: ignore[return-value]
                        vec_env_cls=GymVecEnv)
