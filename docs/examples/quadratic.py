"""A worked example of a new member (docs/add-a-member.md): SGD on a noisy quadratic.

The learner is one number ``x`` following noisy gradients of f(x) = -(x - 3)^2;
its one hyperparameter is the step size ``lr``. Too small and it never gets
there, too large and the noise keeps it away: a schedule (large, then small)
wins, which is what population-based training finds. The member is this file:
settings, a search space, and the seven methods of :class:`~pbx.members.Member`.

    python docs/examples/quadratic.py --env quadratic --search PBT --seed 0
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.members import Member, MemberContext, MemberSettings, register
from pbx.space import Config

SPACE = Path(__file__).with_name("quadratic_space.yaml")


@dataclass
class QuadraticSettings(MemberSettings):
    noise: float = 1.0
    """Standard deviation of the gradient noise."""


class Quadratic(Member):
    settings_cls = QuadraticSettings
    default_space = str(SPACE)  # a path works wherever a file under pbx/search_spaces/ does
    settings: QuadraticSettings

    @classmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        return {"t_ready": 10, "max_budget": 200}

    def __init__(self, context: MemberContext, settings: QuadraticSettings, config: Config) -> None:
        super().__init__(context, settings, config)
        self.x = 0.0
        self.rng = np.random.default_rng(context.seed)  # the member's own stream: its seed is derived per member
        self.apply(config)

    @property
    def config(self) -> Config:
        return {"lr": self.lr}

    def train(self, steps: int) -> float:
        for _ in range(steps):
            gradient = -2.0 * (self.x - 3.0) + self.settings.noise * self.rng.standard_normal()
            self.x += self.lr * gradient
        self.steps += steps
        return -((self.x - 3.0) ** 2)

    def evaluate(self, seed: int) -> float:
        return -((self.x - 3.0) ** 2)  # no held-out conditions: the test score is f itself

    def apply(self, config: Config) -> None:
        self.lr = float(config["lr"])

    def save(self, path: Path) -> None:
        state = {"x": self.x, "lr": self.lr, "steps": self.steps, "rng": self.rng.bit_generator.state}
        durable_write(path, lambda tmp: tmp.write_text(json.dumps(state)))

    def load(self, path: Path, *, own: bool) -> None:
        try:
            state = json.loads(Path(path).read_text())
            self.x, self.lr, self.steps = float(state["x"]), float(state["lr"]), int(state["steps"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{path}: unreadable quadratic checkpoint ({type(err).__name__}: {err})") from None
        if own:  # a copy keeps its own noise stream, so it does not replay the donor's future
            self.rng.bit_generator.state = state["rng"]


register(Quadratic, "quadratic")

if __name__ == "__main__":
    from pbx.train import main

    sys.exit(main())
