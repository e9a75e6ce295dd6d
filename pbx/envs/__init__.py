"""Environment builders: every ProcGen game and every gymnasium id, as an SB3 ``VecEnv``.

Both kinds report finished episodes as ``info["episode"] = {"r", "l"}``; those whose
family allows it (:mod:`pbx.envs.families`) save and restore their full state
(``get_state`` / ``set_state``), which a member's checkpoint needs to continue bit for bit.
"""

from __future__ import annotations

import contextlib
import io
import warnings

# procgen needs the unmaintained ``gym``, whose import prints a migration banner to stderr and
# raises deprecation and resource warnings; SB3 imports ``gym`` too whenever it is installed.
# Import both here, quietly, before the modules below (or a module importing this one) import SB3.
with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
    warnings.simplefilter("ignore")
    import gym  # noqa: F401
    import procgen  # noqa: F401

from pbx.envs.families import PROCGEN, Family, check_installed, gym_family
from pbx.envs.gym import GymVecEnv, is_registered, make_gym_env, observation_and_action_spaces
from pbx.envs.procgen import DISTRIBUTION_MODES, GAMES, ProcgenVecEnv
from pbx.errors import UsageError

__all__ = ["DISTRIBUTION_MODES", "GAMES", "Family", "GymVecEnv", "ProcgenVecEnv", "StatefulVecEnv", "check_env",
           "family", "is_procgen", "make_env", "observation_and_action_spaces"]

StatefulVecEnv = ProcgenVecEnv | GymVecEnv


def is_procgen(env: str) -> bool:
    return env in GAMES


def family(env: str) -> Family:
    """The task family of ``env``, a ProcGen game or a registered gymnasium id (:func:`check_env`)."""
    return PROCGEN if is_procgen(env) else gym_family(env)


def check_env(env: str) -> None:
    """Raise :class:`UsageError` unless ``env`` is a ProcGen game or a registered gymnasium id whose simulator
    is installed (else the message names the pip command)."""
    if is_procgen(env):
        return
    if not is_registered(env):
        module, _, name = env.rpartition(":")
        if module:
            raise UsageError(f"unknown env {env!r}: {module} imports, but registers no {name} with gymnasium "
                             f"(gymnasium.register({name!r}, entry_point=...) in it)")
        raise UsageError(f"unknown env {env!r}: use a ProcGen game ({', '.join(GAMES)}), a registered gymnasium "
                         f"id such as CartPole-v1 or BipedalWalker-v3, or module:Name-v0 for an env that module "
                         f"registers")
    check_installed(env)


def make_env(env: str, n_envs: int, seed: int, *, num_levels: int = 0, start_level: int = 0,
             distribution_mode: str = "easy", num_threads: int = 0, render: bool = False) -> StatefulVecEnv:
    """Build ``n_envs`` copies of ``env``, seeded from ``seed``.

    Args:
        env: a ProcGen game or a gymnasium id (see :func:`check_env`).
        n_envs: number of envs stepped together.
        seed: a non-negative seed; the same seed gives the same levels and episodes.
        num_levels: ProcGen's number of levels (0 = unrestricted, the test distribution).
        start_level: ProcGen's first level seed.
        distribution_mode: ProcGen's difficulty (one of :data:`DISTRIBUTION_MODES`).
        num_threads: ProcGen's worker threads (0 = step in the calling thread).
        render: gymnasium envs render frames (``render_mode="rgb_array"``; a ProcGen observation is its frame).

    The ProcGen-only arguments are ignored for gymnasium ids.
    """
    if is_procgen(env):
        # ProcGen's rand_seed is a C int
        return ProcgenVecEnv(env, n_envs, seed % 2**31, num_levels=num_levels, start_level=start_level,
                             distribution_mode=distribution_mode, num_threads=num_threads)
    return make_gym_env(env, n_envs, seed, render=render, saves_state=family(env).resume == "exact")
