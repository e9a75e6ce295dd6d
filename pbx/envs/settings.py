"""A task family's env settings: how its envs are built, kept with the env as rl-zoo keeps ``env_wrapper``,
``frame_stack`` and ``env_kwargs`` beside each env's row.

Each family (:mod:`pbx.envs.families`) names one settings class, which its module defines beside its builder
(ProcGen's levels in :mod:`pbx.envs.procgen`, Atari's wrappers in :mod:`pbx.envs.atari`, gymnasium's
``env_kwargs`` in :mod:`pbx.envs.gym`). A run records its env's settings in ``config.yaml``'s ``env_settings``
section, fixed for the run; a member's settings hold only what its agent trains with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pbx.errors import UsageError


@dataclass(frozen=True)
class EnvSettings:
    """The settings of a family's envs; a subclass adds its fields, each checked as the settings are made."""

    @classmethod
    def defaults(cls, env: str) -> dict[str, Any]:
        """The defaults of ``env`` where they depend on the id (an Atari id's own sticky actions), above the
        fields' own."""
        return {}


def check_whole(name: str, value: int, low: int, high: int, meaning: str = "") -> None:
    """Raise :class:`UsageError` unless ``value`` is a whole number from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"{name} must be an integer from {low:,} to {high:,}{meaning}, got {value!r}")
