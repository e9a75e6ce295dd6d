"""One Stable-Baselines3 PPO agent as a population member.

Defaults are the ProcGen paper's PPO settings (Cobbe et al., 2020, "Leveraging
Procedural Generation to Benchmark Reinforcement Learning"): IMPALA CNN, 64 envs x
256 steps, 8 minibatches, 3 epochs, gamma 0.999, lambda 0.95, entropy 0.01, lr
5e-4, clip 0.2 (the value's too), reward normalisation; train on 200 easy levels,
test on the unrestricted level distribution. On ProcGen the loss is the reference
PPO's (``value_loss: reference``, :mod:`pbx.members.ppo.update`); what still departs
from that PPO is listed in ``docs/algorithms.md``.

What every SB3 agent shares (envs, statistics, random streams, checkpoints, test
episodes, applying a hyperparameter where SB3 reads it) is :class:`~pbx.members.sb3.member.SB3Member`;
this file holds PPO's part: the rollout whose length a search may
change (and the minibatch that must divide it), the clip ranges and the value loss.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Mapping

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import EnvSettings  # isort: skip
from pbx.envs.families import ATARI, BOX2D, CLASSIC, MUJOCO, OTHER, PROCGEN  # isort: skip
from gymnasium import spaces
from stable_baselines3.common.utils import FloatSchedule

from pbx.errors import UsageError
from pbx.members.base import MemberSettings
from pbx.members.ppo.impala import ImpalaPolicy
from pbx.members.ppo.settings import PPOSettings, fit_rollout
from pbx.members.ppo.update import PPOUpdate
from pbx.members.sb3.agent import AgentDefaults, observes_images
from pbx.members.sb3.member import SB3Member, set_rollout
from pbx.members.sb3.process import set_precision
from pbx.space import Config, Space


# rl-zoo's CartPole PPO (lr, gamma, lambda and epochs are the space's defaults), under SB3's own value loss, with
# which ppo_classic.yaml's defaults were tuned and the CartPole study of docs/results.md ran: about 30 rounds of
# two default rollouts, where PPO solves CartPole in ~360k steps.
_CLASSIC = AgentDefaults("ppo_classic.yaml", {"value_loss": "sb3", "normalize_gamma": None},
                         {"t_ready": 32_768, "max_budget": 1_000_000})

# SB3's own PPO defaults (2,048-step rollouts in minibatches of 64, 10 epochs, no entropy bonus where the
# settings' defaults hold the ProcGen paper's 0.01, its value loss with no value clipping) as 8 envs x 256
# steps, with rl-zoo's `normalize: true` (observations and rewards): the settings rl-zoo starts its
# continuous-control PPO from; searched values' defaults are in ppo_continuous.yaml. The PB2 paper's
# continuous-control schedule: an exploit every 50,000 steps, 1M steps per member.
_CONTROL = AgentDefaults("ppo_continuous.yaml", {
    "value_loss": "sb3", "clip_range_vf": None, "ent_coef": 0.0, "n_envs": 8, "n_steps": 256, "batch_size": 64,
    "n_epochs": 10, "gamma": 0.99, "normalize_obs": True, "normalize_reward": True, "normalize_gamma": None,
    "eval_episodes": 10}, {"t_ready": 50_000, "max_budget": 1_000_000})

DEFAULTS: dict[str, AgentDefaults] = {
    # the ProcGen paper's PPO (the settings' own defaults) on the PB2 paper's schedule (25M steps, exploit every 500k)
    PROCGEN.name: AgentDefaults("ppo_procgen.yaml", run={"t_ready": 500_000, "max_budget": 25_000_000}),
    CLASSIC.name: _CLASSIC,
    BOX2D.name: _CONTROL,
    MUJOCO.name: _CONTROL,
    # rl-zoo's atari row (8 envs x 128 steps, 4 epochs, minibatch 256, lr 2.5e-4 and clip 0.1 in the space, SB3's
    # loss and Nature CNN, no normalisation: AtariWrapper clips rewards) over its 10M steps, an exploit every 250k
    ATARI.name: AgentDefaults("ppo_atari.yaml", {
        "value_loss": "sb3", "clip_range_vf": None, "n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 4,
        "gamma": 0.99, "normalize_reward": False, "normalize_gamma": None, "eval_episodes": 10},
        {"t_ready": 250_000, "max_budget": 10_000_000}, image_policy="CnnPolicy"),
    # any other gymnasium id: classic control's
    OTHER.name: _CLASSIC,
}
"""PPO's defaults per task family (rl-zoo's ``hyperparams/ppo.yml`` in the same spirit)."""


class PPOMember(SB3Member):
    """SB3 PPO on a ProcGen game (IMPALA CNN) or a gymnasium id (MLP)."""

    settings_cls = PPOSettings
    default_space = "ppo_procgen.yaml"
    settings: PPOSettings
    model: PPOUpdate
    algorithm: ClassVar[type[PPOUpdate]] = PPOUpdate
    """The SB3 class trained; a subclass may add to its update (see :mod:`pbx.members.ppo.drac`)."""
    algo = "ppo"
    name: ClassVar[str] = "PPO"
    """What :meth:`describe` calls the algorithm."""
    chunk = "n_steps"
    live = ("ent_coef", "vf_coef", "max_grad_norm", "n_epochs", "batch_size", "gamma", "gae_lambda")
    action_spaces = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    defaults = DEFAULTS
    checkpoint_keys: ClassVar[tuple[str, ...]] = (
        "format", "env", "n_envs", "steps", "n_updates", "config", "policy", "optimizer", "reward_norm",
        "last_obs", "last_episode_starts", "env_state", "rng")
    """What :meth:`save` writes (see :meth:`_checkpoint`) and :meth:`load` requires."""

    @classmethod
    def describe(cls, settings: MemberSettings) -> str:
        """``"PPO (reference loss)"`` or ``"PPO (SB3 loss)"`` (a subclass's ``name`` in place of PPO)."""
        assert isinstance(settings, PPOSettings)
        return f"{cls.name} ({'reference' if settings.value_loss == 'reference' else 'SB3'} loss)"

    @classmethod
    def feasible(cls, config: Config, settings: MemberSettings, space: Space) -> tuple[Config, list[str]]:
        """A searched rollout length or minibatch size moved to the nearest pair SB3 can train (the minibatch
        dividing the rollout), and the moves as operations (:func:`~pbx.members.ppo.settings.fit_rollout`)."""
        assert isinstance(settings, PPOSettings)
        return fit_rollout(config, settings, space)

    @classmethod
    def validate_env(cls, env: str, settings: MemberSettings, env_settings: EnvSettings | None = None) -> None:
        """:meth:`SB3Agent.validate_env`, and the IMPALA CNN's own settings (``precision``, ``channels_last``)
        refused where another policy trains: vector observations (an MLP) or a family whose row names SB3's."""
        super().validate_env(env, settings, env_settings)
        assert isinstance(settings, PPOSettings)
        policy = cls.family_defaults(env).image_policy or ImpalaPolicy
        image = observes_images(env, env_settings)
        network = settings.image_network()
        if network and not (image and policy is ImpalaPolicy):
            # bf16 and channels_last change the IMPALA CNN itself; torch, fp32 and tf32 are process-wide TF32
            # switches, which any network's matrix products on a GPU follow, and so apply to an MLP too
            s = settings
            asked = [f"precision={s.precision}"] * ("precision" in network) + ["channels_last=true"] * s.channels_last
            uses = f"SB3's {policy}" if image else "observations are vectors (an MLP)"
            tf32 = " (precision=tf32, TF32 matrix products on a GPU, applies to any policy)" \
                if "precision" in network else ""
            raise UsageError(f"{' and '.join(asked)} {'are settings' if len(asked) > 1 else 'is a setting'} of the "
                             f"image policy (IMPALA CNN) only; {env}'s {uses}: leave "
                             f"{'them at their defaults' if len(asked) > 1 else 'it at its default'}{tf32}")

    def _build(self, hp: Mapping[str, Any], image: bool) -> PPOUpdate:
        s = self.settings
        set_precision("fp32" if s.deterministic else s.precision)
        network = s.image_network()
        # the family's image policy where PPO's row names one (SB3's Nature CNN, say), else the IMPALA CNN
        policy = self.family_defaults(self.context.env).image_policy or ImpalaPolicy  # network suits it: validate_env
        net = ({"policy_kwargs": {"features_extractor_kwargs": network}} if network else {}) \
            if image else ({} if s.net_arch is None else {"policy_kwargs": {"net_arch": list(s.net_arch)}})
        return self.algorithm(policy if image else "MlpPolicy", self._norm, n_steps=int(hp["n_steps"]),
                              batch_size=int(hp["batch_size"]), value_loss=self.settings.value_loss,
                              device=self.device, verbose=0, **net)

    def _set(self, hp: Mapping[str, Any]) -> None:
        """The clip ranges (schedules) and the rollout's length, discount and GAE lambda (the rollout buffer's)."""
        model = self.model
        # The reference value loss reads clip_range (tied); SB3's reads clip_range_vf, off for the reference's.
        model.clip_range = FloatSchedule(hp["clip_range"])
        sb3_vf = hp["clip_range_vf"] if self.settings.value_loss == "sb3" else None
        model.clip_range_vf = None if sb3_vf is None else FloatSchedule(sb3_vf)
        set_rollout(model, hp)

    def _checkpoint(self) -> dict[str, Any]:
        return {**super()._checkpoint(), "value_loss": self.settings.value_loss}

    def _restore_world(self, state: dict[str, Any], path: Path) -> None:
        """The shared resume (:meth:`SB3Member._restore_world`) of a checkpoint trained with this run's value loss."""
        # a checkpoint from before the setting existed was trained with SB3's loss
        trained = state.get("value_loss", "sb3")
        if trained != self.settings.value_loss:
            raise UsageError(f"{path} was trained with value_loss {trained}, this run's settings say "
                             f"{self.settings.value_loss}: set value_loss: {trained} in the member section "
                             f"of the run's config.yaml to resume it as it was trained")
        super()._restore_world(state, path)
