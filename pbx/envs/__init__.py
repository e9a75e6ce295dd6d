"""Environment builders: every ProcGen game and every gymnasium id, as an SB3 ``VecEnv``.

Both kinds report finished episodes as ``info["episode"] = {"r", "l"}``; those whose
family allows it (:mod:`pbx.envs.families`) save and restore their full state
(``get_state`` / ``set_state``), which a member's checkpoint needs to continue bit for bit.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings

# procgen needs the unmaintained ``gym``, whose import prints a migration banner to stderr and
# raises deprecation and resource warnings; SB3 imports ``gym`` too whenever it is installed.
# Import both here, quietly, before the modules below (or a module importing this one) import SB3.
with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
    warnings.simplefilter("ignore")
    import gym  # noqa: F401
    import procgen  # noqa: F401

import gymnasium  # noqa: E402

from pbx.envs.atari import AtariVecEnv
from pbx.envs.families import FAMILIES, Family, check_installed, family
from pbx.envs.gym import GymVecEnv, is_registered
from pbx.envs.procgen import DISTRIBUTION_MODES, GAMES, ProcgenVecEnv
from pbx.errors import UsageError

__all__ = ["DISTRIBUTION_MODES", "FAMILIES", "GAMES", "AtariVecEnv", "Family", "GymVecEnv", "ProcgenVecEnv",
           "StatefulVecEnv", "check_env", "family", "is_known", "is_procgen", "make_env", "observation_and_action_spaces"]

StatefulVecEnv = ProcgenVecEnv | GymVecEnv | AtariVecEnv


def is_procgen(env: str) -> bool:
    return env in GAMES


def is_known(env: str) -> bool:
    """Whether a task family holds ``env`` (not a member's own env, :func:`pbx.members.register`)."""
    try:
        family(env)
    except UsageError:
        return False
    return True


def check_env(env: str) -> None:
    """Raise :class:`UsageError` unless a task family holds ``env`` (:func:`family`) and, for a gymnasium id,
    its simulator is installed (else the message names the pip command)."""
    if is_registered(env) or family(env).extra is not None:
        check_installed(env)


def make_env(env: str, n_envs: int, seed: int, *, train: bool = True, num_levels: int = 0, start_level: int = 0,
             distribution_mode: str = "easy", num_threads: int = 0, render: bool = False) -> StatefulVecEnv:
    """Build ``n_envs`` copies of ``env`` with its family's wrappers, seeded from ``seed``.

    Args:
        env: an id a task family holds (see :func:`check_env`).
        n_envs: number of envs stepped together.
        seed: a non-negative seed; the same seed gives the same levels and episodes.
        train: the envs a member trains on (ProcGen's training levels, ``num_levels`` from ``start_level``);
            False: those its test episodes play (ProcGen's unrestricted distribution).
        num_levels: ProcGen's number of training levels (0 = unrestricted).
        start_level: ProcGen's first training level seed.
        distribution_mode: ProcGen's difficulty (one of :data:`DISTRIBUTION_MODES`).
        num_threads: ProcGen's worker threads (0 = step in the calling thread).
        render: gymnasium envs render frames (``render_mode="rgb_array"``; a ProcGen observation is its frame).

    A family ignores the arguments it has no use for.
    """
    return family(env).build(env, n_envs, seed, train=train, num_levels=num_levels, start_level=start_level,
                             distribution_mode=distribution_mode, num_threads=num_threads, render=render)


@functools.lru_cache(maxsize=None)
def observation_and_action_spaces(env: str) -> tuple[gymnasium.Space, gymnasium.Space]:
    """The observation and action spaces an agent sees on ``env`` (one env built with its family's wrappers and
    closed), for checks made before any member exists (which agent can act in it, how large a replay buffer is)."""
    venv = make_env(env, 1, 0)
    try:
        return venv.observation_space, venv.action_space
    finally:
        venv.close()
