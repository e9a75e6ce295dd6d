"""One Stable-Baselines3 PPO agent as a population member.

Defaults are the ProcGen paper's PPO (Cobbe et al., 2020, "Leveraging Procedural
Generation to Benchmark Reinforcement Learning"): IMPALA CNN, 64 envs x 256
steps, 8 minibatches, 3 epochs, gamma 0.999, lambda 0.95, entropy 0.01, lr
5e-4, clip 0.2, value clip 0.2, reward normalisation; train on 200 easy levels,
test on the unrestricted level distribution.

SB3 reads several hyperparameters through schedules or copies, so setting the
attribute alone changes nothing (SB3 issues #735, #845, #942, #1336, #1877);
:meth:`PPOMember.apply` writes each value everywhere SB3 reads it. SB3 also
draws from the process-wide torch / NumPy / ``random`` RNGs; each member keeps
its own copy of those states and swaps it in while it trains, so members in one
process do not perturb each other and a checkpoint continues bit for bit.
"""

from __future__ import annotations

import copy
import math
import os
import pickle
import random
import re
import zipfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import DISTRIBUTION_MODES, StatefulVecEnv, check_env, is_procgen, make_env  # isort: skip
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger, configure
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import FloatSchedule
from stable_baselines3.common.vec_env import VecNormalize

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.members.base import Diverged, Member, MemberContext, MemberSettings
from pbx.members.impala import ImpalaPolicy
from pbx.rollout import Played, Watcher, play
from pbx.space import Config, Continuous, Space

CHECKPOINT_FORMAT = 1
_NON_FINITE = re.compile(r"\b(nan|inf)\b", re.IGNORECASE)
"""An error message about non-finite numbers (whole words: "information" is not one)."""

INTEGER_HYPERPARAMETERS = ("n_epochs", "batch_size")

# Environment variables MPI launchers set to the number of ranks on this machine
# (MPICH/Hydra, Open MPI, MVAPICH, Slurm); PMI_SIZE (all ranks) is the last resort.
LOCAL_RANKS_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                    "SLURM_NTASKS_PER_NODE", "PMI_SIZE")


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _non_negative_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_DOMAINS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n_envs": (_positive_int, "a positive integer"),
    "n_steps": (_positive_int, "a positive integer"),
    "batch_size": (lambda v: _positive_int(v) and v > 1, "an integer above 1"),
    "n_epochs": (_positive_int, "a positive integer"),
    "gamma": (lambda v: _finite_number(v) and 0 < v <= 1, "in (0, 1]"),
    "gae_lambda": (lambda v: _finite_number(v) and 0 <= v <= 1, "in [0, 1]"),
    "learning_rate": (lambda v: _finite_number(v) and v > 0, "a number above 0"),
    "ent_coef": (lambda v: _finite_number(v) and v >= 0, "a number >= 0"),
    "clip_range": (lambda v: _finite_number(v) and v > 0, "a number above 0"),
    "clip_range_vf": (lambda v: v is None or (_finite_number(v) and v > 0), "a number above 0 or None"),
    "vf_coef": (lambda v: _finite_number(v) and v >= 0, "a number >= 0"),
    "max_grad_norm": (lambda v: _finite_number(v) and v > 0, "a number above 0"),
    "normalize_reward": (lambda v: isinstance(v, bool), "true or false"),
    "num_levels": (_non_negative_int, "an integer >= 0"),
    "start_level": (_non_negative_int, "an integer >= 0"),
    "distribution_mode": (lambda v: v in DISTRIBUTION_MODES, f"one of {', '.join(DISTRIBUTION_MODES)}"),
    "eval_episodes": (_non_negative_int, "an integer >= 0 (0: no evaluation)"),
    "eval_max_steps": (_positive_int, "a positive integer"),
    "deterministic": (lambda v: isinstance(v, bool), "true or false"),
    "eval_n_envs": (lambda v: v is None or _positive_int(v), "a positive integer or None"),
}


