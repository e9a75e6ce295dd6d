"""TD3 (Fujimoto et al., 2018) as a population member: SB3's TD3 with rl-zoo's Gaussian action noise.

Run-time hyperparameters, SB3's names, and where SB3 reads them: ``learning_rate`` (the
actor's and the critics' optimizers, reset from ``lr_schedule`` at each update), ``gamma``,
``tau``, ``batch_size``, ``gradient_steps``, ``policy_delay``, ``target_policy_noise``,
``target_noise_clip`` (read at each use), ``train_freq`` (a ``TrainFreq`` SB3 builds once)
and ``noise_std``, rl-zoo's name for the standard deviation of the ``NormalActionNoise``
added to the actor's actions (SB3 reads ``action_noise`` at each ``learn``; the noise draws
from NumPy's global generator, which is the member's own stream). The policy holds the
target actor and critics; an exploit copies them with the weights and both optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs.families import BOX2D, CLASSIC, MUJOCO, OTHER  # isort: skip
from gymnasium import spaces
from stable_baselines3 import TD3
from stable_baselines3.common.noise import NormalActionNoise

from pbx.members.offpolicy.member import OffPolicyMember, OffPolicyRun, OffPolicySettings
from pbx.members.sb3.agent import AgentDefaults
from pbx.members.sb3.settings import DOMAINS, Domain, finite_number, positive_int


@dataclass
class TD3Settings(OffPolicySettings):
    """SB3's TD3 defaults and rl-zoo's action noise; ``hyperparameters`` lists what a search may change."""

    agent: ClassVar[str] = "TD3"
    hyperparameters: ClassVar[tuple[str, ...]] = (
        "learning_rate", "gamma", "tau", "batch_size", "train_freq", "gradient_steps", "policy_delay",
        "target_policy_noise", "target_noise_clip", "noise_std")
    integers: ClassVar[tuple[str, ...]] = (*OffPolicySettings.integers, "policy_delay")
    domains: ClassVar[Mapping[str, Domain]] = {
        **DOMAINS,
        "policy_delay": (positive_int, "a positive integer"),
        "target_policy_noise": (lambda v: finite_number(v) and v >= 0, "a number >= 0"),
        "target_noise_clip": (lambda v: finite_number(v) and v >= 0, "a number >= 0"),
        "noise_std": (lambda v: finite_number(v) and v >= 0, "a number >= 0 (0: no action noise)")}

    learning_rate: float = 1e-3
    """The actor's and the critics' Adam step size."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_policy_noise: float = 0.2
    """Standard deviation of the noise on the target policy's actions (target policy smoothing)."""
    target_noise_clip: float = 0.5
    """Bound on that noise."""
    noise_std: float = 0.1
    """Standard deviation of the Gaussian exploration noise on actions scaled to [-1, 1] (rl-zoo's noise_std)."""


class _TD3(OffPolicyRun, TD3):
    """SB3's TD3 in pbx's off-policy loop (:class:`~pbx.members.offpolicy.member.OffPolicyRun`)."""


# rl-zoo's tuned TD3 for BipedalWalker-v3 and the PyBullet locomotion tasks (one setting for all), and for
# Pendulum: gamma 0.98 and lr 1e-3 (in the space), a 200,000-transition buffer after 10,000 random steps,
# [400, 300] networks. rl-zoo updates once per episode with one gradient step per env step; pbx counts
# train_freq in steps, so it updates every step (the TD3 paper's schedule: as many gradient steps).
_SETTINGS = {"buffer_size": 200_000, "learning_starts": 10_000, "net_arch": [400, 300]}


_CLASSIC = AgentDefaults("td3.yaml", _SETTINGS, {"t_ready": 2_000, "max_budget": 20_000})


class TD3Member(OffPolicyMember):
    """SB3 TD3 on a gymnasium id with continuous actions."""

    settings_cls = TD3Settings
    settings: TD3Settings
    default_space = "td3.yaml"
    algorithm = _TD3
    algo = "td3"
    name = "TD3"
    live = (*OffPolicyMember.live, "policy_delay", "target_policy_noise", "target_noise_clip")
    action_spaces = (spaces.Box,)
    defaults = {
        CLASSIC.name: _CLASSIC,
        BOX2D.name: AgentDefaults("td3.yaml", _SETTINGS, {"t_ready": 50_000, "max_budget": 1_000_000}),
        MUJOCO.name: AgentDefaults("td3.yaml", _SETTINGS, {"t_ready": 50_000, "max_budget": 1_000_000}),
        # any other gymnasium id: classic control's
        OTHER.name: _CLASSIC,
    }

    def _build(self, hp: Mapping[str, Any], image: bool) -> _TD3:
        return _TD3(**self._algorithm_kwargs(hp, image))

    def _set(self, hp: Mapping[str, Any]) -> None:
        super()._set(hp)
        dim = int(np.prod(self.model.action_space.shape))
        self.model.action_noise = (NormalActionNoise(np.zeros(dim), np.full(dim, hp["noise_std"]))
                                   if hp["noise_std"] > 0 else None)
