"""A2C (Mnih et al., 2016, synchronous) as a population member: SB3's A2C with rl-zoo's tuned defaults.

Run-time hyperparameters, SB3's names, and where SB3 reads them: ``learning_rate`` (the
RMSprop optimizer, reset from ``lr_schedule`` at each update), ``ent_coef``, ``vf_coef``,
``max_grad_norm`` (read at each update), ``gamma`` and ``gae_lambda`` (copied into the
rollout buffer, which computes the returns) and ``n_steps`` (which sizes the rollout
buffer: rebuilt between rounds, as PPO's). rl-zoo's linear learning-rate decay
(``lin_7e-4``) is a schedule a search replaces: its start value is the default here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs.families import ATARI, BOX2D, CLASSIC, MUJOCO, OTHER  # isort: skip
from stable_baselines3 import A2C

from pbx.members.sb3.agent import AgentDefaults
from pbx.members.sb3.member import SB3Member, set_rollout
from pbx.members.sb3.settings import SB3Settings


@dataclass
class A2CSettings(SB3Settings):
    """SB3's A2C defaults (RMSprop, no advantage normalisation); ``hyperparameters`` lists what a search may
    change."""

    agent: ClassVar[str] = "A2C"
    hyperparameters: ClassVar[tuple[str, ...]] = (
        "learning_rate", "n_steps", "gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm")
    integers: ClassVar[tuple[str, ...]] = ("n_steps",)

    n_envs: int = 8
    """Envs stepped together; with n_steps it sizes the rollout buffer, so it cannot change while training."""
    learning_rate: float = 7e-4
    """RMSprop step size."""
    n_steps: int = 5
    """Steps per env per update."""
    gae_lambda: float = 1.0
    """GAE lambda (1: plain n-step returns)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""


_CONTINUOUS_RUN = {"t_ready": 50_000, "max_budget": 1_000_000}
# rl-zoo's CartPole-v1: SB3's defaults in 8 envs, 500,000 steps
_CLASSIC = AgentDefaults("a2c.yaml", run={"t_ready": 50_000, "max_budget": 500_000})


class A2CMember(SB3Member):
    """SB3 A2C on a gymnasium id."""

    settings_cls = A2CSettings
    settings: A2CSettings
    model: A2C
    default_space = "a2c.yaml"
    algo = "a2c"
    name = "A2C"
    chunk = "n_steps"
    live = ("ent_coef", "vf_coef", "max_grad_norm", "gamma", "gae_lambda")
    defaults = {
        CLASSIC.name: _CLASSIC,
        # rl-zoo's tuned BipedalWalker-v3 and LunarLanderContinuous (less gSDE and its log_std_init, ortho_init)
        BOX2D.name: AgentDefaults("a2c_box2d.yaml", {
            "n_envs": 16, "n_steps": 8, "vf_coef": 0.4, "normalize_obs": True, "normalize_reward": True},
            _CONTINUOUS_RUN),
        # rl-zoo's MuJoCo defaults: SB3's A2C with normalised observations and rewards
        MUJOCO.name: AgentDefaults("a2c.yaml", {"n_envs": 1, "normalize_obs": True, "normalize_reward": True},
                                   _CONTINUOUS_RUN),
        # rl-zoo's atari row (16 envs x 5 steps, ent_coef 0.01 in the space, vf_coef 0.25) over its 10M steps, less
        # its TF-like RMSprop (SB3's RMSprop, eps 1e-5)
        ATARI.name: AgentDefaults("a2c_atari.yaml", {"n_envs": 16, "vf_coef": 0.25},
                                  {"t_ready": 250_000, "max_budget": 10_000_000}),
        # any other gymnasium id: classic control's
        OTHER.name: _CLASSIC,
    }

    def _build(self, hp: Mapping[str, Any], image: bool) -> A2C:
        s = self.settings
        net = {} if s.net_arch is None else {"policy_kwargs": {"net_arch": list(s.net_arch)}}
        return A2C("CnnPolicy" if image else "MlpPolicy", self._norm, n_steps=int(hp["n_steps"]), device=self.device,
                   verbose=0, **net)

    def _set(self, hp: Mapping[str, Any]) -> None:
        set_rollout(self.model, hp)