@dataclass
class PPOSettings(MemberSettings):
    """PPO and env settings; fixed for the run unless the search space names them (see ``hyperparameters``)."""

    hyperparameters: ClassVar[tuple[str, ...]] = (
        "learning_rate", "clip_range", "clip_range_vf", "ent_coef", "vf_coef", "max_grad_norm", "gamma",
        "gae_lambda", "n_epochs", "batch_size")
    """Settings a search space may explore: :meth:`PPOMember.apply` changes them while the agent trains."""
    domains: ClassVar[Mapping[str, tuple[Callable[[Any], bool], str]]] = _DOMAINS
    """Each setting's valid values and how an error message names them (a subclass adds its own settings)."""

    n_envs: int = 64
    """Envs stepped together; with n_steps it sizes the rollout buffer, so it cannot change while training."""
    n_steps: int = 256
    """Steps per env per rollout; one rollout is n_envs * n_steps env steps."""
    batch_size: int = 2048
    """Minibatch size in samples; must divide n_envs * n_steps (the paper's 8 minibatches = 2048)."""
    n_epochs: int = 3
    """Passes over each rollout."""
    gamma: float = 0.999
    """Discount factor (also the reward normaliser's)."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    learning_rate: float = 5e-4
    """Adam step size."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    clip_range: float = 0.2
    """PPO policy clip range."""
    clip_range_vf: Optional[float] = 0.2
    """Value-function clip range; None turns value clipping off."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    normalize_reward: bool = True
    """Scale rewards by a running std of discounted returns (``VecNormalize(norm_obs=False)``)."""
    num_levels: int = 200
    """ProcGen training levels (0 = unrestricted); the test env always uses the unrestricted distribution."""
    start_level: int = 0
    """First ProcGen training level seed."""
    distribution_mode: str = "easy"
    """ProcGen difficulty, for the train and the test env."""
    eval_episodes: int = 100
    """Finished test episodes averaged by :meth:`PPOMember.evaluate`; 0 turns evaluation off."""
    eval_n_envs: Optional[int] = None
    """Envs in the test env; None = one per episode (all episodes at once, no bias to short ones)."""
    eval_max_steps: int = 100_000
    """Cap on a test run's vector steps, so an env without a time limit cannot hang the run; a test run
    that reaches it before ``eval_episodes`` episodes finish scores NaN, with a warning."""
    deterministic: bool = False
    """Make GPU training reproducible (cuDNN and cuBLAS deterministic kernels), at their cost in speed.

    Without it, runs and resumes reproduce bit for bit only on the CPU with the same
    thread count (all cores, shared among local MPI ranks): GPU kernels may sum in
    any order. With it, torch refuses nondeterministic kernels and cuBLAS gets a
    fixed workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8``, set before CUDA starts).
    """

    def __post_init__(self) -> None:
        for f in fields(self):
            self.check(f.name, getattr(self, f.name))
        rollout = self.n_envs * self.n_steps
        if rollout % self.batch_size:
            raise UsageError(f"batch_size {self.batch_size} does not divide n_envs * n_steps = {rollout}; "
                             f"use a divisor such as {max(rollout // 8, 2)} (8 minibatches)")

    @classmethod
    def check(cls, name: str, value: Any) -> None:
        """Raise :class:`UsageError` unless ``value`` is a valid value of the setting ``name``."""
        valid, expected = cls.domains[name]
        if not valid(value):
            raise UsageError(f"{name} must be {expected}, got {value!r}")

    @classmethod
    def check_names(cls, names: list[str]) -> None:
        """Raise :class:`UsageError` unless every name is a hyperparameter a search may change."""
        unknown = [n for n in names if n not in cls.hyperparameters]
        if unknown:
            raise UsageError(f"PPO has no hyperparameter {', '.join(map(repr, unknown))} to search over; "
                             f"it can change {', '.join(cls.hyperparameters)} while training "
                             f"(n_envs and n_steps size the rollout buffer: set them with -m instead)")


def _thread_budget() -> int:
    """Cores this process may use: all of them, shared evenly among the MPI ranks on this machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    for var in LOCAL_RANKS_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return max(1, cores // int(value))
    return cores


def _rng_state(cuda: bool) -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state() if cuda else None,
            "numpy": np.random.get_state(), "random": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])


