"""Task families: how an env id is recognised, built, saved, and which simulator it needs.

One entry per family (ProcGen, classic control, Box2D, MuJoCo, any other gymnasium id) in
:data:`FAMILIES`, instead of ``if env.startswith(...)`` branches spread over the members.
A family describes the env alone: what an agent trains on it by default is the agent's own
table, by family name (:class:`pbx.members.sb3.agent.AgentDefaults`), as rl-zoo keeps its
``hyperparams/<algo>.yml`` per agent. ``docs/add-a-task-family.md`` says how to add one.

A family says how its envs resume (:attr:`Family.resume`):

- ``exact``: the env state is saved and restored, so a resumed run continues bit for bit
  (ProcGen's own state API; classic control's envs pickle whole; MuJoCo's pickle plus its
  physics data ``MjData`` and RNG, which a plain pickle loses);
- ``restart``: the state cannot be saved (a Box2D world does not survive a pickle round
  trip), so a resume restarts the episodes in progress from seeds of the member's own and
  the run's start line says so.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium
from stable_baselines3.common.vec_env import VecEnv

from pbx.envs.atari import AtariSettings, make_atari_env, plain_env
from pbx.envs.gym import GymSettings, env_spec, is_registered, make_gym_env, plain_gym_env
from pbx.envs.plain import PlainEnv
from pbx.envs.procgen import GAMES, ProcgenSettings, ProcgenVecEnv
from pbx.envs.settings import EnvSettings
from pbx.errors import UsageError

RESUMES = ("exact", "restart")

Builder = Callable[..., VecEnv]
"""``build(env, n_envs, seed, settings, *, train, num_threads, render)``: ``n_envs`` envs of ``env`` seeded from
``seed``, built as the family's ``settings`` say (see :func:`pbx.envs.make_env`); a family ignores the keywords
it has no use for."""


@dataclass(frozen=True)
class Family:
    """A task family: which ids it holds, how their envs are built and saved, and what they need installed."""

    name: str
    """Shown in messages and the key of each agent's defaults (``"Box2D"``)."""
    recognises: Callable[[str], bool]
    """Whether an env id belongs to the family (the first family in :data:`FAMILIES` that says so holds it)."""
    build: Builder
    """Builds the envs, with the family's wrappers; their ``get_state``/``set_state`` save them."""
    settings: type[EnvSettings]
    """The family's env settings (ProcGen's levels, Atari's wrappers, gymnasium's ``env_kwargs``): a run records
    them in ``config.yaml``'s ``env_settings`` section (:mod:`pbx.envs.settings`)."""
    resume: str = "exact"
    """How the envs come back on a resume: ``exact`` or ``restart`` (see the module docstring)."""
    extra: str | None = None
    """pbx's optional extra that installs the family's simulator (``pip install "pbx[box2d]"``)."""
    simulator: str | None = None
    """The simulator's import name, whose version a run records (``"mujoco"``)."""
    levels: bool = False
    """Whether its training envs play a subset of the levels test episodes play (ProcGen's ``num_levels`` from
    ``start_level``, against the unrestricted distribution); else train and test are one distribution."""
    plain: Callable[[str, Any], PlainEnv] | None = plain_gym_env
    """The env of an id built with the family's settings, as plain SB3 builds it for test episodes, which an
    exported member records (:mod:`pbx.envs.plain`; by default the id and its ``env_kwargs``); None where SB3 has
    no such env (ProcGen's)."""


def _procgen(env: str, n_envs: int, seed: int, settings: ProcgenSettings, *, train: bool = True,
             num_threads: int = 0, **_: Any) -> ProcgenVecEnv:
    """The training levels (``num_levels`` from ``start_level``), or for test episodes the unrestricted ones."""
    num_levels, start_level = (settings.num_levels, settings.start_level) if train else (0, 0)
    # ProcGen's rand_seed is a C int
    return ProcgenVecEnv(env, n_envs, seed % 2**31, num_levels=num_levels, start_level=start_level,
                         distribution_mode=settings.distribution_mode, num_threads=num_threads)


def _gym(saves_state: bool) -> Builder:
    def build(env: str, n_envs: int, seed: int, settings: GymSettings, *, render: bool = False,
              **_: Any) -> VecEnv:
        return make_gym_env(env, n_envs, seed, render=render, saves_state=saves_state, kwargs=settings.env_kwargs)
    return build


def entry_module(env_id: str) -> str:
    """The module a registered gymnasium id's env class lives in."""
    entry = env_spec(env_id).entry_point
    return entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")


def in_module(prefix: str) -> Callable[[str], bool]:
    """Recognises the registered gymnasium ids whose env class lives under the module ``prefix``."""
    return lambda env: is_registered(env) and entry_module(env).startswith(prefix)


