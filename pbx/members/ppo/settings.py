"""The PPO member's settings: the ProcGen paper's PPO by default, each value checked where it comes in.

:class:`PPOSettings` holds every setting of :class:`~pbx.members.ppo.ppo.PPOMember`: the shared ones of
:class:`~pbx.members.sb3.settings.SB3Settings` at the ProcGen paper's values and PPO's own; the
hyperparameters among them (``PPOSettings.hyperparameters``) a search space may change while the agent
trains. ProcGen's levels are the env's settings, not the agent's (:class:`pbx.envs.ProcgenSettings`). The
table of valid values is :data:`~pbx.members.sb3.settings.DOMAINS`, with PPO's rows added here, so a
subclass (DrAC's) adds its own rows the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping, Optional

from pbx.errors import UsageError
from pbx.members.ppo.update import VALUE_LOSSES
from pbx.members.sb3.process import PRECISIONS
from pbx.members.sb3.settings import DOMAINS, Domain, SB3Settings, finite_number
from pbx.space import Categorical, Continuous, Space

__all__ = ["PPOSettings", "check_rollouts", "finite_number", "fit_rollout"]

_TIED = ("{} has no effect with value_loss: reference, which clips the value with clip_range as the "
         "reference PPO does; use value_loss: sb3 for SB3's own value clipping")

_DOMAINS: dict[str, Domain] = {
    **DOMAINS,
    "n_epochs": DOMAINS["n_steps"],
    "clip_range": (lambda v: finite_number(v) and v > 0, "a number above 0"),
    "clip_range_vf": (lambda v: v is None or (finite_number(v) and v > 0), "a number above 0 or None"),
    "value_loss": (lambda v: v in VALUE_LOSSES, f"one of {', '.join(VALUE_LOSSES)}"),
    "precision": (lambda v: v in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
    "channels_last": (lambda v: isinstance(v, bool), "true or false"),
}


@dataclass
class PPOSettings(SB3Settings):
    """PPO's settings; fixed for the run unless the search space names them (see ``hyperparameters``)."""

    agent: ClassVar[str] = "PPO"
    hyperparameters: ClassVar[tuple[str, ...]] = (
        "learning_rate", "clip_range", "clip_range_vf", "ent_coef", "vf_coef", "max_grad_norm", "gamma",
        "gae_lambda", "n_epochs", "batch_size", "n_steps")
    """Settings a search space may explore: :meth:`PPOMember.apply` changes them while the agent trains."""
    integers: ClassVar[tuple[str, ...]] = ("n_epochs", "batch_size", "n_steps")
    domains: ClassVar[Mapping[str, Domain]] = _DOMAINS
    """Each setting's valid values and how an error message names them (a subclass adds its own settings)."""

    n_envs: int = 64
    """Envs stepped together; with n_steps it sizes the rollout buffer, so it cannot change while training."""
    n_steps: int = 256
    """Steps per env per rollout; one rollout is n_envs * n_steps env steps. A search may change it between
    rounds (the PB2 paper searches the rollout size): the rollout buffer is rebuilt for the new length."""
    batch_size: int = 2048
    """Minibatch size in samples; must divide n_envs * n_steps (the paper's 8 minibatches = 2048)."""
    n_epochs: int = 3
    """Passes over each rollout."""
    gamma: float = 0.999
    """Discount factor."""
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
    the clipped squared error clipped with ``clip_range_vf``, twice the weight (:mod:`pbx.members.ppo.update`).
    The default on gymnasium ids is ``sb3`` (:meth:`PPOMember.setting_defaults`)."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    normalize_reward: bool = True
    """Scale rewards by a running std of discounted returns (``VecNormalize(norm_obs=False)``)."""
    normalize_gamma: Optional[float] = 0.99
    """The reward normaliser's discount: 0.99, as the ProcGen paper's PPO has it (train-procgen builds
    ``VecNormalize(venv, ob=False)`` and so keeps baselines' default of 0.99 beside PPO's gamma of 0.999;
    CleanRL's port uses 0.999 for both, and so did pbx before 2026-11-27). None: ``gamma``, as on gymnasium
    ids (:mod:`pbx.envs.families`)."""
    net_arch: Optional[list[int]] = None
    """The MLP policy's hidden layers, the same for the policy and the value network (SB3's ``net_arch``; the
    PB2 paper's PPO is [32, 32]); None: SB3's [64, 64]. ProcGen's IMPALA CNN has its own."""
    eval_episodes: int = 100
    """Finished test episodes averaged by :meth:`PPOMember.evaluate`; 0 turns evaluation off."""
    precision: str = "torch"
    """The network's arithmetic, in rollout inference and the update alike: ``torch`` (PyTorch's defaults:
    TF32 in cuDNN's convolutions on Ampere and later GPUs, float32 elsewhere), ``fp32`` (no TF32: train-procgen's
    arithmetic), ``tf32`` (TF32 in convolutions and matrix products), ``bf16`` (bf16 autocast in the IMPALA CNN,
    float32 heads, losses and optimizer). ``torch``, ``fp32`` and ``tf32`` set PyTorch's TF32 switches, which
    every network on a GPU follows (an MLP's matrix products too); ``bf16`` changes the IMPALA CNN itself, so an
    MLP or SB3's CNN refuses it. On a CPU, ``torch``, ``fp32`` and ``tf32`` are the same float32.
    ``deterministic: true`` trains in ``fp32`` and refuses ``tf32`` and ``bf16``."""
    channels_last: bool = False
    """The IMPALA CNN's weights and inputs in the channels-last memory format (faster convolutions on a GPU: 1.47x
    for the update on an H200, ``docs/gpu.md``); other float rounding than the default format's on CUDA, so
    ``deterministic: true`` refuses it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        default_vf = next(f.default for f in fields(self) if f.name == "clip_range_vf")
        if self.value_loss == "reference" and self.clip_range_vf != default_vf:
            raise UsageError(_TIED.format(f"clip_range_vf={self.clip_range_vf}"))
        asked = [f"precision={self.precision}"] * (self.precision in ("tf32", "bf16")) \
            + ["channels_last=true"] * self.channels_last
        if self.deterministic and asked:
            raise UsageError(f"deterministic=true trains in fp32 without TF32 in the default memory format, so "
                             f"{' and '.join(asked)} would be ignored: drop {'them' if len(asked) > 1 else 'it'} "
                             f"or deterministic=true")

    def image_network(self) -> dict[str, object]:
        """The IMPALA CNN's arguments for these settings (none at the defaults, so a default policy is built, saved
        and exported exactly as before the settings existed)."""
        kwargs: dict[str, object] = {}
        if self.precision == "bf16":
            kwargs["precision"] = self.precision
        if self.channels_last:
            kwargs["channels_last"] = True
        return kwargs

    def check_space(self, space: Space) -> None:
        """:meth:`SB3Settings.check_space`, and a minibatch size that divides no rollout (:func:`check_rollouts`)."""
        super().check_space(space)
        try:
            check_rollouts(space, self)
        except UsageError as err:
            raise UsageError(f"search space: {err}" if {"n_steps", "batch_size"} & set(space.names) else str(err)) \
                from None

    def check_searched(self, names: list[str]) -> None:
        """:meth:`check_names`, and raise :class:`UsageError` for a hyperparameter these settings do not use."""
        self.check_names(names)
        if self.value_loss == "reference" and "clip_range_vf" in names:
            raise UsageError(_TIED.format("changing clip_range_vf"))


def _values(space: Space, name: str, setting: int) -> list[int]:
    """The whole values ``name`` can take: the space's (choices, or every integer in its bounds), else the
    setting's one value."""
    param = space.params.get(name)
    if param is None:
        return [setting]
    if isinstance(param, Categorical):
        return [int(c) for c in param.choices]  # type: ignore[arg-type]
    return list(range(math.ceil(param.low), math.floor(param.high) + 1))