class _RoundEpisodes(BaseCallback):
    """Collects the returns of episodes that both start and end during one ``learn`` call.

    An env in the middle of an episode when the call starts (always so after an
    exploit, since the recipient keeps its envs) finishes that episode with reward
    partly earned before the call, possibly by a policy the member just threw away:
    such an episode is counted in ``left_out``, not scored. SB3's ``ep_info_buffer``
    is no use either: it keeps the last 100 episodes and outlives weight copies.
    """

    def __init__(self, fresh: np.ndarray) -> None:
        super().__init__()
        self.fresh = fresh.astype(bool).copy()
        """Per env: whether its current episode started inside this call."""
        self.returns: list[float] = []
        self.left_out = 0

    def _on_step(self) -> bool:
        infos = self.locals["infos"]
        for i in np.flatnonzero(self.locals["dones"]):
            if "episode" in infos[i]:
                if self.fresh[i]:
                    self.returns.append(float(infos[i]["episode"]["r"]))
                else:
                    self.left_out += 1
            self.fresh[i] = True  # the next episode starts now
        return True


class PPOMember(Member):
    """SB3 PPO on a ProcGen game (IMPALA CNN) or a gymnasium id (MLP)."""

    settings_cls = PPOSettings
    default_space = "ppo_procgen.yaml"
    settings: PPOSettings
    algorithm: ClassVar[type[PPO]] = PPO
    """The SB3 class trained; a subclass may change its update (see :mod:`pbx.members.drac`)."""
    checkpoint_keys: ClassVar[tuple[str, ...]] = (
        "format", "env", "n_envs", "steps", "n_updates", "config", "policy", "optimizer", "reward_norm",
        "last_obs", "last_episode_starts", "env_state", "rng")
    """What :meth:`save` writes (see :meth:`_checkpoint`) and :meth:`load` requires."""

    @classmethod
    def check_env(cls, env: str) -> None:
        """Raise :class:`UsageError` unless ``env`` is a ProcGen game or a registered gymnasium id."""
        check_env(env)

    @classmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        """ProcGen: the PB2 paper's setting (25M steps, exploit every 500k). Classic control:
        about 30 rounds of two default rollouts, where PPO solves CartPole in ~360k steps."""
        if is_procgen(env):
            return {"t_ready": 500_000, "max_budget": 25_000_000}
        return {"t_ready": 32_768, "max_budget": 1_000_000}

    @classmethod
    def space_file(cls, env: str) -> str:
        """The search space for ``env`` when the run names none: ProcGen's, or a classic-control one."""
        return cls.default_space if is_procgen(env) else "ppo_classic.yaml"

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        if not isinstance(settings, cls.settings_cls):
            raise UsageError(f"{cls.__name__} needs {cls.settings_cls.__name__}, got {type(settings).__name__}")
        cls.settings_cls.check_names(space.names)
        rollout = settings.n_envs * settings.n_steps
        for name, param in space.params.items():
            if isinstance(param, Continuous):
                if name in INTEGER_HYPERPARAMETERS:
                    raise UsageError(f"{name} is an integer: make it categorical in the search space, "
                                     f"e.g. {{type: categorical, choices: [...]}}")
                values: tuple[Any, ...] = (param.low, param.high)
            else:
                values = param.choices
            for value in values:
                try:
                    cls.settings_cls.check(name, value)
                except UsageError as err:
                    raise UsageError(f"search space: {err}") from None
                if name == "batch_size" and rollout % value:
                    raise UsageError(f"search space: batch_size {value} does not divide "
                                     f"n_envs * n_steps = {rollout}")
        _check_device(device)

    def __init__(self, context: MemberContext, settings: PPOSettings, config: Config) -> None:
        super().__init__(context, settings, config)
        if settings.deterministic:
            _deterministic_torch()
        threads = _thread_budget()
        # Handing steps to worker threads costs more than it saves on a core or two
        # (bigfish, 64 envs, 2 cores: 55k steps/s in the calling thread, 36k with 2 threads).
        self._env_threads = threads if threads > 2 else 0
        venv = self._make_env(settings.n_envs, context.seed, settings.num_levels, settings.start_level)
        self._venv: StatefulVecEnv = venv
        image = is_image_space(venv.observation_space)
        # An MLP's matrices are too small to split: on 2 cores with other work running,
        # CartPole PPO trained 8,192 steps in 11.4 s with one torch thread and 176 s with two
        # (OpenMP threads spin waiting for each other). CNNs keep the core budget.
        torch.set_num_threads(threads if image else 1)
        self.device = _resolve_device(context.device, image, context.local_rank)
        self._cuda = self.device.type == "cuda"
        self._reward_norm = VecNormalize(venv, norm_obs=False, norm_reward=settings.normalize_reward)
        self._rng = _rng_state(self._cuda)
        with self._own_rng():
            torch.manual_seed(context.seed)
            np.random.seed(context.seed % 2**32)
            random.seed(context.seed)
            with warnings.catch_warnings():
                # SB3 warns that MLP PPO is meant for the CPU; only an explicit --device cuda gets here.
                warnings.filterwarnings("ignore", message="You are trying to run PPO on the GPU")
                # The other hyperparameters are set by apply(), the one place that knows where SB3 reads them.
                self.model = self.algorithm(ImpalaPolicy if image else "MlpPolicy", self._reward_norm,
                                 n_steps=settings.n_steps, batch_size=settings.batch_size,
                                 device=self.device, verbose=0)
        # Start from the envs' first observations now (not inside the first ``learn``), so a
        # checkpoint written before any training holds them too. Reset the env SB3 steps
        # (``model.env``): for channels-last images it adds a ``VecTransposeImage`` on top.
        self.model._last_obs = self.model.env.reset()
        self.model._last_episode_starts = np.ones(settings.n_envs, dtype=bool)
        self.model.set_logger(configure(str(context.log_dir), ["tensorboard"]) if context.log_dir is not None
                              else Logger(folder=None, output_formats=[]))
        self._config: Config = {}
        self._note = ""
        self.apply(config)

    def _make_env(self, n_envs: int, seed: int, num_levels: int, start_level: int,
                  render: bool = False) -> StatefulVecEnv:
        return make_env(self.context.env, n_envs, seed, num_levels=num_levels, start_level=start_level,
                        distribution_mode=self.settings.distribution_mode, num_threads=self._env_threads,
                        render=render)

    @contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Run with this member's RNG states in the global RNGs; leave the caller's as they were."""
        outer = _rng_state(self._cuda)
        _set_rng_state(self._rng)
        try:
            yield
        finally:
            self._rng = _rng_state(self._cuda)
            _set_rng_state(outer)

    @property
    def config(self) -> Config:
        return dict(self._config)

    def _hyperparameters(self) -> dict[str, Any]:
        """Every hyperparameter's value in use: the config's, else the settings'."""
        return {name: getattr(self.settings, name) for name in self.settings_cls.hyperparameters} | self._config

    def apply(self, config: Config) -> None:
        """Set each hyperparameter in ``config`` everywhere SB3 reads it; others keep their values."""
        self.settings_cls.check_names(list(config))
        config = {name: int(v) if name in INTEGER_HYPERPARAMETERS else v for name, v in config.items()}
        for name, value in config.items():
            self.settings_cls.check(name, value)
        self._config = {**self._config, **config}
        hp = self._hyperparameters()
        model = self.model
        # train() resets the optimizer's lr from lr_schedule; the param groups are set too, so
        # the new value holds before the next update and after an optimizer-state load.
        model.learning_rate = hp["learning_rate"]
        model.lr_schedule = FloatSchedule(hp["learning_rate"])
        for group in model.policy.optimizer.param_groups:
            group["lr"] = hp["learning_rate"]
        model.clip_range = FloatSchedule(hp["clip_range"])
        model.clip_range_vf = None if hp["clip_range_vf"] is None else FloatSchedule(hp["clip_range_vf"])
        for name in ("ent_coef", "vf_coef", "max_grad_norm", "n_epochs", "batch_size", "gamma", "gae_lambda"):
            setattr(model, name, hp[name])
        # GAE reads copies held by the rollout buffer; the reward normaliser discounts on its own.
        model.rollout_buffer.gamma = hp["gamma"]
        model.rollout_buffer.gae_lambda = hp["gae_lambda"]
        self._reward_norm.gamma = hp["gamma"]

    @classmethod
    def round_steps(cls, settings: MemberSettings, steps: int) -> int:
        """Whole rollouts, the nearest number to ``steps`` and at least one: SB3 collects rollouts whole."""
        assert isinstance(settings, PPOSettings)
        rollout = settings.n_envs * settings.n_steps
        return max(1, round(steps / rollout)) * rollout

    def train(self, steps: int) -> float:
        """Train for :meth:`round_steps` env steps (whole rollouts, at least one).

        Returns:
            The mean return of the training episodes that started and ended during this
            call, NaN if none did (:meth:`score_note` then says how many were left out).

        Raises:
            Diverged: the loss, logits or weights went non-finite; the learner is back in
                the state it had when the call started, and the steps count as trained.
        """
        if steps <= 0:
            raise UsageError(f"steps to train must be positive, got {steps}")
        total = self.round_steps(self.settings, steps)
        episodes = _RoundEpisodes(self.model._last_episode_starts)
        good = self._learner_state()
        with self._own_rng():
            try:
                self.model.learn(total, callback=episodes, reset_num_timesteps=False, progress_bar=False)
                failure = None if self._finite() else "weights are not finite after the update"
            except (ValueError, RuntimeError) as err:
                # torch's Categorical(logits=nan) raises ValueError; other kernels a RuntimeError naming nan or inf
                if self._finite() and not _NON_FINITE.search(str(err)):
                    raise
                failure = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
        self.steps = self.model.num_timesteps = self.steps + total
        if failure is not None:
            self._set_learner_state(good)
            raise Diverged(failure)
        # The last update's losses stay in the logger until the next dump; write them now, at this step.
        self.model.logger.dump(self.model.num_timesteps)
        self._note = "" if episodes.returns else (
            f"no episode both started and ended in the round ({episodes.left_out} in progress at its start left out)")
        return float(np.mean(episodes.returns)) if episodes.returns else math.nan

    def score_note(self) -> str:
        return self._note

    def _finite(self) -> bool:
        """Whether the weights and the reward-normalisation statistics are all finite numbers."""
        norm = self._reward_norm.ret_rms
        return (all(bool(torch.isfinite(p).all()) for p in self.model.policy.parameters())
                and bool(np.isfinite(norm.mean).all() and np.isfinite(norm.var).all()))

    def _learner_state(self) -> dict[str, Any]:
        """The learner's state as a deep copy (weights, optimizer, reward statistics, update count)."""
        norm = self._reward_norm.ret_rms
        return {"policy": {k: v.detach().clone() for k, v in self.model.policy.state_dict().items()},
                "optimizer": copy.deepcopy(self.model.policy.optimizer.state_dict()),
                "reward_norm": (np.copy(norm.mean), np.copy(norm.var), norm.count),
                "n_updates": self.model._n_updates}

    def _set_learner_state(self, state: dict[str, Any]) -> None:
        model = self.model
        model.policy.load_state_dict(state["policy"])
        model.policy.optimizer.load_state_dict(state["optimizer"])
        norm = self._reward_norm.ret_rms
        norm.mean, norm.var, norm.count = state["reward_norm"]
        model._n_updates = state["n_updates"]
        self.apply(self._config)  # the optimizer load restored an lr into the param groups

    def evaluate(self, seed: int) -> float:
        """Mean return of ``eval_episodes`` finished episodes on unrestricted (unseen) levels.

        ``seed`` (the round's, shared by every member) seeds the test levels and the
        policy's action sampling, so members of a round meet the same levels. The
        test env is built fresh and the sampling uses forked RNGs: evaluating never
        changes what training does next. ``eval_episodes: 0`` returns NaN at no cost, as
        do non-finite weights (loaded from a diverged donor's file or set by hand),
        and so does a test run cut off by ``eval_max_steps`` (with a warning): the
        episodes that did finish are the short ones, so their mean is no test score.
        """
        s = self.settings
        if s.eval_episodes == 0 or not self._finite():
            return math.nan
        played = self.play(seed, s.eval_episodes, n_envs=s.eval_n_envs)
        if not played.complete:
            warnings.warn(f"member {self.context.index}: evaluation stopped at eval_max_steps={s.eval_max_steps:,} "
                          f"vector steps with {len(played.returns)} of {s.eval_episodes} test episodes finished, so "
                          f"its test score is NaN; raise eval_max_steps or give {self.context.env} a time limit",
                          stacklevel=2)
            return math.nan
        return float(np.mean(played.returns))

    def play(self, seed: int, episodes: int, *, deterministic: bool = False, train_levels: bool = False,
             n_envs: int | None = None, max_steps: int | None = None, render: bool = False,
             watchers: Sequence[Watcher] = ()) -> Played:
        """Play ``episodes`` episodes with the policy as it is, in a fresh env (see :func:`pbx.rollout.play`).

        Args:
            seed: seeds the levels and the policy's action sampling (forked RNGs: training is untouched).
            deterministic: take the most likely action instead of sampling one.
            train_levels: play the training levels (``num_levels`` from ``start_level``) instead of the
                unrestricted distribution; gymnasium ids have one distribution.
            n_envs: envs sharing the episodes (None: one per episode).
            max_steps: vector steps at most (None: ``eval_max_steps``).
            render: gymnasium envs render frames (``render_mode="rgb_array"``) for the watchers.
            watchers: see every observation (:class:`pbx.rollout.Watcher`).
        """
        s = self.settings
        levels = (s.num_levels, s.start_level) if train_levels else (0, 0)
        env = self._make_env(n_envs or episodes, seed, *levels, render=render)
        try:
            with torch.random.fork_rng(devices=[torch.cuda.current_device()] if self._cuda else []):
                torch.manual_seed(seed)
                return play(env, lambda obs: self.model.policy.predict(obs, deterministic=deterministic)[0],
                            episodes, max_steps or s.eval_max_steps, watchers)
        finally:
            env.close()

    def save(self, path: Path) -> None:
        state = self._checkpoint()
        durable_write(path, lambda tmp: torch.save(state, tmp))

    def _checkpoint(self) -> dict[str, Any]:
        """The state :meth:`save` writes, one entry per name in ``checkpoint_keys``."""
        model = self.model
        return {
            "format": CHECKPOINT_FORMAT,
            "member": self.context.index,
            "env": self.context.env,
            "n_envs": self.settings.n_envs,
            "steps": self.steps,
            "n_updates": model._n_updates,
            "config": self._config,
            "policy": model.policy.state_dict(),
            "optimizer": model.policy.optimizer.state_dict(),
            "reward_norm": {"mean": self._reward_norm.ret_rms.mean, "var": self._reward_norm.ret_rms.var,
                            "count": self._reward_norm.ret_rms.count, "returns": self._reward_norm.returns},
            "last_obs": model._last_obs,
            "last_episode_starts": model._last_episode_starts,
            "env_state": self._venv.get_state(),
            "rng": self._rng,
        }

    def load(self, path: Path, *, own: bool) -> None:
        state = _read_checkpoint(Path(path), self.checkpoint_keys)
        if (state["env"], state["n_envs"]) != (self.context.env, self.settings.n_envs):
            raise UsageError(f"{path} holds a member trained on {state['env']} with {state['n_envs']} envs; "
                             f"this member runs {self.context.env} with {self.settings.n_envs}")
        model = self.model
        model.policy.load_state_dict(state["policy"])
        model.policy.optimizer.load_state_dict(state["optimizer"])
        norm = state["reward_norm"]
        self._reward_norm.ret_rms.mean = norm["mean"]
        self._reward_norm.ret_rms.var = norm["var"]
        self._reward_norm.ret_rms.count = norm["count"]
        self.steps = model.num_timesteps = state["steps"]
        model._n_updates = state["n_updates"]
        if own:
            self._restore_world(state)
        if model.ep_info_buffer is not None:
            model.ep_info_buffer.clear()
        # The optimizer load restored the saved lr into the param groups; apply sets it again.
        self._config = {}
        self.apply(state["config"])

    def _restore_world(self, state: dict[str, Any]) -> None:
        """Restore the envs, the per-env discounted returns and the RNG streams: this member's own resume.

        An exploit (a checkpoint of another member) leaves them alone. Copied too,
        they would make the recipient replay the donor's next rollout step for step:
        same policy, same levels, same random actions, so a round's data twice.
        """
        model = self.model
        self._reward_norm.returns = state["reward_norm"]["returns"].copy()
        self._venv.set_state(state["env_state"])
        # Same values in the memory layout this env produces (ProcGen: channels-last strides):
        # conv kernels for other layouts differ in the last bit, and so would the next actions.
        model._last_obs = np.empty_like(model._last_obs)
        model._last_obs[...] = state["last_obs"]
        model._last_episode_starts = state["last_episode_starts"]
        self._rng = state["rng"]

    def close(self) -> None:
        self.model.env.close()
        self.model.logger.close()


