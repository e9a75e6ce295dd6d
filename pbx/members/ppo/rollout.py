"""PPO's rollout without SB3's per-step copies: observations stay on the device, minibatches are gathered there.

SB3's ``collect_rollouts`` copies each step's observations to the device for the policy's
forward and, through ``RolloutBuffer.add``, keeps a second copy of them on the host; it brings
the values and log-probabilities back to the host at every step (two waits for a GPU besides
the actions'), and at the update gathers each minibatch on the host by fancy indexing and copies
it to the device again. On one H200 that was 28% of a ProcGen round for inference, 4.8% for the
gather and 4.1% for the copy (``docs/gpu.md``).

:class:`DeviceRolloutBuffer` keeps the observations, values and log-probabilities where the
policy computed them (the device) and fills them in place; the values and log-probabilities cross
to the host once per rollout, for SB3's own GAE, and the flattened rollout crosses to the device
once per update, after which each minibatch is an index on the device. :class:`DirectRollout`
is ``collect_rollouts`` with the observation the forward saw handed to that buffer, and the next
observation brought to the device through pinned memory. Every number is SB3's: the same
forward, the same draws from the same random streams in the same order (the minibatch
permutation included), the same GAE code; ``tests/test_rollout.py`` checks the buffer and the
weights after an update against SB3's own path bit for bit on the CPU.
"""

from __future__ import annotations

from typing import Any, Generator

import numpy as np
import torch
from gymnasium import spaces

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import RolloutBufferSamples
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

_FLAT = ("observations", "actions", "values", "log_probs", "advantages", "returns")
"""The rollout's fields a minibatch holds, in :class:`RolloutBufferSamples`' order."""


class HostToDevice:
    """Host arrays to ``device``: on a GPU through one pinned staging buffer and a non-blocking copy.

    The staging buffer is rewritten only after the policy's actions have come back from the
    device, which waits for every copy queued before the forward that produced them, so a copy
    never reads a staging buffer being refilled. On the CPU the array is wrapped, not copied,
    as SB3's ``obs_as_tensor`` does.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned: torch.Tensor | None = None

    def __call__(self, array: np.ndarray) -> torch.Tensor:
        if self.device.type != "cuda":
            return torch.as_tensor(array, device=self.device)
        source = torch.from_numpy(np.ascontiguousarray(array))
        if self._pinned is None or self._pinned.shape != source.shape or self._pinned.dtype != source.dtype:
            self._pinned = torch.empty_like(source).pin_memory()
        self._pinned.copy_(source)
        return self._pinned.to(self.device, non_blocking=True)


class DeviceRolloutBuffer(RolloutBuffer):
    """SB3's ``RolloutBuffer`` with the observations, values and log-probabilities on the device (see the module
    docstring). Its fields mean what SB3's do: ``observations`` is (n_steps, n_envs, *shape) until :meth:`get`
    flattens it, as SB3's is, only a tensor on the device instead of a host array."""

    observations: Any  # a tensor on the device, where SB3 keeps a host array

    def reset(self) -> None:
        # SB3 allocates the observations as a host array at every reset (201 MB at the ProcGen paper's setting):
        # this buffer allocates its device tensors once and refills them in place.
        device_obs = getattr(self, "_device_obs", None)
        super().reset()
        if device_obs is None:
            dtype = torch.from_numpy(np.zeros(0, dtype=self.observation_space.dtype)).dtype
            device_obs = torch.zeros((self.buffer_size, self.n_envs, *self.obs_shape), dtype=dtype, device=self.device)
            self._device_values = torch.zeros((self.buffer_size, self.n_envs), device=self.device)
            self._device_log_probs = torch.zeros((self.buffer_size, self.n_envs), device=self.device)
            # On the CPU the step's few numbers are written through NumPy views of the same memory: a torch write
            # costs 20-50 us of dispatch, a NumPy one a few (CartPole's rollout ran at 0.76 of SB3's with torch's)
            self._host = (device_obs.numpy(), self._device_values.numpy(), self._device_log_probs.numpy()) \
                if device_obs.device.type == "cpu" else None
        self._device_obs = device_obs
        self.observations = device_obs

    def add(self, obs: torch.Tensor, action: np.ndarray, reward: np.ndarray,  # type: ignore[override]
            episode_start: np.ndarray, value: torch.Tensor, log_prob: torch.Tensor) -> None:
        """One step, as SB3's ``add`` stores it; ``obs`` is the tensor the policy's forward was given."""
        pos, n = self.pos, self.n_envs
        if self._host is None:
            self._device_obs[pos].copy_(obs.reshape(n, *self.obs_shape))
            self._device_values[pos] = value.flatten()
            self._device_log_probs[pos] = log_prob.reshape(n)
        else:
            observations, values, log_probs = self._host
            observations[pos] = obs.numpy().reshape(n, *self.obs_shape)
            values[pos] = value.numpy().reshape(n)
            log_probs[pos] = log_prob.numpy().reshape(n)
        self.actions[pos] = action.reshape((n, self.action_dim))
        self.rewards[pos] = reward
        self.episode_starts[pos] = episode_start
        self.pos += 1
        self.full = self.pos == self.buffer_size

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
        """SB3's GAE on the host, after the values and log-probabilities cross once."""
        self.values = self._device_values.cpu().numpy()
        self.log_probs = self._device_log_probs.cpu().numpy()
        super().compute_returns_and_advantage(last_values, dones)

    def get(self, batch_size: int | None = None) -> Generator[RolloutBufferSamples, None, None]:
        """SB3's ``get``: one permutation from NumPy's global stream, minibatches in its order, gathered here on
        the device from the rollout flattened (env by env, as SB3's ``swap_and_flatten`` orders it) once. The
        host arrays are flattened as SB3 flattens them too (PPO logs their explained variance)."""
        assert self.full, ""
        indices = np.random.permutation(self.buffer_size * self.n_envs)
        if not self.generator_ready:
            n = self.buffer_size * self.n_envs
            self.observations = self._device_obs.transpose(0, 1).reshape(n, *self.obs_shape)
            for name in _FLAT[1:]:
                self.__dict__[name] = self.swap_and_flatten(self.__dict__[name])
            self._flat = {"observations": self.observations,
                          "actions": torch.as_tensor(self.actions.astype(np.float32, copy=False), device=self.device),
                          **{name: torch.as_tensor(self.__dict__[name], device=self.device).flatten()
                             for name in _FLAT[2:]}}
            self.generator_ready = True
        if batch_size is None:
            batch_size = self.buffer_size * self.n_envs
        order = torch.as_tensor(indices, device=self.device)
        for start in range(0, self.buffer_size * self.n_envs, batch_size):
            yield self._get_samples(order[start:start + batch_size])

    def _get_samples(self, batch_inds: Any, env: VecNormalize | None = None) -> RolloutBufferSamples:
        """The minibatch at ``batch_inds`` (a tensor on the device), each field shaped as SB3's ``_get_samples``
        shapes it."""
        return RolloutBufferSamples(*(self._flat[name][batch_inds] for name in _FLAT))


