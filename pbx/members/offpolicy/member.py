"""What SAC, TD3 and DQN share as members: a replay buffer, target networks, and updates every ``train_freq`` steps.

An exploit copies the donor's learner as SB3 saves it (``_get_torch_save_params``): the
policy with its target networks, every optimizer, SAC's entropy coefficient. The recipient
keeps its own replay buffer by default (``copy_buffer: false``): the buffer is the member's
own experience, like its envs, and a copy would move the largest part of a member (0.2 GB
for a million BipedalWalker transitions) between ranks at each exploit; RLlib under Ray
Tune's PBT does the same unless ``store_buffer_in_checkpoints`` is set (``docs/agents.md``).
With ``copy_buffer: true`` the checkpoint holds the whole buffer and an exploit takes the
donor's. A member built to take a donor's place (an IPBT restart's candidate past ``pop_size``)
has no experience of its own, and takes the donor's buffer whatever ``copy_buffer`` says
(:meth:`OffPolicyMember.load_experience`): it starts at the donor's step count, past
``learning_starts``, and is ranked against candidates that keep their full buffers.

Counting is the member's own, across rounds and resumes: SB3's ``learn`` compares
``learning_starts`` with ``num_timesteps``, which a member carries on (and restores), and
collects ``train_freq`` steps per env between updates, which a round trains whole (the
chunk of :meth:`~pbx.members.sb3.member.SB3Member.steps_trained`). A stop inside a round
(:mod:`pbx.runners.stopping`) comes between two such collections, after the update, as SB3's
``collect_rollouts`` begins (:class:`~pbx.members.sb3.episodes.Boundary`). A checkpoint, at a round's end
or inside it, holds the replay buffer (:mod:`pbx.members.offpolicy.replay_store`), the envs' last raw
observations the buffer's next row starts from, and the action space's generator (the warm-up's random
actions).

A diverged member (:class:`~pbx.members.base.Diverged`) rolls back its learner only; its replay buffer and
envs stay as the round left them, because nothing non-finite ever enters them: an action that is not a
finite number is refused before the envs step it (:meth:`OffPolicyRun._sample_action`), which ends the
round as diverged. Every row the round added was stepped with a finite action, by the policy as it was
before its weights went non-finite (or with only its critic gone), so it is a real transition of the
member's envs, as good to learn from as any older row; the envs went on from it, and in a full ring it
overwrote an older row, so dropping it could not give the old buffer back anyway. After a rollback the
member samples only finite rows and steps finite envs, and trains normally in the next round. An exploit
changes nothing of that: the recipient keeps its own buffer and envs, or with ``copy_buffer`` takes the
donor's buffer, which holds finite rows for the same reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import EnvSettings, observation_and_action_spaces  # isort: skip
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.preprocessing import get_action_dim
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

from pbx.errors import UsageError
from pbx.members.base import Diverged, MemberContext
from pbx.members.offpolicy.replay_store import CountingReplayBuffer, ReplayStore, set_whole, whole
from pbx.members.sb3.checkpoint import read_checkpoint
from pbx.members.sb3.member import SB3Member
from pbx.members.sb3.process import members_on_this_machine
from pbx.members.sb3.settings import SB3Settings
from pbx.space import Config


@dataclass
class OffPolicySettings(SB3Settings):
    """The replay buffer and the update schedule; SB3's defaults (SAC's and TD3's)."""

    integers: ClassVar[tuple[str, ...]] = ("batch_size", "train_freq", "gradient_steps")

    buffer_size: int = 1_000_000
    """Transitions the replay buffer holds (all envs together); it is allocated whole, so it cannot change."""
    learning_starts: int = 100
    """Env steps of random actions before the first update, counted in the member's own steps."""
    batch_size: int = 256
    """Transitions per gradient step."""
    tau: float = 0.005
    """Polyak coefficient of the target networks' update (1: a copy)."""
    train_freq: int = 1
    """Env steps per env between two updates; a round trains whole such stretches."""
    gradient_steps: int = 1
    """Gradient steps per update (-1: as many as env steps since the last one)."""
    copy_buffer: bool = False
    """An exploit copies the donor's replay buffer too (the checkpoint then holds the whole buffer, written
    whole at every save); by default the recipient keeps its own experience."""
    optimize_memory_usage: bool = False
    """SB3's memory-saving buffer: each observation is stored once (a row's next observation is the next row's
    observation), half the memory where observations are most of a row (images). SB3 then cannot keep an
    episode cut off by a time limit apart from one that ended (``handle_timeout_termination`` is off): its last
    transition is stored as an end, and is not bootstrapped from the next observation."""