def _read_checkpoint(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """A checkpoint's state; anything unreadable is one :class:`UsageError` naming the file and the way out."""
    fix = "the run folder is damaged: restore the file, or start a new run"
    if not path.is_file():
        raise UsageError(f"{path}: missing checkpoint; {fix}")
    try:
        # Checkpoints hold NumPy arrays and RNG tuples, so they are full pickles: load only
        # files pbx wrote (the run folder's own checkpoints).
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (EOFError, RuntimeError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile,
            AttributeError, ImportError, IndexError, KeyError, TypeError) as err:
        reason = "empty file" if path.stat().st_size == 0 else f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
        raise UsageError(f"{path}: unreadable checkpoint ({reason}); {fix}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise UsageError(f"{path}: not a pbx PPO checkpoint of format {CHECKPOINT_FORMAT} (found {found!r}); {fix}")
    missing = [key for key in keys if key not in state]
    if missing:
        raise UsageError(f"{path}: checkpoint lacks {missing}; {fix}")
    return state


def _deterministic_torch() -> None:
    """Deterministic kernels everywhere (cuDNN, cuBLAS); CUBLAS_WORKSPACE_CONFIG must precede CUDA's start."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def _check_device(device: str) -> None:
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no CUDA GPU is available; use --device cpu or auto")


def _resolve_device(device: str, image: bool, local_rank: int = 0) -> torch.device:
    """``auto``: the GPU for CNN policies; MLP policies stay on the CPU, where SB3 runs them faster.

    With several processes on a machine (MPI ranks), process ``local_rank`` takes GPU
    ``local_rank`` modulo the GPU count, and makes it the current device, so that
    ``cuda`` tensors, CUDA random states and cuDNN settings all mean that one GPU.
    """
    _check_device(device)
    if device == "auto":
        device = "cuda" if image and torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    gpu = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(gpu)
    return gpu
