"""PPO with DrAC's augmentation regulariser, as a population member.

Raileanu et al. (2021), "Automatic Data Augmentation for Generalization in Deep
Reinforcement Learning": PPO's loss gains ``aug_coef * (G_pi + G_V)`` on each
minibatch, with ``G_V = 1/2 (V(s) - V(aug(s)))^2`` and ``G_pi`` the divergence of
the policy on the augmented observation from the policy on the original, the
original's side held fixed (detached), so the augmentation teaches invariance
without PPO's own targets seeing augmented data. The PB2-Mix paper (Parker-Holder
et al., 2021) tunes ``aug_type`` (categorical) and ``aug_coef`` on the fly; both
are run-time hyperparameters here, applied like PPO's own by :meth:`DrACMember.apply`.
The term is added to PPO's loss, either value loss (:mod:`pbx.members.ppo.update`); the
PB2-Mix code's PPO is the reference's, its value clipped with the clip range.

The augmentation's random draws come from a CPU ``torch.Generator`` of the member's
own (:mod:`pbx.members.ppo.augment`), not from torch's global generator that
:class:`~pbx.members.ppo.ppo.PPOMember` swaps in: SB3's action sampling and minibatch
order stay exactly where plain PPO has them (DrAC with ``aug_coef`` 0 trains bit for
bit as PPO). On the CPU whatever the training device, its state is the same kind of
state everywhere, so ``--resume`` on another device continues the stream; the draws,
a few numbers per image, are moved to the observations' device. The generator's state
is part of the checkpoint; an exploit keeps the recipient's own, like its other random
streams.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import torch
import torch.nn.functional as F

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import check_env  # isort: skip
from pbx.envs.families import PROCGEN  # isort: skip
from stable_baselines3.common.type_aliases import RolloutBufferSamples

from pbx.errors import UsageError
from pbx.members.base import MemberContext
from pbx.members.ppo.augment import AUGMENTATIONS
from pbx.members.ppo.ppo import DEFAULTS, PPOMember
from pbx.members.ppo.settings import PPOSettings, finite_number
from pbx.members.ppo.update import Evaluate, PPOUpdate
from pbx.space import Config


@dataclass
class DrACSettings(PPOSettings):
    """PPO's settings and DrAC's two, which a search space may explore like PPO's."""

    hyperparameters: ClassVar[tuple[str, ...]] = PPOSettings.hyperparameters + ("aug_type", "aug_coef")
    domains: ClassVar[Mapping[str, tuple[Callable[[Any], bool], str]]] = {
        **PPOSettings.domains,
        "aug_type": (lambda v: v in AUGMENTATIONS, f"one of {', '.join(AUGMENTATIONS)}"),
        "aug_coef": (lambda v: finite_number(v) and v >= 0, "a number >= 0"),
    }

    aug_type: str = "crop"
    """The augmentation (see :mod:`pbx.members.ppo.augment`); DrAC's best single choice on most games is crop."""
    aug_coef: float = 0.1
    """Weight of the regulariser G_pi + G_V in the loss (DrAC's default); 0 trains plain PPO."""


