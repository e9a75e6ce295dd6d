"""The env a member plays, as plain Stable-Baselines3 builds it: what an exported member records beside its model.

A member trains and tests in envs its task family builds (:mod:`pbx.envs.families`), with pbx's
wrappers for saving their state. Outside pbx the same env is SB3's ``make_vec_env`` of the id with
the family's kwargs and wrapper, then the frame stack: :class:`PlainEnv` holds those in rl-zoo's
vocabulary (``env_kwargs``, ``env_wrapper``, ``frame_stack``, ``gym_packages``), and :func:`snippet`
writes the code that plays an episode with them. Where the ids differ from SB3's documentation the
record matters: SB3's docs play Atari's ``NoFrameskip-v4`` ids, while pbx trains ``ALE/<Game>-v5``
with v5's own frame skip off under ``AtariWrapper``'s (``make_atari_env("ALE/Pong-v5")`` alone
would repeat each action on 16 frames).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PlainEnv:
    """How plain SB3 builds the env a member's test episodes play (``info["episode"]`` the game's own score)."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keywords of ``gymnasium.make`` (``make_vec_env``'s ``env_kwargs``)."""
    env_wrapper: str | None = None
    """The import path of the wrapper over each env and its ``Monitor`` (``make_vec_env``'s ``wrapper_class``)."""
    wrapper_kwargs: dict[str, Any] = field(default_factory=dict)
    frame_stack: int | None = None
    """Frames ``VecFrameStack`` stacks into one observation; None: no stack."""
    gym_packages: tuple[str, ...] = ()
    """Modules to import whose import registers the id with gymnasium (``ale_py``)."""

    def record(self) -> dict[str, Any]:
        """The fields for ``env.yaml``, rl-zoo's way: the wrapper as ``{path: kwargs}``; those unset left out."""
        entry: dict[str, Any] = {"env_id": self.env_id, "env_kwargs": dict(self.env_kwargs)}
        if self.env_wrapper is not None:
            entry["env_wrapper"] = {self.env_wrapper: dict(self.wrapper_kwargs)}
        if self.frame_stack is not None:
            entry["frame_stack"] = self.frame_stack
        if self.gym_packages:
            entry["gym_packages"] = list(self.gym_packages)
        return entry


def snippet(env: PlainEnv, algorithm: str, model: Path, vecnormalize: Path | None, deterministic: bool) -> str:
    """Python that plays one episode of the exported ``model`` (SB3's ``algorithm``) in plain SB3 and prints its
    score: ``env`` built as the member's test episodes build it, the statistics of ``vecnormalize`` (where there
    is one) frozen on top, actions taken as the member's test episodes take them (``deterministic``)."""
    imports = ["import gymnasium as gym", *(f"import {package}" for package in env.gym_packages),
               f"from stable_baselines3 import {algorithm}", "from stable_baselines3.common.env_util import make_vec_env"]
    stacks = ["VecFrameStack"] if env.frame_stack is not None else []
    vec = [*stacks, *(["VecNormalize"] if vecnormalize is not None else [])]
    if vec:
        imports.append(f"from stable_baselines3.common.vec_env import {', '.join(vec)}")
    wrapper = ""
    if env.env_wrapper is not None:
        module, _, name = env.env_wrapper.rpartition(".")
        imports.append(f"from {module} import {name}")
        wrapper = f", wrapper_class={name}, wrapper_kwargs={env.wrapper_kwargs!r}"
    lines = [*imports, ""]
    lines += [f"gym.register_envs({package})" for package in env.gym_packages]
    kwargs = f", env_kwargs={env.env_kwargs!r}" if env.env_kwargs else ""
    lines.append(f"env = make_vec_env({env.env_id!r}, n_envs=1, seed=0{kwargs}{wrapper})")
    if env.frame_stack is not None:
        lines.append(f"env = VecFrameStack(env, {env.frame_stack})")
    if vecnormalize is not None:
        lines.append(f"env = VecNormalize.load({str(vecnormalize)!r}, env)  # frozen: training is off")
    lines += [f"model = {algorithm}.load({str(model)!r}, device='cpu')",
              "obs, done = env.reset(), [False]",
              "while not done[0]:",
              f"    action, _ = model.predict(obs, deterministic={deterministic})",
              "    obs, _, done, info = env.step(action)",
              "print(f\"episode return {info[0]['episode']['r']}, length {info[0]['episode']['l']}\")"]
    return "\n".join(lines)
