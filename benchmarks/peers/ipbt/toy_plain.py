"""PBT-Zoo's ToyPlain as a pbx member, for running pbx's BG-PBT and IPBT beside the authors' code.

ToyPlain (Chebykin et al., TMLR 2025, Sec. 5.2; ``AwesomeLemon/PBT-Zoo``
``task/toy_plain.py``): one weight theta starts at 0.9, one step is
``theta <- theta - 0.002 (2 - lr) theta``, the score is ``1.2 - theta^2``. A smaller
``lr`` trains faster, so the greedy schedule (``lr`` at its lower bound at once) is
the best one; the toy asks only how fast a strategy gets there.

The member computes what the reference task computes, in float32 as its torch
tensors do: ``2 - lr`` and the step in float32 (``lr`` rounded to float32 first,
as ``torch.Tensor(solution)`` does), and the round's score is ``1.2 - theta^2``
after the round's last step, the reference's ``fitness`` to the bit (checked
against the reference task on 10,000 random stretches, see ``check_against_torch``).

Initial configs: the reference draws the first population's ``lr`` from
``U(0.9, 1.1)`` (its ``init_sample``), not from the space's ``U(1e-4, 1.1)``. pbx's
strategies draw initial configs from the space's prior, and a space file can only
say uniform (or log-uniform) on its bounds, so the member draws its own start, as
pbx's deceptive toy does (``init: reference``, the default here): each member of
the first population takes ``lr ~ U(0.9, 1.1)`` from its own seed. What pbx's
public extension points cannot express: the configs IPBT draws "from the prior"
at a restart (half of the candidates) come from ``U(1e-4, 1.1)`` in pbx, where the
reference draws them from ``U(0.9, 1.1)`` too. ``-m init=space`` takes the strategy's
draws everywhere.

``toy-plain-noisy`` (the same member, ``noise`` :data:`NOISE` by default): every score the strategy sees (a
round's score and the score of a state, ``score_state``) carries Gaussian observation noise of that standard
deviation, drawn from the member's seed, its steps and the call; the test score (``evaluate``) stays the noise-free
``1.2 - theta^2``, which the side-by-side reads. Noise makes a generation's best stall once the true gain of a round
falls below it (BG-PBT's restart rule, which counts a flat plateau as progress, then fires), and keeps a generation's
round bests from being equal (the authors' IPBT smoother stops on an all-equal generation).

    .venv/bin/python benchmarks/peers/ipbt/toy_plain.py --env toy-plain --search IPBT --seed 0 \\
        --batchsize 8 --t_ready 10 --max_budget 1000 --run-dir /tmp/toy-plain-ipbt
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

SPACE = Path(__file__).with_name("toy_plain_space.yaml")
THETA0 = np.float32(0.9)
"""The reference's fresh weight (``prepare_initial_ckpt``: ``torch.tensor([0.9])``, float32)."""
INIT_RANGE = (0.9, 1.1)
"""The reference's ``init_sample``: the first population's ``lr``."""
NOISE = 0.1
"""``toy-plain-noisy``'s observation noise (standard deviation on the score)."""
F32 = np.float32


@dataclass
class ToyPlainSettings(MemberSettings):
    init: str = "reference"
    """``reference``: the first population's ``lr`` uniform in [0.9, 1.1] from the member's seed (PBT-Zoo's
    ``init_sample``); ``space``: as the strategy draws it."""

    noise: float = 0.0
    """Standard deviation of the Gaussian observation noise on the scores the strategy sees (``toy-plain-noisy``:
    :data:`NOISE`); the test score stays noise-free."""

    def __post_init__(self) -> None:
        if self.init not in ("reference", "space"):
            raise UsageError(f"init must be 'reference' or 'space', got {self.init!r}")
        if not (isinstance(self.noise, (int, float)) and np.isfinite(self.noise) and self.noise >= 0):
            raise UsageError(f"noise must be a finite standard deviation >= 0, got {self.noise!r}")


def step(theta: np.float32, lr: np.float32) -> np.float32:
    """One step of the reference, operation by operation in float32: ``grad = -2.0 * (2 - h) * theta``,
    ``theta += 0.001 * grad``."""
    grad = F32(-2.0) * (F32(2.0) - lr) * theta
    return F32(theta + F32(0.001) * grad)


def fitness(theta: np.float32) -> float:
    """The reference's ``1.2 - torch.sum(theta ** 2)`` in float32, as the Python float ``.item()`` gives."""
    return float(F32(F32(1.2) - theta * theta))


