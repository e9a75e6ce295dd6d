"""Atari 2600 games (gymnasium's ``ALE/<Game>-v5`` ids, through ``ale-py``) as the PBT paper and rl-zoo train them.

Each env is the v5 game with its own frame skip off (``frameskip=1``; v5's sticky actions stay, the
Machado et al. protocol the v5 ids stand for) under SB3's :class:`AtariWrapper`: up to 30 no-op actions
at a reset, each action repeated on 4 frames with the last two max-pooled, 84x84 grey frames, a lost
life ends a training episode (not a test one), rewards clipped to their sign; then the last 4 frames
stacked, as rl-zoo's ``atari`` rows do (``env_wrapper: AtariWrapper``, ``frame_stack: 4``). SB3's
``Monitor`` sits under the wrappers, so an episode's score is the game's, unclipped, over all its lives.

The state of each env is the emulator's (``cloneState(include_rng=True)``: RAM, frame counters,
the sticky-action RNG) plus what the Python wrappers hold (the no-op RNG, the frame buffers, the
lives left, the episode sums), and the frame stack's frames. What ALE's state leaves out is the TIA's two frame
buffers, which a game repaints only in part (Arcade-Learning-Environment PR #739): the game continues exactly, but
the first frames after a restore can differ where the old buffers show through, and so can the updates they feed
(a Pong member in ``tests/test_atari.py``: 6 frames, weights 1e-5 apart a round later).
"""

from __future__ import annotations

import contextlib
import functools
import pickle
from typing import Any

import gymnasium
import numpy as np
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

with contextlib.suppress(ImportError):  # the "atari" extra; without it no ALE/ id is registered
    import ale_py

    gymnasium.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr at each game's start

FRAMES = 4
"""Frames stacked into one observation."""


class AtariVecEnv(VecFrameStack):
    """SB3's frame stack over the wrapped games, whose state can be saved and restored whole."""

    venv: DummyVecEnv

    def get_state(self) -> bytes:
        return pickle.dumps(([_env_state(env) for env in self.venv.envs], self.stacked_obs.stacked_obs))

    def set_state(self, state: bytes) -> None:
        envs, stacked = pickle.loads(state)
        for env, saved in zip(self.venv.envs, envs):
            _set_env_state(env, saved)
        self.stacked_obs.stacked_obs = stacked


def _chain(env: gymnasium.Env) -> list[gymnasium.Env]:
    """The wrappers from the outermost in, then the game."""
    chain = [env]
    while isinstance(chain[-1], gymnasium.Wrapper):
        chain.append(chain[-1].env)
    return chain


def _env_state(env: gymnasium.Env) -> tuple[list[dict[str, Any]], Any, np.random.Generator]:
    """Each wrapper's own attributes, the emulator's state with its RNG, and the game's RNG (the no-ops')."""
    *wrappers, game = _chain(env)
    return ([{k: v for k, v in vars(w).items() if k != "env"} for w in wrappers],
            game.unwrapped.ale.cloneState(include_rng=True), game.unwrapped.np_random)


def _set_env_state(env: gymnasium.Env, state: tuple[list[dict[str, Any]], Any, np.random.Generator]) -> None:
    attributes, emulator, rng = state
    *wrappers, game = _chain(env)
    for wrapper, saved in zip(wrappers, attributes):
        wrapper.__dict__.update(saved)
    game.unwrapped.ale.restoreState(emulator)
    game.unwrapped.np_random = rng


def make_atari_env(env: str, n_envs: int, seed: int, *, train: bool = True, render: bool = False,
                   **_: Any) -> AtariVecEnv:
    """``n_envs`` games of ``env`` seeded from ``seed``; ``train``: a lost life ends the episode."""
    make = functools.partial(gymnasium.make, env, frameskip=1, render_mode="rgb_array" if render else None)
    venv = make_vec_env(make, n_envs=n_envs, seed=seed, wrapper_class=AtariWrapper,
                        wrapper_kwargs={"terminal_on_life_loss": train}, vec_env_cls=DummyVecEnv)
    return AtariVecEnv(venv, FRAMES)