def check_rollouts(space: Space, settings: PPOSettings) -> None:
    """Raise :class:`UsageError` for a minibatch size that no rollout the space allows divides.

    SB3 collects ``n_envs * n_steps`` steps and splits them into minibatches of ``batch_size``; where both
    are fixed the minibatch must divide the rollout, and where the space searches either, every minibatch
    size it can pick must divide some rollout it can pick (:func:`fit_rollout` moves a pick to one).
    """
    n_envs = settings.n_envs
    lengths = _values(space, "n_steps", settings.n_steps)
    rollouts = {n_envs * n for n in lengths}
    fixed = len(lengths) == 1
    for batch in sorted(set(_values(space, "batch_size", settings.batch_size))):
        if any(rollout % batch == 0 for rollout in rollouts):
            continue
        if isinstance(space.params.get("batch_size"), Continuous):
            continue  # an integer range: fit_rollout moves a pick to a size that divides
        if fixed:
            rollout = next(iter(rollouts))
            raise UsageError(f"batch_size {batch} does not divide n_envs * n_steps = {rollout}; "
                             f"use a divisor such as {max(rollout // 8, 2)} (8 minibatches)")
        raise UsageError(f"batch_size {batch} divides no rollout the search space allows (n_envs {n_envs} x "
                         f"n_steps in [{min(lengths)}, {max(lengths)}]); use a batch_size that divides "
                         f"n_envs * n_steps for some n_steps there, such as {n_envs * min(lengths) // 4 or 2}")
    if isinstance(space.params.get("batch_size"), Continuous):
        batches = _values(space, "batch_size", settings.batch_size)
        if not any(rollout % b == 0 for rollout in rollouts for b in batches):
            raise UsageError(f"no batch_size in [{min(batches)}, {max(batches)}] divides a rollout the search space "
                             f"allows (n_envs {n_envs} x n_steps in [{min(lengths)}, {max(lengths)}])")