class ToyPlainMember(Member):
    settings_cls = ToyPlainSettings
    default_space = str(SPACE)
    settings: ToyPlainSettings
    resets_weights = True

    @classmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        return {"t_ready": 10, "max_budget": 1000}  # the side-by-side's: IPBT's 1% step, t_max 1000

    @classmethod
    def setting_defaults(cls, env: str) -> dict[str, object]:
        return {"noise": NOISE} if env == "toy-plain-noisy" else {}

    @classmethod
    def describe(cls, settings: MemberSettings) -> str:
        return "ToyPlain (PBT-Zoo)"

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        if space.names != ["lr"] or space.continuous != ["lr"]:
            raise UsageError(f"ToyPlain's search space must hold one continuous lr, got {space.names}")

    @classmethod
    def prior(cls, settings: ToyPlainSettings, space: Space) -> Space:  # type: ignore[override]
        # a restart's configs "from the prior" are the first population's draw, as the reference's init_sample
        return space if settings.init == "space" else space.with_uniform("lr", *INIT_RANGE)

    def __init__(self, context: MemberContext, settings: ToyPlainSettings, config: Config) -> None:
        super().__init__(context, settings, config)
        self.theta = THETA0
        self._curve: list[tuple[int, float]] = []
        if settings.init == "reference":
            config = {"lr": float(np.random.default_rng(context.seed).uniform(*INIT_RANGE))}
        self.apply(config)

    @property
    def config(self) -> Config:
        return {"lr": self.lr}

    def train(self, steps: int) -> float:
        lr = F32(self.lr)  # torch.Tensor(solution): the hyperparameter in float32
        self._curve = []
        for k in range(steps):
            self.theta = step(self.theta, lr)
            self._curve.append((self.steps + k + 1, fitness(self.theta)))
        self.steps += steps
        return self.observed(fitness(self.theta), 1)

    def observed(self, score: float, call: int) -> float:
        """``score`` as the strategy sees it: plus the setting's noise, drawn from the member's seed, its steps and
        ``call`` (1: a round's score, 0: a state's), so a resume sees the same draws."""
        if not self.settings.noise:
            return score
        rng = np.random.default_rng([self.context.seed, self.steps, call, int(np.float32(self.lr).view(np.uint32))])
        return score + float(rng.normal(0.0, self.settings.noise))

    def curve(self) -> list[tuple[int, float]]:
        return list(self._curve)

    def score_state(self, seed: int) -> float:
        # the reference's eval-only call before a generation's first round (``only_evaluate``): the fitness of
        # theta as it is; without it BG-PBT's and IPBT's first explore has no interval and perturbs as PBT
        return self.observed(fitness(self.theta), 0)

    def evaluate(self, seed: int) -> float:
        return fitness(self.theta)  # the reference's val and test are the fitness itself

    def apply(self, config: Config) -> None:
        self.lr = float(config["lr"])

    def reset_weights(self, kind: str, seed: int, shrink: float = 1.0, perturb: float = 0.0) -> None:
        # The reference's fresh model is theta0 whatever the seed; shrink-perturb in float32 as its tensors
        self.theta = THETA0 if kind == "reinit" else F32(F32(shrink) * self.theta + F32(perturb) * THETA0)

    def save(self, path: Path) -> None:
        state = {"theta": float(self.theta), "lr": self.lr, "steps": self.steps}
        durable_write(path, lambda tmp: tmp.write_text(json.dumps(state)))

    def load(self, path: Path, *, own: bool) -> None:
        # The member is its theta, lr and step count: own and donor files restore the same things.
        try:
            state = json.loads(Path(path).read_text())
            theta, lr, steps = F32(state["theta"]), float(state["lr"]), int(state["steps"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{path}: unreadable ToyPlain checkpoint ({type(err).__name__}: {err})") from None
        self.theta, self.lr, self.steps = theta, lr, steps


def check_against_torch(trials: int = 10_000, seed: int = 0) -> int:
    """Stretches of random length and ``lr`` on which this member's score differs from PBT-Zoo's ToyPlain
    written in torch (the reference's code, inlined): 0 when the two agree to the bit."""
    import torch

    rng = np.random.default_rng(seed)
    differ = 0
    for _ in range(trials):
        lr, steps, start = float(rng.uniform(1e-4, 1.1)), int(rng.integers(1, 200)), F32(rng.uniform(0.0, 0.9))
        theta_ref, h = torch.Tensor([float(start)]), torch.Tensor([lr])
        for _ in range(steps):
            theta_ref += 0.001 * (-2.0 * (2 - h) * theta_ref)
        ref = (1.2 - torch.sum(theta_ref ** 2)).item()
        theta = start
        for _ in range(steps):
            theta = step(theta, F32(lr))
        differ += fitness(theta) != ref
    return differ


register(ToyPlainMember, "toy-plain", "toy-plain-noisy")

if __name__ == "__main__":
    from pbx.train import main

    sys.exit(main())
