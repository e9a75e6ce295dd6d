"""A member's running statistics of observations and returns: part of its learner, not of its envs.

SB3's ``VecNormalize`` keeps them inside the env wrapper, so saving the model alone loses
them (rl-zoo saves ``vecnormalize.pkl`` beside each model). A policy trained on normalised
observations is a function of its weights *and* the observation statistics: a recipient
that took a donor's weights but kept its own statistics would run a different policy.
:class:`Normalizer` therefore holds them as learner state: :meth:`state` goes into the
checkpoint and travels with the weights on an exploit, :meth:`learner_state` is what a
diverged update rolls back, and :meth:`observe` applies them, frozen, to a test env's raw
observations. The per-env discounted returns (reward scaling) belong to the member's own
episodes and stay with its envs, like the envs themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize, VecTransposeImage


class Normalizer(VecNormalize):
    """``VecNormalize`` whose statistics are learner state (see the module docstring).

    Observations are normalised only with ``norm_obs`` (never images: ProcGen's frames are
    fed raw to the CNN); rewards are scaled by the running std of discounted returns with
    ``norm_reward``. SB3 updates the statistics while training and never in :meth:`observe`.
    """

    def __init__(self, venv: VecEnv, *, norm_obs: bool, norm_reward: bool) -> None:
        super().__init__(venv, norm_obs=norm_obs, norm_reward=norm_reward)
        self.transpose: VecTransposeImage | None = None
        """SB3's transpose of channels-last images when the algorithm put one above this wrapper (the member sets
        it): the agent gets its observations channels first."""

    def _update_reward(self, reward: np.ndarray) -> None:
        # Without norm_reward the return statistics scale nothing; SB3 keeps them up to date all the same, at a
        # mean and a variance per step (5% of A2C's throughput on CartPole).
        if self.norm_reward:
            super()._update_reward(reward)

    def learner_state(self) -> dict[str, Any]:
        """Copies of the statistics: the return statistics' and, with ``norm_obs``, the observations'."""
        return {"reward": _stats(self.ret_rms), "obs": _stats(self.obs_rms) if self.norm_obs else None}

    def set_learner_state(self, state: dict[str, Any]) -> None:
        """Take the statistics of :meth:`learner_state` (a checkpoint's, or a donor's on an exploit)."""
        _set_stats(self.ret_rms, state["reward"])
        if self.norm_obs:
            _set_stats(self.obs_rms, state["obs"])

    def finite(self) -> bool:
        """Whether every statistic is a finite number (a diverged update can poison them too)."""
        parts = [self.ret_rms] + ([self.obs_rms] if self.norm_obs else [])
        return all(np.isfinite(p.mean).all() and np.isfinite(p.var).all() for p in parts)

    def observe(self, raw: np.ndarray) -> np.ndarray:
        """``raw`` observations as the policy sees them, the statistics frozen (for test episodes)."""
        return self.normalize_obs(raw) if self.norm_obs else raw

    def raw_obs(self) -> np.ndarray:
        """The envs' latest observations before normalisation, as the envs give them."""
        return super().get_original_obs()

    def get_original_obs(self) -> np.ndarray:
        """The envs' latest observations before normalisation, in the layout the agent gets (SB3's hook).

        SB3's off-policy loop stores them in a replay buffer built for the agent's observation space, beside the
        terminal observations the transpose above gave it (SB3 issue #819: channels-last images through
        ``VecNormalize`` break off-policy agents); this wrapper stays below the transpose, where rl-zoo puts
        ``VecNormalize``, so its saved statistics load onto the envs as the user builds them.
        """
        raw = super().get_original_obs()
        return raw if self.transpose is None else self.transpose.transpose_observations(raw)


def _stats(rms: RunningMeanStd) -> dict[str, Any]:
    return {"mean": np.copy(rms.mean), "var": np.copy(rms.var), "count": rms.count}


def _set_stats(rms: RunningMeanStd, stats: dict[str, Any]) -> None:
    rms.mean, rms.var, rms.count = np.copy(stats["mean"]), np.copy(stats["var"]), stats["count"]