def fit_rollout(config: Mapping[str, Any], settings: PPOSettings, space: Space) -> tuple[dict[str, Any], list[str]]:
    """``config`` with a searched ``n_steps`` (else ``batch_size``) moved to the nearest value whose rollout the
    minibatch divides, and what was moved, as decision operations; ``config`` itself when it fits.

    A strategy picks each hyperparameter on its own, so a pick can break the constraint SB3 needs; it is
    repaired, never refused mid-run (:func:`check_rollouts` made sure a repair exists).
    """
    n_envs = settings.n_envs
    length = int(config.get("n_steps", settings.n_steps))
    batch = int(config.get("batch_size", settings.batch_size))
    if (n_envs * length) % batch == 0:
        return dict(config), []
    fixed = dict(config)
    lengths = [n for n in _values(space, "n_steps", length) if (n_envs * n) % batch == 0]
    if "n_steps" in space.params and lengths:
        fixed["n_steps"] = min(lengths, key=lambda n: (abs(n - length), n))
        return fixed, [f"n_steps {length} -> {fixed['n_steps']} (batch_size {batch} divides n_envs * n_steps)"]
    ops = []
    # The nearest rollout length (the pick's own first) that some minibatch size of the space divides.
    for n in sorted(_values(space, "n_steps", length), key=lambda n: (abs(n - length), n)):
        batches = [b for b in _values(space, "batch_size", batch) if (n_envs * n) % b == 0]
        if batches:
            break
    if n != length:
        fixed["n_steps"] = n
        ops.append(f"n_steps {length} -> {n} (no batch_size of the space divides n_envs * n_steps = "
                   f"{n_envs * length})")
    fixed["batch_size"] = min(batches, key=lambda b: (abs(b - batch), b))
    ops.append(f"batch_size {batch} -> {fixed['batch_size']} (it divides n_envs * n_steps = {n_envs * n})")
    return fixed, ops
