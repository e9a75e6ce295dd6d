"""The toy problem of the PBT paper (Jaderberg et al., 2017, Fig. 2).

theta starts at (0.9, 0.9); the true objective is Q(theta) = 1.2 - (theta0^2 + theta1^2).
A member cannot see Q: one step is gradient ascent with step size 0.01 on the
surrogate Qhat(theta | h) = 1.2 - (h0 theta0^2 + h1 theta1^2), so its
hyperparameters h = (h0, h1) in [0, 1] decide which coordinates it optimises.
A member with h = (1, 0) alone never gets past Q = 1.2 - 0.81; copying theta
between members with different h gets to the optimum. Microseconds per step:
for tests and strategy research.

``--env toy-cat`` adds one categorical hyperparameter, ``optimiser``, which
scales the step size (:data:`OPTIMISERS`): ``adam`` is clearly best, ``rmsprop``
clearly worst, so categorical strategies (``--cat_exp``) compare in seconds. Its
default budget is half the toy's, 100 steps, where the optimiser still shows in the
final score: with h = (1, 1) throughout, Q ends at 1.1715 with sgd, 1.1963 with
momentum and 1.2000 with adam.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.members.base import Member, MemberContext, MemberSettings
from pbx.space import Categorical, Config, Space

THETA0 = (0.9, 0.9)
STEP_SIZE = 0.01
PAPER_INIT = ((1.0, 0.0), (0.0, 1.0))
TOY_ENVS = ("toy", "toy-cat")
OPTIMISERS = {"sgd": 1.0, "momentum": 1.5, "rmsprop": 0.5, "adam": 3.0}
"""toy-cat's ``optimiser`` choices and the factor each puts on the step size."""


@dataclass
class ToySettings(MemberSettings):
    init: str = "space"
    """``space``: start h as the strategy says (drawn from the space); ``paper``: members alternate
    h = (1, 0) and (0, 1) as in the paper's figure."""

    def __post_init__(self) -> None:
        if self.init not in ("space", "paper"):
            raise UsageError(f"init must be 'space' or 'paper', got {self.init!r}")


def true_objective(theta: np.ndarray) -> float:
    return float(1.2 - np.sum(theta**2))


class ToyMember(Member):
    settings_cls = ToySettings
    default_space = "toy.yaml"
    settings: ToySettings

    @classmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        # the paper's figure: 200 steps, exploit every 4; toy-cat: 100, where the optimiser still shows
        return {"t_ready": 4, "max_budget": 100 if env == "toy-cat" else 200}

    @classmethod
    def space_file(cls, env: str) -> str:
        return "toy_cat.yaml" if env == "toy-cat" else cls.default_space

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        if set(space.names) - {"optimiser"} != {"h0", "h1"}:
            raise UsageError(f"the toy member's search space must hold h0 and h1 (and optionally optimiser), "
                             f"got {space.names}")
        param = space.params.get("optimiser")
        if param is not None and not (isinstance(param, Categorical) and set(param.choices) <= set(OPTIMISERS)):
            raise UsageError(f"the toy's optimiser must be categorical with choices among {', '.join(OPTIMISERS)}, "
                             f"got {param}")

    def __init__(self, context: MemberContext, settings: ToySettings, config: Config) -> None:
        super().__init__(context, settings, config)
        self.theta = np.array(THETA0, dtype=float)
        self._curve: list[tuple[int, float]] = []
        """Q after each step of the last train call."""
        if settings.init == "paper":
            h0, h1 = PAPER_INIT[context.index % 2]
            config = {**config, "h0": h0, "h1": h1}
        self.apply(config)

    @property
    def config(self) -> Config:
        config: Config = {"h0": float(self.h[0]), "h1": float(self.h[1])}
        if self.optimiser is not None:
            config["optimiser"] = self.optimiser
        return config

    def train(self, steps: int) -> float:
        step = STEP_SIZE * OPTIMISERS.get(self.optimiser or "sgd", 1.0)
        self._curve = []
        for k in range(steps):
            # d Qhat / d theta = -2 h theta
            self.theta = self.theta - step * 2.0 * self.h * self.theta
            self._curve.append((self.steps + k + 1, true_objective(self.theta)))
        self.steps += steps
        return true_objective(self.theta)

    def curve(self) -> list[tuple[int, float]]:
        return list(self._curve)

    def score_state(self, seed: int) -> float:
        return true_objective(self.theta)  # what train scores: Q of theta

    def evaluate(self, seed: int) -> float:
        return true_objective(self.theta)  # the toy has no held-out conditions: its test score is Q itself

    def apply(self, config: Config) -> None:
        self.h = np.array([float(config["h0"]), float(config["h1"])])
        self.optimiser = str(config["optimiser"]) if "optimiser" in config else None

    resets_weights = True

    def reset_weights(self, kind: str, seed: int, shrink: float = 1.0, perturb: float = 0.0, *,
                      clear_optimizer: bool = False) -> None:
        # The toy's fresh learner is always theta0: no randomness to draw, and no optimizer state.
        fresh = np.array(THETA0, dtype=float)
        self.theta = fresh if kind == "reinit" else shrink * self.theta + perturb * fresh

    def save(self, path: Path) -> None:
        state = {"theta": self.theta.tolist(), "h": self.h.tolist(), "optimiser": self.optimiser, "steps": self.steps}
        durable_write(path, lambda tmp: tmp.write_text(json.dumps(state)))

    def load(self, path: Path, *, own: bool) -> None:
        # A toy member is its theta, h and step count, so own and donor files restore the same things.
        try:
            state = json.loads(Path(path).read_text())
            theta, h, steps = np.array(state["theta"], dtype=float), np.array(state["h"], dtype=float), int(state["steps"])
            optimiser = state.get("optimiser")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{path}: unreadable toy checkpoint ({type(err).__name__}: {err})") from None
        if theta.shape != (2,) or h.shape != (2,):
            raise UsageError(f"{path}: unreadable toy checkpoint (theta {theta.shape}, h {h.shape}, expected 2 values)")
        self.theta, self.h, self.steps, self.optimiser = theta, h, steps, optimiser
