"""The PPO member's settings: the ProcGen paper's PPO by default, each value checked where it comes in.

:class:`PPOSettings` holds every setting of :class:`~pbx.members.ppo.PPOMember`; the
hyperparameters among them (``PPOSettings.hyperparameters``) a search space may change while
the agent trains. ``domains`` maps each setting to its valid values, so one table validates
settings, search spaces and configs alike, and a subclass (DrAC's) adds its own rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Mapping, Optional

from pbx.envs import DISTRIBUTION_MODES
from pbx.errors import UsageError
from pbx.members.base import MemberSettings
from pbx.members.update import VALUE_LOSSES

INTEGER_HYPERPARAMETERS = ("n_epochs", "batch_size")
_TIED = ("{} has no effect with value_loss: reference, which clips the value with clip_range as the "
         "reference PPO does; use value_loss: sb3 for SB3's own value clipping")


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _non_negative_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_DOMAINS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n_envs": (_positive_int, "a positive integer"),
    "n_steps": (_positive_int, "a positive integer"),
    "batch_size": (lambda v: _positive_int(v) and v > 1, "an integer above 1"),
    "n_epochs": (_positive_int, "a positive integer"),
    "gamma": (lambda v: _finite_number(v) and 0 < v <= 1, "in (0, 1]"),
    "gae_lambda": (lambda v: _finite_number(v) and 0 <= v <= 1, "in [0, 1]"),
    "learning_rate": (lambda v: _finite_number(v) and v > 0, "a number above 0"),
    "ent_coef": (lambda v: _finite_number(v) and v >= 0, "a number >= 0"),
    "clip_range": (lambda v: _finite_number(v) and v > 0, "a number above 0"),
    "clip_range_vf": (lambda v: v is None or (_finite_number(v) and v > 0), "a number above 0 or None"),
    "vf_coef": (lambda v: _finite_number(v) and v >= 0, "a number >= 0"),
    "max_grad_norm": (lambda v: _finite_number(v) and v > 0, "a number above 0"),
    "normalize_reward": (lambda v: isinstance(v, bool), "true or false"),
    "num_levels": (_non_negative_int, "an integer >= 0"),
    "start_level": (_non_negative_int, "an integer >= 0"),
    "distribution_mode": (lambda v: v in DISTRIBUTION_MODES, f"one of {', '.join(DISTRIBUTION_MODES)}"),
    "eval_episodes": (_non_negative_int, "an integer >= 0 (0: no evaluation)"),
    "eval_max_steps": (_positive_int, "a positive integer"),
    "deterministic": (lambda v: isinstance(v, bool), "true or false"),
    "eval_n_envs": (lambda v: v is None or _positive_int(v), "a positive integer or None"),
    "value_loss": (lambda v: v in VALUE_LOSSES, f"one of {', '.join(VALUE_LOSSES)}"),
}


@dataclass
class PPOSettings(MemberSettings):
    """PPO and env settings; fixed for the run unless the search space names them (see ``hyperparameters``)."""

    hyperparameters: ClassVar[tuple[str, ...]] = (
        "learning_rate", "clip_range", "clip_range_vf", "ent_coef", "vf_coef", "max_grad_norm", "gamma",
        "gae_lambda", "n_epochs", "batch_size")
    """Settings a search space may explore: :meth:`PPOMember.apply` changes them while the agent trains."""
    domains: ClassVar[Mapping[str, tuple[Callable[[Any], bool], str]]] = _DOMAINS
    """Each setting's valid values and how an error message names them (a subclass adds its own settings)."""

    n_envs: int = 64
    """Envs stepped together; with n_steps it sizes the rollout buffer, so it cannot change while training."""
    n_steps: int = 256
    """Steps per env per rollout; one rollout is n_envs * n_steps env steps."""
    batch_size: int = 2048
    """Minibatch size in samples; must divide n_envs * n_steps (the paper's 8 minibatches = 2048)."""
    n_epochs: int = 3
    """Passes over each rollout."""
    gamma: float = 0.999
    """Discount factor (also the reward normaliser's)."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    learning_rate: float = 5e-4
    """Adam step size."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    clip_range: float = 0.2
    """PPO policy clip range; with ``value_loss: reference`` also the value's."""
    clip_range_vf: Optional[float] = 0.2
    """Value clip range of SB3's value loss (``value_loss: sb3``); None turns its value clipping off. The
    reference loss clips the value with ``clip_range``, so with it this stays at its default."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    value_loss: str = "reference"
    """``reference``: the value loss of the ProcGen paper's PPO (baselines ``ppo2``, train-procgen, auto-drac),
    ``0.5 * max`` of the unclipped and the clipped squared error, clipped with ``clip_range``; ``sb3``: SB3's,
    the clipped squared error clipped with ``clip_range_vf``, twice the weight (:mod:`pbx.members.update`).
    The default on gymnasium ids is ``sb3`` (:meth:`PPOMember.setting_defaults`)."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    normalize_reward: bool = True
    """Scale rewards by a running std of discounted returns (``VecNormalize(norm_obs=False)``)."""
    num_levels: int = 200
    """ProcGen training levels (0 = unrestricted); the test env always uses the unrestricted distribution."""
    start_level: int = 0
    """First ProcGen training level seed."""
    distribution_mode: str = "easy"
    """ProcGen difficulty, for the train and the test env."""
    eval_episodes: int = 100
    """Finished test episodes averaged by :meth:`PPOMember.evaluate`; 0 turns evaluation off."""
    eval_n_envs: Optional[int] = None
    """Envs in the test env; None = one per episode (all episodes at once, no bias to short ones)."""
    eval_max_steps: int = 100_000
    """Cap on a test run's vector steps, so an env without a time limit cannot hang the run; a test run
    that reaches it before ``eval_episodes`` episodes finish scores NaN, with a warning."""
    deterministic: bool = False
    """Make GPU training reproducible (cuDNN and cuBLAS deterministic kernels), at their cost in speed.

    Without it, runs and resumes reproduce bit for bit only on the CPU with the same
    thread count (all cores, shared among local MPI ranks): GPU kernels may sum in
    any order. With it, torch refuses nondeterministic kernels and cuBLAS gets a
    fixed workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8``, set before CUDA starts).
    """

    def __post_init__(self) -> None:
        for f in fields(self):
            self.check(f.name, getattr(self, f.name))
        default_vf = next(f.default for f in fields(self) if f.name == "clip_range_vf")
        if self.value_loss == "reference" and self.clip_range_vf != default_vf:
            raise UsageError(_TIED.format(f"clip_range_vf={self.clip_range_vf}"))
        rollout = self.n_envs * self.n_steps
        if rollout % self.batch_size:
            raise UsageError(f"batch_size {self.batch_size} does not divide n_envs * n_steps = {rollout}; "
                             f"use a divisor such as {max(rollout // 8, 2)} (8 minibatches)")

    @classmethod
    def check(cls, name: str, value: Any) -> None:
        """Raise :class:`UsageError` unless ``value`` is a valid value of the setting ``name``."""
        valid, expected = cls.domains[name]
        if not valid(value):
            raise UsageError(f"{name} must be {expected}, got {value!r}")

    @classmethod
    def check_names(cls, names: list[str]) -> None:
        """Raise :class:`UsageError` unless every name is a hyperparameter a search may change."""
        unknown = [n for n in names if n not in cls.hyperparameters]
        if unknown:
            raise UsageError(f"PPO has no hyperparameter {', '.join(map(repr, unknown))} to search over; "
                             f"it can change {', '.join(cls.hyperparameters)} while training "
                             f"(n_envs and n_steps size the rollout buffer: set them with -m instead)")

    def check_searched(self, names: list[str]) -> None:
        """:meth:`check_names`, and raise :class:`UsageError` for a hyperparameter these settings do not use."""
        self.check_names(names)
        if self.value_loss == "reference" and "clip_range_vf" in names:
            raise UsageError(_TIED.format("changing clip_range_vf"))
