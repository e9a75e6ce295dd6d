"""The deceptive toy (Chebykin et al., TMLR 2025, Sec. 5.2; PBT-Zoo's ``task/toy_deceptive.py``).

One weight theta starts at 0.9; the score is Q(theta) = 1.2 - theta^2. One step is
gradient ascent with step size 0.001 at rate max(2 - h - penalty, 0), so a small
hyperparameter h trains faster *now*. The penalty is 0.2 times the summed distance
between the h each stretch of 20 steps ran with and a target that falls linearly
from 1 at step 0 to 0 at ``horizon``; it travels with the weights (a copy inherits
the donor's record). The schedule that tracks the target pays no penalty and ends
at Q = 1.198; the greedy one, h at its lower bound at once, leads every early round
and stalls near step 200 at Q = 0.83 as its penalty eats the rate. Greedy selection
drives a population there: the toy shows whether a strategy can see past the next
round. Microseconds per step.

Members start near the target's start, h drawn uniformly from [0.9, 1.1] with the
member's own seed (PBT-Zoo's start; ``init: space`` takes the strategy's draw
instead). IPBT's restart re-makes theta (``reset_weights``: theta0, or shrink * theta + perturb * theta0)
and keeps the distance record. Where pbx departs: the penalty counts each stretch in proportion to its
length over 20 steps (PBT-Zoo adds one term per interval of its ``t_step``, 20 on this
toy), so ``t_ready`` does not change the problem, and the score is Q after the
stretch's last step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.members.base import Member, MemberContext, MemberSettings
from pbx.space import Config, Space

THETA0 = 0.9
STEP_SIZE = 0.001
PENALTY = 0.2
"""Weight of the summed distance from the target schedule (PBT-Zoo's ``penalty_mul``)."""
PENALTY_STEPS = 20
"""The stretch one distance term stands for (PBT-Zoo's ``t_step`` on this toy)."""
INIT_RANGE = (0.9, 1.1)


@dataclass
class DeceptiveToySettings(MemberSettings):
    horizon: int = 1000
    """Env step where the target schedule of h reaches 0 (PBT-Zoo's ``t_max``; the default run's budget)."""
    init: str = "near"
    """``near``: start h uniformly in [0.9, 1.1] with the member's seed (PBT-Zoo's); ``space``: as the strategy
    draws it."""

    def __post_init__(self) -> None:
        if self.horizon < 1:
            raise UsageError(f"horizon must be a positive number of env steps, got {self.horizon}")
        if self.init not in ("near", "space"):
            raise UsageError(f"init must be 'near' or 'space', got {self.init!r}")


def target(steps: int, horizon: int) -> float:
    """The h of the optimal schedule at env step ``steps``: 1 falling linearly to 0 at ``horizon``."""
    return max(0.0, 1.0 - steps / horizon)


class DeceptiveToyMember(Member):
    settings_cls = DeceptiveToySettings
    default_space = "toy_deceptive.yaml"
    settings: DeceptiveToySettings

    @classmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        return {"t_ready": 20, "max_budget": 1000}  # PBT-Zoo's: 50 rounds of 20 steps

    @classmethod
    def describe(cls, settings: MemberSettings) -> str:
        return "deceptive toy"

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        if space.names != ["h"] or space.continuous != ["h"]:
            raise UsageError(f"the deceptive toy's search space must hold one continuous h, got {space.names}")

    @classmethod
    def prior(cls, settings: DeceptiveToySettings, space: Space) -> Space:  # type: ignore[override]
        # a restart's configs "from the prior" are the first population's draw, as the reference's init_sample
        return space if settings.init == "space" else space.with_uniform("h", *INIT_RANGE)

    def __init__(self, context: MemberContext, settings: DeceptiveToySettings, config: Config) -> None:
        super().__init__(context, settings, config)
        self.theta = THETA0
        self.distance = 0.0
        """Summed distance of the h trained with from the target, in stretches of PENALTY_STEPS."""
        self._curve: list[tuple[int, float]] = []
        """Q after each step of the last train call (PBT-Zoo's curve: one point per step)."""
        if settings.init == "near":
            config = {"h": float(np.random.default_rng(context.seed).uniform(*INIT_RANGE))}
        self.apply(config)

    @property
    def config(self) -> Config:
        return {"h": self.h}

    def train(self, steps: int) -> float:
        self.distance += abs(self.h - target(self.steps, self.settings.horizon)) * steps / PENALTY_STEPS
        rate = max(2.0 - self.h - PENALTY * self.distance, 0.0)
        factor = 1.0 - STEP_SIZE * 2.0 * rate  # d Q / d theta = -2 theta, at that rate
        self._curve = [(self.steps + k, 1.2 - (self.theta * factor**k) ** 2) for k in range(1, steps + 1)]
        self.theta *= factor**steps
        self.steps += steps
        return self.evaluate(0)

    def curve(self) -> list[tuple[int, float]]:
        return list(self._curve)

    def score_state(self, seed: int) -> float:
        return self.evaluate(seed)  # what train scores: Q of theta

    def evaluate(self, seed: int) -> float:
        return 1.2 - self.theta**2  # no held-out conditions: the test score is Q itself

    def apply(self, config: Config) -> None:
        self.h = float(config["h"])

    resets_weights = True

    def reset_weights(self, kind: str, seed: int, shrink: float = 1.0, perturb: float = 0.0, *,
                      clear_optimizer: bool = False) -> None:
        # The fresh learner is theta0 whatever the seed, and there is no optimizer state. The distance record
        # stays: it is the schedule the member has run (PBT-Zoo's lr_history, kept in the checkpoint beside
        # the weights that a restart re-makes).
        self.theta = THETA0 if kind == "reinit" else shrink * self.theta + perturb * THETA0

    def save(self, path: Path) -> None:
        state = {"theta": self.theta, "distance": self.distance, "h": self.h, "steps": self.steps}
        durable_write(path, lambda tmp: tmp.write_text(json.dumps(state)))

    def load(self, path: Path, *, own: bool) -> None:
        # The member is its theta, its distance record, h and step count: own and donor files restore the same.
        try:
            state = json.loads(Path(path).read_text())
            theta, distance, h, steps = (float(state["theta"]), float(state["distance"]), float(state["h"]),
                                         int(state["steps"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{path}: unreadable deceptive-toy checkpoint ({type(err).__name__}: {err})") from None
        self.theta, self.distance, self.h, self.steps = theta, distance, h, steps
