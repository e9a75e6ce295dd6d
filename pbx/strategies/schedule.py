"""``--search replay``: train with a stored hyperparameter schedule, as Ray Tune's PBT replay does.

PBT and PB2 find a schedule, not a config (Ray issues #7307, #9178). Ray's
``PopulationBasedTrainingReplay`` (PR #9953) reads one trial's lineage of config
changes and trains a single fresh trial with them, switching config at the first
result whose training iteration reaches a change point, with no weights copied.
Here the schedule is a strategy setting, so a replay is an ordinary run (its
``config.yaml`` holds the schedule; ``--resume`` works as for any run):
``python -m pbx.replay`` reads it off a member's lineage (:mod:`pbx.schedule`).

Each change point ``{steps: S, config: {...}}`` says the config holds from env
step ``S`` on. Every member starts with the config at step 0; after each round it
takes the config of the last change point at or before its step count. A replay
with the original run's ``t_ready`` switches exactly where the lineage did; with
another ``t_ready`` a switch waits for the first round boundary at or after its
step, as Ray's does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pbx.errors import UsageError
from pbx.history import History
from pbx.space import Categorical, Config, Integer, Space, shown
from pbx.strategies.base import Decision, Strategy, StrategySettings


@dataclass
class ScheduleSettings(StrategySettings):
    schedule: list[dict[str, Any]] = field(default_factory=list)
    """Change points ``{steps: S, config: {name: value, ...}}``, by increasing ``steps``, the first at 0:
    the config every member trains with from env step ``S`` on."""

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, list):
            raise UsageError(f"schedule must be a list of {{steps, config}} change points, got {self.schedule!r}")
        last = -1
        for i, point in enumerate(self.schedule):
            if not isinstance(point, dict) or set(point) != {"steps", "config"} \
                    or not isinstance(point["config"], dict):
                raise UsageError(f"schedule entry {i} must be a mapping {{steps: S, config: {{...}}}}, got {point!r}")
            steps = point["steps"]
            if not isinstance(steps, int) or isinstance(steps, bool) or steps <= last:
                raise UsageError(f"schedule entry {i}: steps must be an integer above the previous entry's "
                                 f"({last}), got {steps!r}")
            last = steps
        if self.schedule and self.schedule[0]["steps"] != 0:
            raise UsageError(f"the schedule's first entry must be at steps 0 (the starting config), "
                             f"got {self.schedule[0]['steps']}")

    def config_at(self, steps: int) -> Config | None:
        """The config in force at env step ``steps``: that of the last change point at or before it (None with
        no schedule, which a run refuses: :meth:`Schedule.validate`)."""
        return next((dict(p["config"]) for p in reversed(self.schedule) if p["steps"] <= steps), None)


class Schedule(Strategy[ScheduleSettings]):
    name = "replay"
    settings_cls = ScheduleSettings

    @classmethod
    def validate(cls, settings: ScheduleSettings, space: Space) -> None:
        if not settings.schedule:
            raise UsageError("--search replay needs a schedule (strategy.schedule): python -m pbx.replay RUN_DIR "
                             "--member M writes a run that has one")
        for point in settings.schedule:
            config, where = point["config"], f"schedule entry at steps {point['steps']}"
            if set(config) != set(space.names):
                raise UsageError(f"{where}: sets {sorted(config)}, but the search space holds {space.names}")
            for name, param in space.params.items():
                value = config[name]
                if isinstance(param, Categorical):
                    ok = value in param.choices
                else:
                    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                        and param.low <= value <= param.high \
                        and (not isinstance(param, Integer) or float(value).is_integer())
                if not ok:
                    raise UsageError(f"{where}: {name}={value!r} is outside the search space ({param})")

    def initial_configs(self, space: Space, pop_size: int, rng: np.random.Generator) -> list[Config]:
        start = self.settings.config_at(0)
        assert start is not None  # validate() refuses a run without a schedule
        return [dict(start) for _ in range(pop_size)]

    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        """Each member takes the config in force at its step count (its own, without a change point yet); a
        change is an explore without a copy."""
        decisions = []
        for _, row in history.latest().iterrows():
            member, current = int(row["member"]), history.config_of(row)
            new = self.settings.config_at(int(row["steps"])) or current
            ops = tuple(f"{name} -> {shown(new[name], 4)}" for name in space.names if new[name] != current[name])
            decisions.append(Decision(member, member, new, ops, explored=bool(ops)))
        return decisions
