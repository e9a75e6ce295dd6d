"""What every SB3 agent's settings share: the env and test settings, one table of valid values, the checks.

A member's settings hold every value it trains with; the hyperparameters among them
(``hyperparameters``, SB3's names) are those a search space may change while the agent
trains. :data:`DOMAINS` maps each setting of any agent to its valid values, so one table
validates settings, search spaces and configs alike; an agent's settings class adds its
fields (PPO's in :mod:`pbx.members.ppo.settings`, the others' beside their member) and a
subclass (DrAC's) adds rows of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Mapping, Optional

from pbx.errors import UsageError
from pbx.members.base import MemberSettings
from pbx.space import Categorical, Continuous, Integer, Space

Domain = tuple[Callable[[Any], bool], str]
"""A setting's validity test and how an error message names its valid values."""


def positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def non_negative_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _flag(v: Any) -> bool:
    return isinstance(v, bool)


MAX_ENVS = 2**16
"""The most envs a member steps together or tests on, and the widest layer of its MLP (65,536): past it a value is a
typo (``n_envs=1e6``) that would exhaust memory as the member is built, after the run folder is written."""
MAX_COUNT = 10_000_000
"""The largest count of one update pbx takes: steps per env of a rollout or between updates, passes over a
rollout, gradient steps per update, a minibatch (larger ones would never end a round)."""


def up_to(limit: int, test: Callable[[Any], bool] = positive_int) -> Callable[[Any], bool]:
    """``test`` and at most ``limit``."""
    return lambda v: test(v) and v <= limit


DOMAINS: dict[str, Domain] = {
    "n_envs": (up_to(MAX_ENVS), f"a positive integer up to {MAX_ENVS:,}"),
    "learning_rate": (lambda v: finite_number(v) and v > 0, "a number above 0"),
    "gamma": (lambda v: finite_number(v) and 0 < v <= 1, "in (0, 1]"),
    "normalize_reward": (_flag, "true or false"),
    "normalize_gamma": (lambda v: v is None or (finite_number(v) and 0 < v <= 1), "in (0, 1], or None (gamma)"),
    "normalize_obs": (_flag, "true or false"),
    "net_arch": (lambda v: v is None or (isinstance(v, list) and len(v) > 0 and all(up_to(MAX_ENVS)(n) for n in v)),
                 f"a list of positive layer sizes up to {MAX_ENVS:,} such as [32, 32], or null (the agent's SB3 "
                 f"default)"),
    "eval_episodes": (up_to(MAX_ENVS, non_negative_int), f"an integer from 0 to {MAX_ENVS:,} (0: no evaluation)"),
    "eval_n_envs": (lambda v: v is None or up_to(MAX_ENVS)(v), f"a positive integer up to {MAX_ENVS:,}, or None"),
    "eval_deterministic": (lambda v: v is None or isinstance(v, bool), "true, false or null (the agent's own)"),
    "eval_max_steps": (positive_int, "a positive integer"),
    "deterministic": (_flag, "true or false"),
    # on-policy agents (PPO, A2C)
    "n_steps": (up_to(MAX_COUNT), f"a positive integer up to {MAX_COUNT:,}"),
    "gae_lambda": (lambda v: finite_number(v) and 0 <= v <= 1, "in [0, 1]"),
    "ent_coef": (lambda v: finite_number(v) and v >= 0, "a number >= 0"),
    "vf_coef": (lambda v: finite_number(v) and v >= 0, "a number >= 0"),
    "max_grad_norm": (lambda v: finite_number(v) and v > 0, "a number above 0"),
    # off-policy agents (SAC, TD3, DQN)
    "batch_size": (lambda v: up_to(MAX_COUNT)(v) and v > 1, f"an integer from 2 to {MAX_COUNT:,}"),
    "buffer_size": (positive_int, "a positive integer"),
    "learning_starts": (non_negative_int, "an integer >= 0"),
    "tau": (lambda v: finite_number(v) and 0 <= v <= 1, "in [0, 1]"),
    "train_freq": (up_to(MAX_COUNT), f"a positive integer up to {MAX_COUNT:,} (env steps per env between updates)"),
    "gradient_steps": (lambda v: up_to(MAX_COUNT)(v) or v == -1,
                       f"a positive integer up to {MAX_COUNT:,}, or -1 (one per env step)"),
    "copy_buffer": (_flag, "true or false"),
    "optimize_memory_usage": (_flag, "true or false"),
}
"""Every agent's settings by name (an agent's settings class reads the rows of its own fields)."""


