"""SB3's PPO update with the reference value loss, and room for more loss terms per minibatch.

The PPO that the ProcGen and PB2 papers ran (OpenAI baselines' ``ppo2``, which
train-procgen runs, and auto-drac's PyTorch port, which the PB2-Mix code runs)
has a value loss unlike SB3's:

- reference: ``0.5 * mean(max((V - R)^2, (V_clipped - R)^2))`` with
  ``V_clipped = V_old + clip(V - V_old, -eps, eps)``, ``eps`` the policy's own
  ``clip_range``, weighted by ``vf_coef`` (0.5);
- SB3: ``mean((V_clipped - R)^2)`` (no max, no 0.5), ``eps`` its own
  ``clip_range_vf``, weighted by ``vf_coef``: twice the weight, and a value that
  moves past the clip range in the direction that lowers the error still gets a
  gradient the reference's max would have taken away.

:class:`PPOUpdate` trains with either (``value_loss``) and keeps SB3's own
``PPO.train`` loop: no copy of its hundred lines to keep in step with SB3's
releases. For the length of an update it watches two calls SB3 makes once per
minibatch: the rollout buffer's ``get`` (to know the minibatch's old values and
returns) and the policy's ``evaluate_actions`` on the minibatch's observations.
The values it returns are detached, so SB3's value term carries no gradient,
and :meth:`PPOUpdate.minibatch_loss` (the reference value loss here; DrAC adds
its regulariser in :mod:`pbx.members.ppo.drac`) is tied to the log-probabilities it
returns (:class:`AlsoDifferentiate`), so SB3's ``loss.backward()`` takes its
gradient with the policy's, before gradient clipping. ``tests/test_ppo.py`` and
``tests/test_drac.py`` check the gradient SB3 applies against autograd of the
loss written out by hand.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3 import PPO
from stable_baselines3.common.type_aliases import RolloutBufferSamples

from pbx.members.ppo.rollout import DirectRollout

VALUE_LOSSES = ("reference", "sb3")
"""``value_loss`` settings: the reference's (baselines ``ppo2``) or SB3's own."""

Evaluate = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]
"""The policy's ``evaluate_actions``: (observations, actions) -> (values, log-probabilities, entropy)."""


class AlsoDifferentiate(torch.autograd.Function):
    """Identity on ``x`` whose backward also sends gradient 1 into the scalar ``extra``.

    A loss built from the output then back-propagates as if ``extra`` had been added to it:
    one ``loss.backward()`` in SB3's own update differentiates ``loss + extra``.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, grad.new_ones(())


def reference_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                         clip_range: float) -> torch.Tensor:
    """``0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -clip_range, clip_range) - R)^2))``.

    Args:
        values: V, the value head on the minibatch now, (batch,).
        old_values: V_old, the values stored with the rollout, (batch,).
        returns: R, the rollout's TD(lambda) returns, (batch,).
        clip_range: how far V may move from V_old before the clipped error takes over.
    """
    clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    return 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2).mean()


@contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` is ``value`` inside the block; afterwards exactly what it was (an instance attribute a
    caller set, such as a test's spy, stays)."""
    own = vars(owner)
    had, before = name in own, own.get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, before)
        else:
            delattr(owner, name)


class PPOUpdate(DirectRollout, PPO):
    """SB3's PPO whose update uses ``value_loss`` (``"reference"`` or ``"sb3"``) and :meth:`minibatch_loss`, on the
    rollout of :mod:`pbx.members.ppo.rollout` (SB3's numbers, without its per-step copies).

    ``value_loss``, ``clip_range`` and ``vf_coef`` are read at every update, so values set
    between updates (a PBT or PB2 explore) hold from the next one; the reference value loss
    clips with ``clip_range``, so the two stay tied. With ``"sb3"`` and no extra term
    (plain PPO) the update is SB3's, untouched.
    """

    def __init__(self, *args: Any, value_loss: str = "sb3", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.value_loss = value_loss

    def minibatch_loss(self, samples: RolloutBufferSamples, actions: torch.Tensor, values: torch.Tensor,
                       evaluate: Evaluate, log: dict[str, list[float]]) -> torch.Tensor | None:
        """What this update adds to SB3's loss on one minibatch (None: nothing), called once per minibatch.

        Args:
            samples: the minibatch as the rollout buffer gave it to SB3.
            actions: its actions as SB3 evaluates them (long, flat, for discrete actions).
            values: the value head's output on ``samples.observations``, (batch,), with its gradient.
            evaluate: the policy's own ``evaluate_actions``, for more forward passes.
            log: lists of numbers to log; each list's mean is recorded under its key after the update.
        """
        if self.value_loss != "reference":
            return None
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        loss = reference_value_loss(values, samples.old_values, samples.returns, clip_range)
        log["train/value_loss"].append(loss.item())
        return self.vf_coef * loss

    def extends_update(self) -> bool:
        """Whether :meth:`minibatch_loss` adds anything (else SB3's update runs alone)."""
        return self.value_loss == "reference"

    def train(self) -> None:
        """SB3's ``PPO.train``, with :meth:`minibatch_loss` in each minibatch's loss (see the module docstring)."""
        if not self.extends_update():
            super().train()
            return
        get, evaluate = self.rollout_buffer.get, self.policy.evaluate_actions
        drawn: list[RolloutBufferSamples] = []
        log: dict[str, list[float]] = defaultdict(list)
        last = {"sb3_value": 0.0, "extra": 0.0}
        reference = self.value_loss == "reference"

        def get_and_keep(batch_size: int | None = None) -> Iterator[RolloutBufferSamples]:
            for samples in get(batch_size):
                drawn[:] = [samples]
                yield samples

        def evaluate_and_add(obs: torch.Tensor,
                             actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
            values, log_prob, entropy = evaluate(obs, actions)
            if not drawn or drawn[0].observations is not obs:
                raise RuntimeError("SB3's PPO.train no longer evaluates the minibatch it draws from the rollout "
                                   "buffer; pbx's loss terms (value_loss: reference, DrAC) need updating for it")
            samples = drawn[0]
            flat = values.flatten()
            extra = self.minibatch_loss(samples, actions, flat, evaluate, log)
            assert extra is not None  # extends_update() said so
            if reference:
                # SB3 still computes its value loss (for its log); without a gradient it trains nothing
                values = values.detach()
                last["sb3_value"] = self.vf_coef * F.mse_loss(samples.returns, flat.detach()).item()
            last["extra"] = extra.item()
            return values, AlsoDifferentiate.apply(log_prob, extra), entropy

        with _replaced(self.rollout_buffer, "get", get_and_keep), \
                _replaced(self.policy, "evaluate_actions", evaluate_and_add):
            super().train()
        for key, values in log.items():
            self.logger.record(key, float(np.mean(values)))
        # SB3's train/loss is its own sum on the last minibatch: the loss really minimised replaces it
        self.logger.record("train/loss", self.logger.name_to_value["train/loss"] - last["sb3_value"] + last["extra"])