class DirectRollout(OnPolicyAlgorithm):
    """An on-policy algorithm whose rollout fills a :class:`DeviceRolloutBuffer` (on Box and Discrete
    observations; other spaces keep SB3's buffer and rollout)."""

    def _setup_model(self) -> None:
        if self.rollout_buffer_class is None and isinstance(self.observation_space, (spaces.Box, spaces.Discrete)):
            self.rollout_buffer_class = DeviceRolloutBuffer
        super()._setup_model()

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer,
                         n_rollout_steps: int) -> bool:
        """SB3's ``collect_rollouts`` step for step, with the observation kept on the device (module docstring)."""
        if not isinstance(rollout_buffer, DeviceRolloutBuffer):
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        assert self._last_obs is not None, "No previous observation was provided"
        self.policy.set_training_mode(False)
        rollout_buffer.reset()
        if self.use_sde:
            self.policy.reset_noise(env.num_envs)
        callback.on_rollout_start()
        to_device = HostToDevice(self.device)
        obs_tensor = to_device(self._last_obs)  # type: ignore[arg-type]
        box = isinstance(self.action_space, spaces.Box)
        for n_steps in range(n_rollout_steps):
            if self.use_sde and self.sde_sample_freq > 0 and n_steps % self.sde_sample_freq == 0:
                self.policy.reset_noise(env.num_envs)
            with torch.no_grad():
                actions_tensor, values, log_probs = self.policy(obs_tensor)
            actions = actions_tensor.cpu().numpy()
            clipped_actions = actions
            if box:
                clipped_actions = (self.policy.unscale_action(actions) if self.policy.squash_output
                                   else np.clip(actions, self.action_space.low, self.action_space.high))
            new_obs, rewards, dones, infos = env.step(clipped_actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            self._bootstrap_timeouts(rewards, dones, infos)
            rollout_buffer.add(obs_tensor, actions, rewards, self._last_episode_starts,  # type: ignore[arg-type]
                               values, log_probs)
            obs_tensor = to_device(new_obs)  # type: ignore[arg-type]
            self._last_obs = new_obs  # type: ignore[assignment]
            self._last_episode_starts = dones
        with torch.no_grad():
            values = self.policy.predict_values(obs_tensor)
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _bootstrap_timeouts(self, rewards: np.ndarray, dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
        """An episode cut by a time limit gets ``gamma`` times its last observation's value added to its reward, as
        SB3 adds it (SB3 issue #633)."""
        for idx in np.flatnonzero(dones):
            info = infos[idx]
            if info.get("terminal_observation") is not None and info.get("TimeLimit.truncated", False):
                terminal_obs = self.policy.obs_to_tensor(info["terminal_observation"])[0]
                with torch.no_grad():
                    terminal_value = self.policy.predict_values(terminal_obs)[0]  # type: ignore[arg-type]
                rewards[idx] += self.gamma * terminal_value


def use_sb3_rollout(model: OnPolicyAlgorithm) -> None:
    """Make ``model`` collect with SB3's own ``RolloutBuffer`` and ``collect_rollouts`` from its next rollout on (the
    direct rollout hands a buffer of another class to SB3's): the path the direct rollout is measured and tested
    against (``benchmarks/bench_rollout.py``, ``tests/test_rollout.py``)."""
    old = model.rollout_buffer
    model.rollout_buffer_class = RolloutBuffer
    model.rollout_buffer = RolloutBuffer(old.buffer_size, model.observation_space, model.action_space,
                                         device=model.device, gamma=old.gamma, gae_lambda=old.gae_lambda,
                                         n_envs=model.n_envs)