@dataclass
class SB3Settings(MemberSettings):
    """The settings every SB3 agent has: its envs, their normalisation, its network and its test episodes.

    An agent's settings class adds its own fields and redeclares a shared one whose default differs
    (SB3's own defaults differ by algorithm: A2C's learning rate is not SAC's).
    """

    agent: ClassVar[str] = "SB3"
    """The algorithm's name in messages (``"PPO"``)."""
    hyperparameters: ClassVar[tuple[str, ...]] = ()
    """Settings a search space may explore: the member's ``apply`` changes them while the agent trains."""
    integers: ClassVar[tuple[str, ...]] = ()
    """The hyperparameters that are whole numbers (a search space gives them as integers or choices)."""
    domains: ClassVar[Mapping[str, Domain]] = DOMAINS
    """Each setting's valid values and how an error message names them (a subclass adds its own settings)."""

    n_envs: int = 1
    """Envs stepped together; it sizes the agent's buffers, so it cannot change while training."""
    learning_rate: float = 3e-4
    """The optimizers' step size."""
    gamma: float = 0.99
    """Discount factor (also the reward normaliser's, unless ``normalize_gamma`` says otherwise)."""
    normalize_reward: bool = False
    """Scale rewards by a running std of discounted returns (``VecNormalize(norm_reward=True)``)."""
    normalize_gamma: Optional[float] = None
    """The discount of the returns whose running std scales the rewards; None: ``gamma``, as rl-zoo and
    CleanRL set it, so a searched gamma moves it too."""
    normalize_obs: bool = False
    """Normalise observations by their running mean and std (``VecNormalize(norm_obs=True)``, RLlib's
    ``MeanStdFilter``); the statistics are part of the learner: saved in the checkpoint, copied with the weights
    on an exploit, frozen when testing. Not for images."""
    net_arch: Optional[list[int]] = None
    """The MLP's hidden layers (SB3's ``net_arch``); None: the agent's SB3 default."""
    eval_episodes: int = 10
    """Finished test episodes averaged by the member's ``evaluate``; 0 turns evaluation off."""
    eval_deterministic: Optional[bool] = None
    """Whether test episodes take the policy's most likely action (true) or sample it (false); null: the agent's
    own, as SB3 and rl-zoo evaluate it (SAC, TD3 and DQN deterministic; PPO and A2C sampled). Set it to compare
    agents of both kinds under one policy."""
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
            raise UsageError(f"{cls.agent} has no hyperparameter {', '.join(map(repr, unknown))} to search over; "
                             f"it can change {', '.join(cls.hyperparameters)} while training "
                             f"(n_envs sizes the vector env: set it with -m instead)")

    def check_searched(self, names: list[str]) -> None:
        """:meth:`check_names`, and raise :class:`UsageError` for a hyperparameter these settings do not use."""
        self.check_names(names)

    def check_space(self, space: Space) -> None:
        """Raise :class:`UsageError` for a search space these settings cannot train with: a hyperparameter they
        do not use, a bound or choice outside its domain, an integer range holding an invalid whole number, an
        integer as a continuous range."""
        self.check_searched(space.names)
        for name, param in space.params.items():
            if isinstance(param, Continuous):
                if name in self.integers and not isinstance(param, Integer):
                    raise UsageError(f"{name} is an integer: make it {{type: integer, low: ..., high: ...}} or "
                                     f"categorical in the search space")
                values: tuple[Any, ...] = (param.clip(param.low), param.clip(param.high))  # ints for Integer
            else:
                assert isinstance(param, Categorical)
                values = param.choices
            for value in values:
                try:
                    self.check(name, value)
                except UsageError as err:
                    raise UsageError(f"search space: {err}") from None
            if isinstance(param, Integer):
                self._check_whole_range(name, param)

    @classmethod
    def _check_whole_range(cls, name: str, param: Integer) -> None:
        """Raise :class:`UsageError` for a whole number inside an integer range that is not a valid value.

        A member may be handed any of them, not only the ends: a draw, PB2's rounded pick or PBT's step lands
        anywhere in the range. Valid ends do not make a valid range where the domain has a hole (gradient_steps:
        -1 or a positive number, never 0): [-1, 8] would pass at its ends, and the member that first draws 0
        would kill the run, and its every resume, mid-way. Each whole number is checked (a million take about a
        second; searched integers span far fewer).
        """
        valid, expected = cls.domains[name]
        low, high = int(param.low), int(param.high)
        bad = next((value for value in range(low + 1, high) if not valid(value)), None)
        if bad is not None:
            raise UsageError(f"search space: {name} must be {expected}, got {bad}, which its range [{low}, {high}] "
                             f"holds (a member may draw or explore to any whole number of it): give the values as "
                             f"categorical choices instead")
