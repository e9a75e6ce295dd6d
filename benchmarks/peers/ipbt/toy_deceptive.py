"""PBT-Zoo's ToyDeceptive as a pbx member, for running pbx's BG-PBT and IPBT beside the authors' code.

ToyDeceptive (Chebykin et al., TMLR 2025, Sec. 5.2; ``AwesomeLemon/PBT-Zoo``
``task/toy_deceptive.py`` at ``229479f``): ToyPlain's weight and score, but each
round appends its ``lr`` to a history that travels with the checkpoint, and the
round's rate is ``max(2 - lr - 0.2 * sum_i |lr_i - (t_max - i * t_step) / t_max|, 0)``
over that history (``t_step`` the round's own length: the reference's rule, also
when IPBT has lengthened its rounds). A small ``lr`` trains fast now and pays later:
the schedule that follows the falling target is the optimum. pbx's own
``toy-deceptive`` departs from it (its penalty counts a stretch in proportion to
its length, and its score is taken after the last step); this member computes
what the reference computes:

- the score of a round is ``1.2 - theta^2`` *before* the round's last step (the
  reference's curve records the objective, then steps);
- the step is the reference's in float32 (``-2.0 * max(...)`` in float64, then
  times the float32 theta, ``theta += 0.001 * grad``); the penalty's sum is NumPy's
  over the history, as the reference's ``np.sum``;
- the first population's ``lr`` is ``U(0.9, 1.1)`` from the member's seed (the
  reference's ``init_sample``; ``-m init=space`` takes the strategy's draw);
- IPBT's restart re-makes theta (theta0 0.9, or shrink-perturb in float32) and
  keeps the history, as the reference's restart touches ``model_state_dict`` only.

``check_against_torch`` compares it with the reference's code, inlined, to the bit.

    .venv/bin/python benchmarks/peers/ipbt/toy_deceptive.py --env toy-deceptive-zoo --search IPBT --seed 0 \\
        --batchsize 8 --t_ready 10 --max_budget 1000 --run-dir /tmp/toy-deceptive-ipbt
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
from pbx.space import Config, Space

SPACE = Path(__file__).with_name("toy_plain_space.yaml")  # PBT-Zoo's toydeceptive space is ToyPlain's: lr on [1e-4, 1.1]
THETA0 = np.float32(0.9)
INIT_RANGE = (0.9, 1.1)
PENALTY = 0.2
"""The reference's ``penalty_mul``."""
F32 = np.float32


@dataclass
class ToyDeceptiveSettings(MemberSettings):
    t_max: int = 1000
    """The reference task's ``t_max`` (its ``algo.t_max``, the run's budget): where the target reaches 0."""
    init: str = "reference"
    """``reference``: the first population's ``lr`` uniform in [0.9, 1.1] from the member's seed; ``space``: as the
    strategy draws it."""

    def __post_init__(self) -> None:
        if self.init not in ("reference", "space"):
            raise UsageError(f"init must be 'reference' or 'space', got {self.init!r}")
        if self.t_max < 1:
            raise UsageError(f"t_max must be a positive number of env steps, got {self.t_max}")


def penalty(history: list[float], t_step: int, t_max: int) -> float:
    """The reference's ``penalty_mul * sum_diff`` for a round of ``t_step`` steps after ``history``'s lrs."""
    diffs = [abs(v - (t_max - i * t_step) / t_max) for i, v in enumerate(history)]
    return PENALTY * np.sum(diffs).item()


def stretch(theta: np.float32, rate: float, steps: int) -> tuple[np.float32, list[float]]:
    """``steps`` of the reference's loop at ``rate`` (``max(2 - lr - penalty, 0)``): the new theta, and the
    objective recorded before each step."""
    coef = F32(-2.0 * rate)
    curve = []
    for _ in range(steps):
        curve.append(float(F32(1.2) - theta * theta))
        theta = F32(theta + F32(0.001) * F32(coef * theta))
    return theta, curve


