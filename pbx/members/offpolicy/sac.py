"""Soft Actor-Critic (Haarnoja et al., 2018) as a population member: SB3's SAC, rl-zoo's tuned defaults.

Run-time hyperparameters, SB3's names, and where SB3 reads them: ``learning_rate`` (the
actor's, the critics' and the entropy coefficient's optimizers, reset from ``lr_schedule``
at each update), ``gamma``, ``tau``, ``batch_size``, ``gradient_steps`` (read at each use)
and ``train_freq`` (a ``TrainFreq`` SB3 builds once). The entropy coefficient is learned
(``ent_coef: auto``) in ``log_ent_coef`` with an optimizer of its own: both are learner
state, saved and copied by an exploit with the weights and the target critics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs.families import BOX2D, CLASSIC, MUJOCO, OTHER  # isort: skip
from gymnasium import spaces
from stable_baselines3 import SAC

from pbx.members.offpolicy.member import OffPolicyMember, OffPolicyRun, OffPolicySettings
from pbx.members.sb3.agent import AgentDefaults
from pbx.members.sb3.settings import DOMAINS, Domain, finite_number


def _ent_coef(v: Any) -> bool:
    """``auto``, ``auto_<initial value>`` or a fixed positive number (SB3's forms)."""
    text = str(v)
    if text == "auto" or re.fullmatch(r"auto_\d*\.?\d+(e-?\d+)?", text):
        return True
    try:
        return finite_number(float(text)) and float(text) > 0
    except ValueError:
        return False


@dataclass
class SACSettings(OffPolicySettings):
    """SB3's SAC defaults; the hyperparameters a search may change are listed in ``hyperparameters``."""

    agent: ClassVar[str] = "SAC"
    hyperparameters: ClassVar[tuple[str, ...]] = (
        "learning_rate", "gamma", "tau", "batch_size", "train_freq", "gradient_steps")
    domains: ClassVar[Mapping[str, Domain]] = {
        **DOMAINS, "ent_coef": (_ent_coef, "auto, auto_<initial value> or a number above 0")}

    ent_coef: str = "auto"
    """The entropy coefficient: learned (``auto``, from 1; ``auto_0.1``, from 0.1) or fixed (a number)."""


class _SAC(OffPolicyRun, SAC):
    """SB3's SAC in pbx's off-policy loop (:class:`~pbx.members.offpolicy.member.OffPolicyRun`)."""


_CLASSIC = AgentDefaults("sac_classic.yaml", run={"t_ready": 2_000, "max_budget": 20_000})
"""rl-zoo's Pendulum-v1: SB3's defaults with lr 1e-3 (in the space), its budget (20,000 steps) in 10 rounds."""


class SACMember(OffPolicyMember):
    """SB3 SAC on a gymnasium id with continuous actions."""

    settings_cls = SACSettings
    settings: SACSettings
    default_space = "sac_classic.yaml"
    algorithm = _SAC
    algo = "sac"
    name = "SAC"
    action_spaces = (spaces.Box,)
    defaults = {
        CLASSIC.name: _CLASSIC,
        # rl-zoo's tuned BipedalWalker-v3 (less its gSDE exploration; lr, gamma and tau in the space)
        BOX2D.name: AgentDefaults("sac_box2d.yaml", {
            "buffer_size": 300_000, "batch_size": 256, "train_freq": 64, "gradient_steps": 64,
            "learning_starts": 10_000, "net_arch": [400, 300]}, {"t_ready": 50_000, "max_budget": 500_000}),
        # rl-zoo's MuJoCo defaults: SB3's SAC after 10,000 random steps
        MUJOCO.name: AgentDefaults("sac.yaml", {"learning_starts": 10_000}, {"t_ready": 50_000, "max_budget": 1_000_000}),
        # any other gymnasium id: classic control's
        OTHER.name: _CLASSIC,
    }

    def _build(self, hp: Mapping[str, Any], image: bool) -> _SAC:
        return _SAC(**self._algorithm_kwargs(hp, image), ent_coef=self.settings.ent_coef)
