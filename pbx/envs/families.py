"""Task families: how an env is built, what a user expects by default, and whether its state can be saved.

One small description per family (ProcGen, classic control, Box2D, MuJoCo, any other
gymnasium id) that the PPO member reads, instead of ``if env.startswith(...)`` branches
spread over it; rl-zoo keeps its per-env defaults as data in the same spirit.

A family says how its envs resume (:attr:`Family.resume`):

- ``exact``: the env state is saved and restored, so a resumed run continues bit for bit
  (ProcGen's own state API; classic control's envs pickle whole; MuJoCo's pickle plus its
  physics data ``MjData`` and RNG, which a plain pickle loses);
- ``restart``: the state cannot be saved (a Box2D world does not survive a pickle round
  trip), so a resume restarts the episodes in progress from seeds of the member's own and
  the run's start line says so.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Mapping

import gymnasium

from pbx.envs.gym import env_spec
from pbx.errors import UsageError

RESUMES = ("exact", "restart")


@dataclass(frozen=True)
class Family:
    """What a task family needs from a PPO member and a run that names none of it."""

    name: str
    """Shown in messages (``"Box2D"``)."""
    space: str
    """The search space (a file under ``search_spaces/``) of a run that names none."""
    settings: Mapping[str, object] = field(default_factory=dict)
    """Member settings above the settings' own defaults (the ProcGen paper's PPO)."""
    run: Mapping[str, object] = field(default_factory=dict)
    """``t_ready`` and ``max_budget`` of a run that gives none."""
    resume: str = "exact"
    """How the envs come back on a resume: ``exact`` or ``restart`` (see the module docstring)."""
    extra: str | None = None
    """pbx's optional extra that installs the family's simulator (``pip install "pbx[box2d]"``)."""


PROCGEN = Family("ProcGen", "ppo_procgen.yaml", run={"t_ready": 500_000, "max_budget": 25_000_000})
"""The PB2 paper's ProcGen setting; the settings' defaults are the ProcGen paper's PPO."""

# rl-zoo's CartPole PPO (lr, gamma, lambda and epochs are the space's defaults), under SB3's own value
# loss, with which ppo_classic.yaml's defaults were tuned and the CartPole study of docs/results.md ran.
CLASSIC = Family("classic control", "ppo_classic.yaml", settings={"value_loss": "sb3", "normalize_gamma": None},
                 run={"t_ready": 32_768, "max_budget": 1_000_000})

# SB3's own PPO defaults (2,048-step rollouts in minibatches of 64, 10 epochs, no entropy bonus where the
# settings' defaults hold the ProcGen paper's 0.01, its value loss with no value clipping) as 8 envs x 256
# steps, with rl-zoo's `normalize: true` (observations and rewards): the settings rl-zoo starts its
# continuous-control PPO from. Searched values' defaults are in ppo_continuous.yaml.
_CONTROL_SETTINGS: Mapping[str, object] = {
    "value_loss": "sb3", "clip_range_vf": None, "ent_coef": 0.0, "n_envs": 8, "n_steps": 256, "batch_size": 64,
    "n_epochs": 10, "gamma": 0.99, "normalize_obs": True, "normalize_reward": True, "normalize_gamma": None,
    "eval_episodes": 10}
_CONTROL_RUN: Mapping[str, object] = {"t_ready": 50_000, "max_budget": 1_000_000}
"""The PB2 paper's continuous-control schedule: an exploit every 50,000 steps, 1M steps per member."""

BOX2D = Family("Box2D", "ppo_continuous.yaml", _CONTROL_SETTINGS, _CONTROL_RUN, resume="restart", extra="box2d")
MUJOCO = Family("MuJoCo", "ppo_continuous.yaml", _CONTROL_SETTINGS, _CONTROL_RUN, extra="mujoco")
OTHER = Family("gymnasium", "ppo_classic.yaml", CLASSIC.settings, CLASSIC.run, resume="restart")
"""Any other gymnasium id: classic control's defaults; its envs may hold handles a pickle loses, so restart."""

_BY_MODULE = {"gymnasium.envs.classic_control": CLASSIC, "gymnasium.envs.box2d": BOX2D,
              "gymnasium.envs.mujoco": MUJOCO}


def _entry_module(env_id: str) -> str:
    """The module a registered gymnasium id's env class lives in."""
    entry = env_spec(env_id).entry_point
    return entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")


def gym_family(env_id: str) -> Family:
    """The family of a registered gymnasium id, from the module its entry point lives in."""
    module = _entry_module(env_id)
    return next((family for prefix, family in _BY_MODULE.items() if module.startswith(prefix)), OTHER)


def check_installed(env_id: str) -> None:
    """Raise :class:`UsageError` naming the pip command when ``env_id``'s simulator is not installed.

    Importing the entry point's module is what fails without it (gymnasium raises
    ``DependencyNotInstalled`` there), so the check costs no env.
    """
    module = _entry_module(env_id)
    try:
        importlib.import_module(module)
    except (gymnasium.error.DependencyNotInstalled, ImportError) as err:
        family = gym_family(env_id)
        fix = (f'pip install "pbx[{family.extra}]"' if family.extra is not None
               else f"install what it needs ({_first_line(err)})")
        raise UsageError(f"{env_id} needs {family.name}, which is not installed: {fix}") from None
    except Exception as err:  # noqa: BLE001  (a module that fails to import cannot run the env, whatever the reason)
        gl = os.environ.get("MUJOCO_GL")
        hint = (f"; MUJOCO_GL={gl} is a rendering backend this machine cannot load: unset it, or set egl, osmesa "
                f"or glfw, whichever is installed" if gl is not None else "")
        raise UsageError(f"{env_id}: importing {module} failed ({type(err).__name__}: {_first_line(err)}){hint}") \
            from None


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0][:120]