PROCGEN = Family("ProcGen", GAMES.__contains__, _procgen, ProcgenSettings, simulator="procgen", levels=True,
                 plain=None)
CLASSIC = Family("classic control", in_module("gymnasium.envs.classic_control"), _gym(True), GymSettings)
BOX2D = Family("Box2D", in_module("gymnasium.envs.box2d"), _gym(False), GymSettings, resume="restart",
               extra="box2d", simulator="Box2D")
MUJOCO = Family("MuJoCo", in_module("gymnasium.envs.mujoco"), _gym(True), GymSettings, extra="mujoco",
                simulator="mujoco")
ATARI = Family("Atari", lambda env: env.startswith("ALE/") or in_module("ale_py")(env), make_atari_env,
               AtariSettings, extra="atari", simulator="ale_py", plain=plain_env)
"""gymnasium's ``ALE/<Game>-v5`` ids with SB3's Atari wrappers and 4 stacked frames (:mod:`pbx.envs.atari`); an
``ALE/`` id is Atari's before ale-py, which registers it, is installed (so a missing ale-py names its extra)."""
OTHER = Family("gymnasium", is_registered, _gym(False), GymSettings, resume="restart")
"""Any other registered gymnasium id; its envs may hold handles a pickle loses, so a resume restarts them."""

FAMILIES: tuple[Family, ...] = (PROCGEN, CLASSIC, BOX2D, MUJOCO, ATARI, OTHER)
"""Every task family, asked in this order: the catch-all :data:`OTHER` last."""


def family(env: str) -> Family:
    """The task family of ``env``; :class:`UsageError` for an id no family holds."""
    found = next((family for family in FAMILIES if family.recognises(env)), None)
    if found is not None:
        return found
    module, _, name = env.rpartition(":")
    if module:
        raise UsageError(f"unknown env {env!r}: {module} imports, but registers no {name} with gymnasium "
                         f"(gymnasium.register({name!r}, entry_point=...) in it)")
    raise UsageError(f"unknown env {env!r}: use a ProcGen game ({', '.join(GAMES)}), a registered gymnasium "
                     f"id such as CartPole-v1 or BipedalWalker-v3, or module:Name-v0 for an env that module "
                     f"registers")


def check_installed(env_id: str) -> None:
    """Raise :class:`UsageError` naming the pip command when the simulator of ``env_id`` (an id a family holds) is not
    installed.

    Importing the entry point's module is what fails without it (gymnasium raises
    ``DependencyNotInstalled`` there), so the check costs no env.
    """
    task = family(env_id)
    if not is_registered(env_id):  # an id its family knows by name, which its simulator registers (ALE/: ale-py)
        if task.simulator is not None and importlib.util.find_spec(task.simulator) is not None:
            raise UsageError(_unknown_id(env_id, task))
        if task.extra is not None:
            raise UsageError(f'{env_id} needs {task.name}, which is not installed: pip install "pbx[{task.extra}]"')
        return
    module = entry_module(env_id)
    try:
        importlib.import_module(module)
    except (gymnasium.error.DependencyNotInstalled, ImportError) as err:
        fix = (f'pip install "pbx[{task.extra}]"' if task.extra is not None
               else f"install what it needs ({_first_line(err)})")
        raise UsageError(f"{env_id} needs {task.name}, which is not installed: {fix}") from None
    except Exception as err:  # noqa: BLE001  (a module that fails to import cannot run the env, whatever the reason)
        gl = os.environ.get("MUJOCO_GL")
        hint = (f"; MUJOCO_GL={gl} is a rendering backend this machine cannot load: unset it, or set egl, osmesa "
                f"or glfw, whichever is installed" if gl is not None else "")
        raise UsageError(f"{env_id}: importing {module} failed ({type(err).__name__}: {_first_line(err)}){hint}") \
            from None


def _unknown_id(env_id: str, task: Family) -> str:
    """The refusal of an id its family's installed simulator does not register (``ALE/NoSuchGame-v5``): the ids
    nearest it, and how to list them all."""
    prefix = env_id.split("/")[0] + "/" if "/" in env_id else ""
    ids = [name for name in gymnasium.registry if name.startswith(prefix)] if prefix else list(gymnasium.registry)
    near = difflib.get_close_matches(env_id, ids, n=2, cutoff=0.8)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    listing = (f"python -c \"import gymnasium, {task.simulator}; gymnasium.register_envs({task.simulator}); "
               f"print([e for e in gymnasium.registry if e.startswith('{prefix}')])\"")
    return f"unknown env {env_id!r}: {task.simulator} is installed and has no such {task.name} id; {hint}list them " \
           f"with {listing}"


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0][:120]
