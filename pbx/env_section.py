"""``config.yaml``'s ``env_settings`` section: the settings of the run's env, its task family's
(:class:`pbx.envs.EnvSettings`), read from today's layout and from the one before it.

A run on an env a family holds records the family's settings (ProcGen's levels, Atari's wrappers, a gymnasium
id's ``env_kwargs``); a toy's or a registered member's env has none, and its run no section. Before 2026-12-06
ProcGen's levels were PPO's member settings, which every PPO run recorded (``num_levels: 200`` on Pong too): such
a run's ``config.yaml`` holds them under ``member``. Read back, they move to this section where the family has them
and are dropped where it has not (they never reached the env); given as input (an experiment file's ``member:``)
they move too, and one the env's family has not is refused as any other setting it has not.

The families live in :mod:`pbx.envs`, which imports the simulators and SB3: it is imported only for an env that is
no toy's, so a toy run never pays for torch.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

from pbx.errors import UsageError
from pbx.members import own_member

if TYPE_CHECKING:
    from pbx.envs import EnvSettings

SECTION = "env_settings"
MOVED = ("num_levels", "start_level", "distribution_mode")
"""The env settings a ``config.yaml`` written before the section held under ``member`` (PPO's)."""


def settings_names(env: str) -> tuple[str, ...]:
    """The env settings ``env`` takes: its family's; none for a toy's or a registered member's env. An id no
    family holds raises the :class:`UsageError` that names what ``--env`` takes."""
    if own_member(env):
        return ()
    from pbx.envs import family

    return tuple(f.name for f in dataclasses.fields(family(env).settings))


def env_settings(env: str, section: Mapping[str, Any], flat: Mapping[str, Any],
                 moved: Mapping[str, bool]) -> EnvSettings | None:
    """The settings of ``env``'s family (None for an env no family holds, which takes none): the section's values,
    then the flat keys that name one (``num_levels``, ``env_settings.num_levels``).

    ``moved``: the keys of ``section`` that came from a ``member`` section (:data:`MOVED`), and whether each came
    from a run's own ``config.yaml`` (a resolved config, with its space inline), where one the family has not is
    dropped; from input it is refused.
    """
    names = settings_names(env)
    dotted = SECTION + "."
    raw = {**{k: v for k, v in section.items() if not (moved.get(k) and k not in names)},
           **{key.removeprefix(dotted): v for key, v in flat.items() if key in names or key.startswith(dotted)}}
    if not names:
        if raw:
            raise UsageError(f"{env} trains its own member, whose env takes no env settings: drop "
                             f"{', '.join(sorted(raw))}")
        return None
    from pbx.envs import env_settings as make

    return make(env, raw)


def refusal(key: str, env: str) -> str | None:
    """The refusal of ``key``, an env setting of another family than ``env``'s (``num_levels`` on Pong); None
    where no family has it, or ``env`` is a toy's (whose refusal names its own settings)."""
    if own_member(env):
        return None
    from pbx.envs import foreign_setting

    return foreign_setting(key, env)