class OffPolicyRun(OffPolicyAlgorithm):
    """SB3's off-policy loop that remembers where episodes start, as the on-policy one does
    (``_last_episode_starts``): a round's score leaves out the episodes in progress when it began; and that
    never steps its envs with, or stores, an action that is not a finite number."""

    def _sample_action(self, learning_starts: int, action_noise: ActionNoise | None = None,
                       n_envs: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """SB3's action, refused with :class:`Diverged` where it is not finite, before the envs step it.

        A policy whose weights went NaN acts NaN, and TD3's deterministic actor has no distribution that would
        raise on it as SAC's does; SB3's clipping leaves NaN as it is. Stepped, the action would put NaN into
        the envs' states and, with the observations and rewards it brings, into the replay buffer, where the
        learner's rollback could not undo it: the member would diverge again every round. Refused here, the
        envs and the buffer hold only what finite actions produced (the module docstring says why a rollback
        needs no more). DQN's actions are indices, finite whatever its Q-values.
        """
        action, buffer_action = super()._sample_action(learning_starts, action_noise, n_envs)
        if not (np.isfinite(action).all() and np.isfinite(buffer_action).all()):
            raise Diverged("the policy's actions are not finite: the envs did not step them, the replay buffer "
                           "did not store them")
        return action, buffer_action

    def _store_transition(self, replay_buffer: ReplayBuffer, buffer_action: np.ndarray, new_obs: Any,
                          reward: np.ndarray, dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)
        self._last_episode_starts = dones


class OffPolicyMember(SB3Member):
    """An SB3 off-policy agent as a member; the agent's file adds its class, settings and defaults."""

    settings: OffPolicySettings

    model: OffPolicyRun
    chunk = "train_freq"
    live = ("gamma", "tau", "batch_size", "gradient_steps")
    test_deterministic = True
    checkpoint_keys = (*SB3Member.checkpoint_keys, "replay", "last_original_obs", "action_space_rng")

    @classmethod
    def check_population(cls, env: str, pop_size: int, settings: OffPolicySettings,
                         env_settings: EnvSettings | None = None) -> None:
        """Raise :class:`UsageError` when the replay buffers of the members on this machine do not fit in the
        memory available now (they are allocated whole; a full buffer would then swap or be killed)."""
        members = members_on_this_machine(pop_size)
        obs, act = observation_and_action_spaces(env, env_settings)
        need, free = members * replay_bytes(obs, act, settings), _available_memory()
        if need > free:
            raise UsageError(f"buffer_size {settings.buffer_size:,} x {members} members needs {need / 1e9:.1f} GB of "
                             f"replay buffers, {free / 1e9:.1f} GB is free: lower buffer_size (-m buffer_size=...) "
                             f"or pop_size, or spread the members over machines (mpiexec)")

    def __init__(self, context: MemberContext, settings: OffPolicySettings, config: Config) -> None:
        super().__init__(context, settings, config)
        self.model.action_space.seed(int(np.random.SeedSequence(context.seed, spawn_key=(4,)).generate_state(1)[0]))
        self._store = None if settings.copy_buffer else ReplayStore(self.model.replay_buffer)

    def _algorithm_kwargs(self, hp: Mapping[str, Any], image: bool) -> dict[str, Any]:
        """The arguments of every off-policy SB3 class; the values read live are set again by :meth:`apply`."""
        s = self.settings
        net = {} if s.net_arch is None else {"policy_kwargs": {"net_arch": list(s.net_arch)}}
        return {"policy": "CnnPolicy" if image else "MlpPolicy", "env": self._norm, "buffer_size": s.buffer_size,
                "learning_starts": s.learning_starts, "train_freq": int(hp["train_freq"]),
                "replay_buffer_class": CountingReplayBuffer, "optimize_memory_usage": s.optimize_memory_usage,
                "replay_buffer_kwargs": {"handle_timeout_termination": not s.optimize_memory_usage},
                "device": self.device, "verbose": 0, **net}

    def _set(self, hp: Mapping[str, Any]) -> None:
        # SB3 converts train_freq to a TrainFreq once, in _setup_model, and reads that in learn()
        self.model.train_freq = TrainFreq(int(hp["train_freq"]), TrainFrequencyUnit.STEP)

    def _started(self, obs: np.ndarray) -> None:
        super()._started(obs)
        # the buffer stores raw observations, as the agent gets them: each row starts from the envs' last raw ones
        self.model._last_original_obs = self._norm.get_original_obs()

    def _save_beside(self, path: Path) -> dict[str, Any]:
        buffer = self.model.replay_buffer
        inside = self._round is not None  # a save inside the round in progress (a stop, a periodic save)
        return {"replay": whole(buffer) if self._store is None else self._store.save(path, inside)}

    def _checkpoint(self) -> dict[str, Any]:
        return {**super()._checkpoint(), "last_original_obs": self.model._last_original_obs,
                "action_space_rng": self.model.action_space.np_random.bit_generator.state}

    def _restore_world(self, state: dict[str, Any], path: Path) -> None:
        """The envs and streams (:meth:`SB3Member._restore_world`), the buffer and the action space's generator."""
        super()._restore_world(state, path)
        if state["env_state"] is not None:
            self.model._last_original_obs = np.copy(state["last_original_obs"])
        self._load_buffer(state, path)
        self.model.action_space.np_random.bit_generator.state = state["action_space_rng"]

    def _exploited(self, state: dict[str, Any], path: Path) -> None:
        """The shared part (:meth:`SB3Member._exploited`), and with ``copy_buffer`` the donor's replay buffer."""
        super()._exploited(state, path)
        if self.settings.copy_buffer:
            self._load_buffer(state, path)

    def load_experience(self, path: Path) -> None:
        """The donor's replay buffer as this member's own (:meth:`Member.load_experience`); with ``copy_buffer``
        the copy of the learner took it already."""
        if self._store is not None:
            self._load_buffer(read_checkpoint(path, ("replay",), self.algo), path, own=False)

    @classmethod
    def experience_files(cls, path: Path) -> list[Path]:
        """The replay segments the checkpoint ``path`` lists (none with ``copy_buffer``: it holds the buffer)."""
        entry = read_checkpoint(path, ("replay",), cls.algo)["replay"]
        return [path.parent / name for name, _, _ in entry.get("segments", ())]

    def _load_buffer(self, state: dict[str, Any], path: Path, own: bool = True) -> None:
        """The buffer a checkpoint ``path`` of this member (``own``) or of another one lists."""
        entry = state["replay"]
        if ("segments" in entry) != (self._store is not None):
            raise UsageError(f"{path} was written with copy_buffer {self._store is not None}, this run's settings "
                             f"say {self.settings.copy_buffer}; the run folder does not match its config.yaml")
        if self._store is None:
            set_whole(self.model.replay_buffer, entry, path)
        elif own:
            self._store.load(path, entry)
        else:
            self._store.take(path, entry)


def replay_bytes(observations: spaces.Space, actions: spaces.Space, settings: OffPolicySettings) -> int:
    """The bytes of the arrays SB3's ``ReplayBuffer`` allocates for ``settings`` on these spaces: ``buffer_size``
    rounded down to whole rows of ``n_envs`` transitions, each an observation (two without
    ``optimize_memory_usage``), an action and three float32 numbers (reward, end, time limit)."""
    rows = max(settings.buffer_size // settings.n_envs, 1) * settings.n_envs
    observation = int(np.prod(observations.shape)) * np.dtype(observations.dtype).itemsize
    action = get_action_dim(actions) * np.dtype(ReplayBuffer._maybe_cast_dtype(actions.dtype)).itemsize
    return rows * ((1 if settings.optimize_memory_usage else 2) * observation + action + 3 * 4)


def _available_memory() -> int:
    """Bytes of memory available to new allocations now (Linux's MemAvailable; else the free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
