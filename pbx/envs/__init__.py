"""Environment builders: every ProcGen game and every gymnasium id, as an SB3 ``VecEnv``.

Both kinds report finished episodes as ``info["episode"] = {"r", "l"}``; those whose
family allows it (:mod:`pbx.envs.families`) save and restore their full state
(``get_state`` / ``set_state``), which a member's checkpoint needs to continue bit for bit.
Each is built as its family's env settings say (:mod:`pbx.envs.settings`: ProcGen's levels,
Atari's wrappers, a gymnasium id's ``env_kwargs``), a run's ``env_settings`` section.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import warnings
from typing import Any, Mapping

# procgen needs the unmaintained ``gym``, whose import prints a migration banner to stderr and
# raises deprecation and resource warnings; SB3 imports ``gym`` too whenever it is installed.
# Import both here, quietly, before the modules below (or a module importing this one) import SB3.
with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
    warnings.simplefilter("ignore")
    import gym  # noqa: F401
    import procgen  # noqa: F401

import gymnasium  # noqa: E402

from pbx.envs.atari import AtariSettings, AtariVecEnv
from pbx.envs.families import FAMILIES, Family, check_installed, family
from pbx.envs.gym import GymSettings, GymVecEnv, is_registered
from pbx.envs.procgen import DISTRIBUTION_MODES, GAMES, ProcgenSettings, ProcgenVecEnv
from pbx.envs.settings import EnvSettings
from pbx.errors import UsageError
from pbx.settings import build

__all__ = ["DISTRIBUTION_MODES", "FAMILIES", "GAMES", "AtariSettings", "AtariVecEnv", "EnvSettings", "Family",
           "GymSettings", "GymVecEnv", "ProcgenSettings", "ProcgenVecEnv", "StatefulVecEnv", "check_env",
           "env_settings", "family", "foreign_setting", "is_known", "is_procgen", "make_env",
           "observation_and_action_spaces"]

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


def env_settings(env: str, raw: Mapping[str, Any] | None = None) -> EnvSettings:
    """The settings of ``env``'s family from ``raw`` values over its defaults (:meth:`EnvSettings.defaults`), each
    coerced and checked; :class:`UsageError` for a setting the family has not (naming the family that has it)."""
    cls = family(env).settings
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw or {}:
        if key not in names:
            raise UsageError(foreign_setting(key, env) or f"unknown env setting {key!r} for {env}; valid: "
                                                           f"{', '.join(names) or 'none'}")
    return build(cls, {**cls.defaults(env), **(raw or {})})


def foreign_setting(key: str, env: str) -> str | None:
    """The refusal of ``key``, an env setting of other families than ``env``'s (``num_levels`` on Pong); None where
    no family has it."""
    owners = [task.name for task in FAMILIES if key in {f.name for f in dataclasses.fields(task.settings)}]
    if not owners:
        return None
    task = family(env)
    names = [f.name for f in dataclasses.fields(task.settings)]
    kind = owners[0] if len(owners) == 1 else f"{', '.join(owners[:-1])} and {owners[-1]}"
    return (f"{key} is an env setting of the {kind} famil{'y' if len(owners) == 1 else 'ies'}, not of {env} "
            f"({task.name}), whose env settings are {', '.join(names)}")


def make_env(env: str, n_envs: int, seed: int, settings: EnvSettings | None = None, *, train: bool = True,
             num_threads: int = 0, render: bool = False) -> StatefulVecEnv:
    """Build ``n_envs`` copies of ``env`` with its family's wrappers, seeded from ``seed``.

    Args:
        env: an id a task family holds (see :func:`check_env`).
        n_envs: number of envs stepped together.
        seed: a non-negative seed; the same seed gives the same levels and episodes.
        settings: the family's env settings (:attr:`Family.settings`; None: its defaults for ``env``).
        train: the envs a member trains on (ProcGen's training levels, ``num_levels`` from ``start_level``;
            Atari's lost life ends an episode); False: those its test episodes play (ProcGen's unrestricted
            distribution, Atari's whole games).
        num_threads: ProcGen's worker threads (0 = step in the calling thread).
        render: gymnasium envs render frames (``render_mode="rgb_array"``; a ProcGen observation is its frame).

    A family ignores the arguments it has no use for.
    """
    task = family(env)
    settings = settings if settings is not None else env_settings(env)
    if not isinstance(settings, task.settings):
        raise TypeError(f"{env} ({task.name}) is built with {task.settings.__name__}, got {type(settings).__name__}")
    return task.build(env, n_envs, seed, settings, train=train, num_threads=num_threads, render=render)


_SPACES: dict[tuple[str, str], tuple[gymnasium.Space, gymnasium.Space]] = {}


def observation_and_action_spaces(env: str, settings: EnvSettings | None = None) \
        -> tuple[gymnasium.Space, gymnasium.Space]:
    """The observation and action spaces an agent sees on ``env`` built with ``settings`` (None: its family's
    defaults; one env built with its family's wrappers and closed, once a process), for checks made before any
    member exists (which agent can act in it, how large a replay buffer is)."""
    key = (env, repr(settings if settings is not None else env_settings(env)))
    if key not in _SPACES:
        venv = make_env(env, 1, 0, settings)
        try:
            _SPACES[key] = venv.observation_space, venv.action_space
        finally:
            venv.close()
    return _SPACES[key]
