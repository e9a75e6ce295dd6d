"""Any registered gymnasium id (e.g. ``CartPole-v1``, ``BipedalWalker-v3``, ``Hopper-v5``) as an SB3 ``VecEnv``.

SB3's ``make_vec_env`` wraps each env in its ``Monitor``, which reports finished
episodes the same way the ProcGen adapter does (``info["episode"]``).
"""

from __future__ import annotations

import ctypes.util
import functools
import importlib
import os
import pickle
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import yaml
from gymnasium.envs.registration import EnvSpec, load_env_creator
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from pbx.envs.plain import PlainEnv
from pbx.envs.settings import EnvSettings
from pbx.errors import UsageError


@dataclass(frozen=True)
class GymSettings(EnvSettings):
    """What a gymnasium id is made with, beyond its id (rl-zoo's ``env_kwargs``)."""

    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make`` (``{continuous: true}``: LunarLander's actions are continuous);
    plain YAML values, so that ``config.yaml`` rebuilds the env. pbx sets ``render_mode`` itself."""

    def __post_init__(self) -> None:
        kwargs = self.env_kwargs
        if not isinstance(kwargs, dict) or not all(isinstance(key, str) and key for key in kwargs):
            raise UsageError(f"env_kwargs must be a mapping of gymnasium.make's keyword arguments, such as "
                             f"{{continuous: true}}, got {kwargs!r}")
        if "render_mode" in kwargs:
            raise UsageError("env_kwargs may not set render_mode: pbx renders frames where a video asks for them")
        try:
            plain = yaml.safe_load(yaml.safe_dump(kwargs)) == kwargs
        except yaml.YAMLError:
            plain = False
        if not plain:
            raise UsageError(f"env_kwargs must hold plain YAML values (numbers, strings, booleans, lists, mappings), "
                             f"which config.yaml records, got {kwargs!r}")


def env_spec(env_id: str) -> EnvSpec:
    """gymnasium's record of ``env_id``, without building the env.

    ``module:Name-v0`` (gymnasium.make's convention for a user's own envs) imports ``module`` first, where
    the env registers itself; ``gymnasium.spec`` alone does not. Run from the folder that holds the module
    (``python -m`` puts it on the path) or put it on ``PYTHONPATH``: every process that builds the env
    (MPI ranks, a resume, an evaluation) imports it the same way from the id in ``config.yaml``.
    """
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise UsageError(f"--env {env_id}: cannot import {module} ({err}): run from the folder that holds it, "
                             f"or put that folder on PYTHONPATH") from None
    return gymnasium.spec(name)


def is_registered(env_id: str) -> bool:
    """Whether gymnasium knows ``env_id`` (a ``module:`` prefix imported first, see :func:`env_spec`)."""
    try:
        env_spec(env_id)
    except gymnasium.error.Error:
        return False
    return True


class GymVecEnv(DummyVecEnv):
    """SB3's ``DummyVecEnv`` whose envs (with their RNGs and episode sums) can be saved and restored, where
    their family allows it (:attr:`saves_state`).

    gymnasium has no state API, so the env objects themselves are pickled: classic-control envs pickle
    whole. A MuJoCo env's pickle rebuilds its model and loses the simulation (``MjData``: positions,
    velocities, warm starts, the derived quantities the next reward reads) and its RNG, so those travel
    beside it and are copied back in. A Box2D world does not survive a pickle at all: such envs save
    nothing and the member restarts their episodes on a resume.
    """

    saves_state = True
    """Whether :meth:`get_state` saves the envs (set per family by :func:`make_gym_env`)."""

    def get_state(self) -> bytes | None:
        """The envs' state, or None where their family cannot save it (a resume then restarts the episodes)."""
        if not self.saves_state:
            return None
        return pickle.dumps((self.envs, [_simulation(env) for env in self.envs]))

    def set_state(self, state: bytes) -> None:
        envs, simulations = pickle.loads(state)
        for env, simulation in zip(envs, simulations):
            if simulation is not None:
                _set_simulation(env, simulation)
        self.envs = envs


def _simulation(env: gymnasium.Env) -> tuple[Any, Any] | None:
    """A MuJoCo env's ``MjData`` and RNG (what its pickle loses); None for any other env."""
    inner = env.unwrapped
    if type(inner).__module__.startswith("gymnasium.envs.mujoco") and hasattr(inner, "data"):
        return inner.data, inner.np_random
    return None


def _set_simulation(env: gymnasium.Env, simulation: tuple[Any, Any]) -> None:
    import mujoco

    inner = env.unwrapped
    data, rng = simulation
    mujoco.mj_copyData(inner.data, inner.model, data)
    inner.np_random = rng


def plain_gym_env(env_id: str, settings: GymSettings) -> PlainEnv:
    """``env_id`` made with its ``env_kwargs``, as plain SB3's ``make_vec_env`` builds it."""
    return PlainEnv(env_id, dict(settings.env_kwargs))


def make_gym_env(env_id: str, n_envs: int, seed: int, render: bool = False, saves_state: bool = True,
                 kwargs: dict[str, Any] | None = None) -> GymVecEnv:
    """``n_envs`` copies of ``env_id`` made with ``kwargs`` (:attr:`GymSettings.env_kwargs`), env i seeded with
    ``seed + i`` at its first reset; ``render``: each env's ``render()`` returns an RGB frame; ``saves_state``: see
    :attr:`GymVecEnv.saves_state`. Keyword arguments the env refuses are a :class:`UsageError` naming them."""
    kwargs = kwargs or {}
    # Built here, not by id: given an id, SB3 asks every env for rgb_array renders, rendered or not, and
    # gymnasium warns of an env that cannot render (a user's own).
    make = functools.partial(_rendering if render else gymnasium.make, env_id, **kwargs)
    try:
        venv = make_vec_env(make, n_envs=n_envs, seed=seed, vec_env_cls=GymVecEnv)
    except (TypeError, ValueError, AssertionError, gymnasium.error.Error) as err:
        if not kwargs:
            raise
        first = (str(err).splitlines() or [""])[0][:200]
        raise UsageError(f"env_kwargs {kwargs}: {env_id} cannot be made with them ({type(err).__name__}: "
                         f"{first})") from None
    assert isinstance(venv, GymVecEnv)
    venv.saves_state = saves_state
    return venv


def _rendering(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """``env_id`` made to render RGB frames, or :class:`UsageError` where its env cannot."""
    entry = env_spec(env_id).entry_point
    modes = list(getattr(load_env_creator(entry) if isinstance(entry, str) else entry, "metadata", {})
                 .get("render_modes", []))
    if "rgb_array" not in modes:
        raise UsageError(f"cannot record the video: {env_id} does not render RGB frames (its metadata's "
                         f"render_modes: {modes})")
    _headless_gl()
    return gymnasium.make(env_id, render_mode="rgb_array", **kwargs)


def _headless_gl() -> None:
    """On a machine with no display, point MuJoCo's renderer at an off-screen OpenGL library that is there.

    With ``MUJOCO_GL`` unset, gymnasium tries glfw first, which needs a display: on a headless machine
    (a cluster node, CI) it fails, prints a traceback from its context's ``__del__`` and only then falls
    back to EGL. A user's own ``MUJOCO_GL`` is left as it is.
    """
    if "MUJOCO_GL" in os.environ or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    backend = next((name for name, lib in (("egl", "EGL"), ("osmesa", "OSMesa")) if ctypes.util.find_library(lib)),
                   None)
    if backend is not None:
        os.environ["MUJOCO_GL"] = backend