def drac_terms(logits: torch.Tensor, values: torch.Tensor, aug_logits: torch.Tensor,
               aug_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G_pi, G_V)`` for a minibatch: the policy's and the value's change under augmentation.

    ``G_pi`` is the exact KL(pi(.|s) || pi(.|aug s)) of the categorical action
    distributions, averaged over the minibatch. DrAC's code instead samples one action
    a ~ pi(.|s) per observation and uses -log pi(a|aug s), an unbiased one-sample estimate
    of the same gradient; with a discrete action space the exact sum over actions costs one
    softmax more and no forward pass, and removes that sampling noise. ``G_V`` is
    1/2 (V(s) - V(aug s))^2, averaged. The original observation's side is detached.

    Args:
        logits, values: the policy's action logits (batch, actions) and values (batch, 1) on s.
        aug_logits, aug_values: the same on aug(s).
    """
    log_p = F.log_softmax(logits.detach(), dim=-1)
    log_q = F.log_softmax(aug_logits, dim=-1)
    g_pi = (log_p.exp() * (log_p - log_q)).sum(dim=-1).mean()
    g_v = 0.5 * (values.detach() - aug_values).pow(2).mean()
    return g_pi, g_v


class DrACPPO(PPOUpdate):
    """PPO (:class:`~pbx.members.ppo.update.PPOUpdate`, either value loss) whose update adds
    ``aug_coef * (G_pi + G_V)`` to each minibatch's loss.

    ``aug_type``, ``aug_coef`` and ``augment_rng`` are read at every minibatch, so values set
    between updates hold from the next one.
    """

    def __init__(self, *args: Any, aug_type: str = DrACSettings.aug_type, aug_coef: float = DrACSettings.aug_coef,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aug_type = aug_type
        self.aug_coef = aug_coef
        self.augment_rng = torch.Generator()
        """Draws every augmentation's random parameters, on the CPU whatever the training device (see
        :mod:`pbx.members.ppo.augment`), so its state means the same on every device and a run resumes on
        another one with the same stream."""
        self._logits: list[torch.Tensor] = []

    def extends_update(self) -> bool:
        return True

    def minibatch_loss(self, samples: RolloutBufferSamples, actions: torch.Tensor, values: torch.Tensor,
                       evaluate: Evaluate, log: dict[str, list[float]]) -> torch.Tensor | None:
        """PPO's own terms (:meth:`PPOUpdate.minibatch_loss`) plus ``aug_coef * (G_pi + G_V)``.

        The minibatch arrives as the rollout buffer holds it (ProcGen: uint8 pixels, 0-255); it
        is augmented as float32 on that scale, before the policy's preprocessing divides by 255,
        which accepts floats as well. Float keeps DrAC's arithmetic: its random convolution is
        not clipped to the pixel range, and colours are not rounded to 256 levels. A forward hook
        on the action head (set by :meth:`train`) picks up the logits SB3 computed on the
        original observations, so they cost no extra pass.
        """
        loss = super().minibatch_loss(samples, actions, values, evaluate, log)
        high = float(np.max(self.observation_space.high))
        augmented = AUGMENTATIONS[self.aug_type](samples.observations.float(), high, self.augment_rng)
        aug_values, _, _ = evaluate(augmented, actions)
        original_logits, aug_logits = self._logits  # the action head's outputs on obs, then on its augmented copy
        self._logits.clear()
        g_pi, g_v = drac_terms(original_logits, values[:, None], aug_logits, aug_values)
        log["train/drac_policy_loss"].append(g_pi.item())
        log["train/drac_value_loss"].append(g_v.item())
        term = self.aug_coef * (g_pi + g_v)
        return term if loss is None else loss + term

    def train(self) -> None:
        """:meth:`PPOUpdate.train` with DrAC's term, the action head's logits picked up by a forward hook."""
        self._logits.clear()
        hook = self.policy.action_net.register_forward_hook(lambda module, inputs, output: self._logits.append(output))
        try:
            super().train()
        finally:
            hook.remove()
        self.logger.record("train/aug_coef", self.aug_coef)


class DrACMember(PPOMember):
    """PPO with DrAC's regulariser on a ProcGen game; ``aug_type`` and ``aug_coef`` change at run time."""

    settings_cls = DrACSettings
    default_space = "ppo_procgen_mix.yaml"
    settings: DrACSettings
    model: DrACPPO
    algorithm = DrACPPO
    name = "DrAC-PPO"
    # PPO's ProcGen settings and schedule, with PB2-Mix's space (its categorical hyperparameter is the augmentation)
    defaults = {PROCGEN.name: replace(DEFAULTS[PROCGEN.name], space="ppo_procgen_mix.yaml")}
    checkpoint_keys = PPOMember.checkpoint_keys + ("augment_rng",)

    @classmethod
    def check_env(cls, env: str) -> None:
        """Raise :class:`UsageError` unless ``env`` is of a family DrAC has defaults for (ProcGen's): it augments
        RGB images."""
        check_env(env)
        if not cls.has_defaults(env):
            raise UsageError(f"augmentation (aug_type, aug_coef) needs image observations: use a ProcGen game "
                             f"as --env, not {env!r}")

    def __init__(self, context: MemberContext, settings: DrACSettings, config: Config) -> None:
        super().__init__(context, settings, config)
        # a stream of its own, apart from the member's seed for torch's global generator
        self.model.augment_rng.manual_seed(int(np.random.SeedSequence(context.seed, spawn_key=(1,)).generate_state(
            1, np.uint64)[0]))

    def apply(self, config: Config) -> None:
        """PPO's hyperparameters as :meth:`PPOMember.apply` sets them; the augmentation's read at each minibatch."""
        super().apply(config)
        hp = self._hyperparameters()
        self.model.aug_type = hp["aug_type"]
        self.model.aug_coef = hp["aug_coef"]

    def _checkpoint(self) -> dict[str, Any]:
        return {**super()._checkpoint(), "augment_rng": self.model.augment_rng.get_state()}

    def _restore_world(self, state: dict[str, Any], path: Path) -> None:
        """PPO's envs and random streams, and the augmentation stream; refuses one this pbx cannot continue.

        The generator is a CPU one on every device, so a run resumes on another device with the same
        draws. A checkpoint of a pbx that kept it on the GPU holds a CUDA generator's state (seed and
        Philox offset, not a CPU generator's Mersenne Twister), which no CPU generator can continue.
        """
        rng = state["augment_rng"]
        expected = self.model.augment_rng.get_state()
        if not isinstance(rng, torch.Tensor) or rng.dtype != expected.dtype or rng.shape != expected.shape:
            size = f"{rng.numel()} bytes" if isinstance(rng, torch.Tensor) else type(rng).__name__
            raise UsageError(f"{path}: its augmentation stream is not a CPU generator's ({size}, not "
                             f"{expected.numel()}): a pbx that drew DrAC's augmentations on the GPU wrote it, and this "
                             f"one cannot continue that stream; resume with the pbx that wrote the run, or start anew")
        super()._restore_world(state, path)
        self.model.augment_rng.set_state(rng)