class ToyDeceptiveMember(Member):
    settings_cls = ToyDeceptiveSettings
    default_space = str(SPACE)
    settings: ToyDeceptiveSettings
    resets_weights = True

    @classmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        return {"t_ready": 10, "max_budget": 1000}

    @classmethod
    def describe(cls, settings: MemberSettings) -> str:
        return "ToyDeceptive (PBT-Zoo)"

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        if space.names != ["lr"] or space.continuous != ["lr"]:
            raise UsageError(f"ToyDeceptive's search space must hold one continuous lr, got {space.names}")

    @classmethod
    def prior(cls, settings: ToyDeceptiveSettings, space: Space) -> Space:  # type: ignore[override]
        # a restart's configs "from the prior" are the first population's draw, as the reference's init_sample
        return space if settings.init == "space" else space.with_uniform("lr", *INIT_RANGE)

    def __init__(self, context: MemberContext, settings: ToyDeceptiveSettings, config: Config) -> None:
        super().__init__(context, settings, config)
        self.theta = THETA0
        self.history: list[float] = []
        self._curve: list[tuple[int, float]] = []
        if settings.init == "reference":
            config = {"lr": float(np.random.default_rng(context.seed).uniform(*INIT_RANGE))}
        self.apply(config)

    @property
    def config(self) -> Config:
        return {"lr": self.lr}

    def train(self, steps: int) -> float:
        self.history.append(self.lr)
        rate = max(2 - self.lr - penalty(self.history, steps, self.settings.t_max), 0)
        self.theta, objs = stretch(self.theta, rate, steps)
        self._curve = [(self.steps + k + 1, v) for k, v in enumerate(objs)]
        self.steps += steps
        return objs[-1]

    def curve(self) -> list[tuple[int, float]]:
        return list(self._curve)

    def evaluate(self, seed: int) -> float:
        return float(F32(1.2) - self.theta * self.theta)

    def score_state(self, seed: int) -> float:
        # the reference's eval-only call before a generation's first round (``only_evaluate``, ``t_step`` 0: the
        # objective of theta as it is); without it BG-PBT's and IPBT's first explore has no interval and perturbs
        return self.evaluate(seed)

    def apply(self, config: Config) -> None:
        self.lr = float(config["lr"])

    def reset_weights(self, kind: str, seed: int, shrink: float = 1.0, perturb: float = 0.0) -> None:
        self.theta = THETA0 if kind == "reinit" else F32(F32(shrink) * self.theta + F32(perturb) * THETA0)

    def save(self, path: Path) -> None:
        state = {"theta": float(self.theta), "lr": self.lr, "steps": self.steps, "history": self.history}
        durable_write(path, lambda tmp: tmp.write_text(json.dumps(state)))

    def load(self, path: Path, *, own: bool) -> None:
        # The member is its theta, lr history, lr and step count: own and donor files restore the same things.
        try:
            state = json.loads(Path(path).read_text())
            theta, lr, steps = F32(state["theta"]), float(state["lr"]), int(state["steps"])
            history = [float(v) for v in state["history"]]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{path}: unreadable ToyDeceptive checkpoint ({type(err).__name__}: {err})") from None
        self.theta, self.lr, self.steps, self.history = theta, lr, steps, history


def check_against_torch(trials: int = 2_000, seed: int = 0) -> int:
    """Random schedules (rounds of random lr and length) on which this member's scores differ from PBT-Zoo's
    ToyDeceptive's ``_eval`` written in torch (the reference's code, inlined): 0 when they agree to the bit."""
    import torch

    rng = np.random.default_rng(seed)
    differ = 0
    for _ in range(trials):
        member = ToyDeceptiveMember(MemberContext("toy-deceptive-zoo", 0, 0), ToyDeceptiveSettings(init="space"),
                                    {"lr": 1.0})
        theta_ref, history = torch.tensor([0.9]), []
        for _ in range(int(rng.integers(1, 12))):
            lr, t_step = float(rng.uniform(1e-4, 1.1)), int(rng.choice([5, 10, 20]))
            history.append(lr)
            diffs = [abs(v - (1000 - i * t_step) / 1000) for i, v in enumerate(history)]
            pen = 0.2 * np.sum(diffs).item()
            for _ in range(t_step):
                obj = (1.2 - torch.sum(theta_ref ** 2)).item()
                theta_ref += 0.001 * (-2.0 * max(2 - history[-1] - pen, 0) * theta_ref)
            member.apply({"lr": lr})
            differ += member.train(t_step) != obj
    return differ


register(ToyDeceptiveMember, "toy-deceptive-zoo")

if __name__ == "__main__":
    from pbx.train import main

    sys.exit(main())
