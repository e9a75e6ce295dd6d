"""What every Stable-Baselines3 agent needs to be a population member that trains; an agent file adds its loss.

:class:`SB3Member` holds what PPO, A2C, SAC, TD3 and DQN share once a member is built:
envs from the task family (:mod:`pbx.envs.families`), observation and reward statistics as
learner state (:mod:`pbx.members.sb3.normalize`), random streams of the member's own, a
diverged update rolled back, checkpoints that continue bit for bit
(:mod:`pbx.members.sb3.checkpoint`), test episodes, the device. What an agent declares, and
what a run asks of its class before building any member, is :class:`~pbx.members.sb3.agent.SB3Agent`;
an agent (``ppo/ppo.py``, ``a2c.py``, the off-policy ones through :mod:`pbx.members.offpolicy.member`)
adds which SB3 class it trains and how it is built, and the hyperparameters SB3 reads through a
copy or schedule (``_set``).

SB3 reads several hyperparameters through schedules or copies, so setting the
attribute alone changes nothing (SB3 issues #735, #845, #942, #1336, #1877):
:meth:`SB3Member.apply` writes each value everywhere SB3 reads it. SB3 also draws from
the process-wide torch / NumPy / ``random`` RNGs; each member keeps its own copy of those
states and swaps it in while it trains, so members in one process do not perturb each
other and a checkpoint continues bit for bit. What a checkpoint and an exploit hold is
SB3's own table of what it saves (:mod:`pbx.members.sb3.learner`): the policy (target
networks included), every optimizer, and loose tensors such as SAC's entropy coefficient.
"""

from __future__ import annotations

import copy
import math
import random
import re
import warnings
from abc import abstractmethod
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import StatefulVecEnv, make_env  # isort: skip
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import FloatSchedule
from stable_baselines3.common.vec_env import VecTransposeImage

from pbx.errors import UsageError
from pbx.members.base import Diverged, MemberContext, Stopped
from pbx.members.sb3.agent import SB3Agent
from pbx.members.sb3.checkpoint import Checkpointed
from pbx.members.sb3.episodes import Boundary, Halt, InRound, RoundEpisodes
from pbx.members.sb3.learner import Learner
from pbx.members.sb3.log import member_logger
from pbx.members.sb3.normalize import Normalizer
from pbx.members.sb3.process import deterministic_torch, resolve_device, rng_state, set_rng_state, thread_budget
from pbx.members.sb3.settings import SB3Settings
from pbx.rollout import Played, Watcher, play
from pbx.space import Config

_NON_FINITE = re.compile(r"\b(nan|inf)\b", re.IGNORECASE)
"""An error message about non-finite numbers (whole words: "information" is not one)."""


def set_rollout(model: OnPolicyAlgorithm, hp: Mapping[str, Any]) -> None:
    """An on-policy agent's rollout (PPO's, A2C's): its length ``n_steps``, and the discount and GAE lambda the
    rollout buffer holds copies of, which it reads when it computes the returns."""
    if hp["n_steps"] != model.n_steps:
        # SB3 sizes the buffer once, in _setup_model; collect_rollouts fills model.n_steps steps per env.
        # Between rounds the buffer holds nothing that is still needed, so a new one loses nothing.
        model.n_steps = hp["n_steps"]
        model.rollout_buffer = model.rollout_buffer_class(
            model.n_steps, model.observation_space, model.action_space, device=model.device,
            gamma=hp["gamma"], gae_lambda=hp["gae_lambda"], n_envs=model.n_envs, **model.rollout_buffer_kwargs)
    model.rollout_buffer.gamma = hp["gamma"]
    model.rollout_buffer.gae_lambda = hp["gae_lambda"]


class SB3Member(Checkpointed, SB3Agent):
    """An SB3 algorithm on a gymnasium id (PPO also on ProcGen), with everything a population member needs."""

    settings: SB3Settings

    def __init__(self, context: MemberContext, settings: SB3Settings, config: Config) -> None:
        super().__init__(context, settings, config)
        if settings.deterministic:
            deterministic_torch()
        threads = thread_budget()
        # Handing steps to worker threads costs more than it saves on a core or two
        # (bigfish, 64 envs, 2 cores: 55k steps/s in the calling thread, 36k with 2 threads).
        self._env_threads = threads if threads > 2 else 0
        venv = self._make_env(settings.n_envs, context.seed)
        self._venv: StatefulVecEnv = venv
        image = is_image_space(venv.observation_space)  # the settings suit it: validate_env
        # An MLP's matrices are too small to split: on 2 cores with other work running,
        # CartPole PPO trained 8,192 steps in 11.4 s with one torch thread and 176 s with two
        # (OpenMP threads spin waiting for each other). CNNs keep the core budget.
        torch.set_num_threads(threads if image else 1)
        self.device = resolve_device(context.device, image, context.local_rank)
        self._cuda = self.device.type == "cuda"
        self._norm = Normalizer(venv, norm_obs=settings.normalize_obs, norm_reward=settings.normalize_reward)
        self._rng = rng_state(self._cuda)
        with self._own_rng():
            torch.manual_seed(context.seed)
            np.random.seed(context.seed % 2**32)
            random.seed(context.seed)
            with warnings.catch_warnings():
                # SB3 warns that an MLP agent is meant for the CPU; only an explicit --device cuda gets here.
                warnings.filterwarnings("ignore", message="You are trying to run .* on the GPU")
                # The other hyperparameters are set by apply(), the one place that knows where SB3 reads them.
                self.model: BaseAlgorithm = self._build(self._hyperparameters(config), image)
        if isinstance(self.model.env, VecTransposeImage):
            self._norm.transpose = self.model.env
        self._learner = Learner(self.model)
        # Start from the envs' first observations now (not inside the first ``learn``), so a
        # checkpoint written before any training holds them too. Reset the env SB3 steps
        # (``model.env``): for channels-last images it adds a ``VecTransposeImage`` on top.
        self._started(self.model.env.reset())
        self.model.set_logger(member_logger(context.log_dir))
        self._config: Config = {}
        self._note = ""
        self._curve: list[tuple[int, float]] = []
        self._round: InRound | None = None
        """The round in progress between a :class:`Stopped` and the call that finishes it (saved with the member)."""
        self.apply(config)

    @abstractmethod
    def _build(self, hp: Mapping[str, Any], image: bool) -> BaseAlgorithm:
        """The SB3 algorithm on ``self._norm`` with the values it must have from the start (buffer sizes), on
        ``self.device``; called with the member's RNG states in place."""

    def _make_env(self, n_envs: int, seed: int, *, train_levels: bool = True, render: bool = False) -> StatefulVecEnv:
        """``n_envs`` envs of the run's env seeded from ``seed``: its family's training envs, or with
        ``train_levels`` False those test episodes play."""
        return make_env(self.context.env, n_envs, seed, self.context.env_settings, train=train_levels,
                        num_threads=self._env_threads, render=render)

    def _started(self, obs: np.ndarray) -> None:
        """Take ``obs`` (from a reset) as the first observations of new episodes in every env."""
        self.model._last_obs = obs  # type: ignore[assignment]
        self.model._last_episode_starts = np.ones(self.settings.n_envs, dtype=bool)

    @contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Run with this member's RNG states in the global RNGs; leave the caller's as they were."""
        outer = rng_state(self._cuda)
        set_rng_state(self._rng)
        try:
            yield
        finally:
            self._rng = rng_state(self._cuda)
            set_rng_state(outer)

    @property
    def config(self) -> Config:
        return dict(self._config)

    def _hyperparameters(self, config: Config | None = None) -> dict[str, Any]:
        """Every hyperparameter's value in use (or in ``config``): the config's, else the settings'."""
        return ({name: getattr(self.settings, name) for name in self.settings_cls.hyperparameters}  # type: ignore
                | (self._config if config is None else config))

    def apply(self, config: Config) -> None:
        """Set each hyperparameter in ``config`` everywhere SB3 reads it; others keep their values."""
        self.settings.check_searched(list(config))
        config = {name: int(v) if name in self.settings.integers else v for name, v in config.items()}
        for name, value in config.items():
            self.settings.check(name, value)
        self._config = {**self._config, **config}
        hp = self._hyperparameters()
        model = self.model
        # train() resets each optimizer's lr from lr_schedule; the param groups are set too, so
        # the new value holds before the next update and after an optimizer-state load.
        model.learning_rate = hp["learning_rate"]
        model.lr_schedule = FloatSchedule(hp["learning_rate"])
        for optimizer in self._learner.optimizers():
            for group in optimizer.param_groups:
                group["lr"] = hp["learning_rate"]
        for name in self.live:
            setattr(model, name, hp[name])
        # the reward normaliser discounts on its own: with the agent's gamma, or with a discount of its own
        self._norm.gamma = hp["gamma"] if self.settings.normalize_gamma is None else self.settings.normalize_gamma
        self._set(hp)

    def _set(self, hp: Mapping[str, Any]) -> None:
        """Set the hyperparameters SB3 reads through a copy or a schedule (called by :meth:`apply`)."""

    stops_inside = True

    def train(self, steps: int, stop: Callable[[], bool] | None = None) -> float:
        """Train the whole chunks of the current length nearest to ``steps`` env steps (at least one), or go on
        with the round in progress to its end.

        Args:
            steps: env steps to train (ignored when a round is in progress: see :class:`~pbx.members.Member`).
            stop: asked before each chunk (rollout); where it says so the member raises :class:`Stopped`.

        Returns:
            The mean return of the training episodes that started and ended during the round (this call, or
            the calls of one round that :class:`Stopped` split), NaN if none did (:meth:`score_note` then says
            how many were left out).

        Raises:
            Diverged: the loss, the weights or an action went non-finite; the learner is
                back in the state it had when the round started, and the steps count as trained.
            Stopped: ``stop()`` said so before a chunk; the round goes on at the next call.
        """
        if self._round is None:
            if steps <= 0:
                raise UsageError(f"steps to train must be positive, got {steps}")
            self._round = InRound(self.steps + self.steps_trained(self.settings, self._config, steps),
                                  RoundEpisodes(self.model._last_episode_starts),  # type: ignore[arg-type]
                                  self._learner_state())
        round_, episodes = self._round, self._round.episodes
        self._curve = []
        callback = [episodes] if stop is None else [episodes, Boundary(stop)]
        halted = False
        with self._own_rng():
            try:
                self.model.learn(round_.end - self.steps, callback=CallbackList(callback), reset_num_timesteps=False,
                                 progress_bar=False)
                failure = None if self._finite() else "weights are not finite after the update"
            except Halt:
                halted, failure = True, None
            except Diverged as err:
                # an off-policy agent refused a non-finite action before its envs stepped it (pbx.members.offpolicy.member)
                failure = str(err)
            except (ValueError, RuntimeError) as err:
                # torch's Categorical(logits=nan) raises ValueError; other kernels a RuntimeError naming nan or inf
                if self._finite() and not _NON_FINITE.search(str(err)):
                    raise
                failure = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
        if halted:
            self.steps = int(self.model.num_timesteps)  # whole rollouts: the halt comes before one
            raise Stopped(f"member {self.context.index} stopped at {self.steps:,} of {round_.end:,} steps")
        self._round = None
        self.steps = self.model.num_timesteps = round_.end
        if failure is not None:
            self._set_learner_state(round_.start)
            raise Diverged(failure)
        # The last update's losses stay in the logger until the next dump; write them now, at this step.
        self.model.logger.dump(self.model.num_timesteps)
        self._curve = episodes.curve
        self._note = "" if episodes.returns else (
            f"no episode both started and ended in the round ({episodes.left_out} in progress at its start left out)")
        return float(np.mean(episodes.returns)) if episodes.returns else math.nan

    def curve(self) -> list[tuple[int, float]]:
        """After each chunk in which scored episodes ended, their mean return (the round's score is the mean
        over all of them)."""
        return list(self._curve)

    def score_note(self) -> str:
        return self._note

    def recent_score(self) -> float:
        """SB3's own window of the last 100 finished episodes (``ep_info_buffer``, filled from the envs' monitor
        entries as train-procgen's ``VecMonitor(keep_buf=100)`` fills its own): their mean return."""
        window = self.model.ep_info_buffer
        return float(np.mean([episode["r"] for episode in window])) if window else math.nan

    def _finite(self) -> bool:
        """Whether the weights, the loose tensors and the normalisation statistics are all finite numbers."""
        return self._learner.finite() and self._norm.finite()

    def _learner_state(self) -> dict[str, Any]:
        """The learner's state as a deep copy (weights, optimizers, loose tensors, statistics, update count)."""
        return {"tensors": copy.deepcopy(self._learner.state()), "norm": self._norm.learner_state(),
                "n_updates": self.model._n_updates}

    def _set_learner_state(self, state: dict[str, Any]) -> None:
        self._learner.load(state["tensors"])
        self._norm.set_learner_state(state["norm"])
        self.model._n_updates = state["n_updates"]
        self.apply(self._config)  # the optimizer load restored an lr into the param groups

    def evaluate(self, seed: int) -> float:
        """Mean return of ``eval_episodes`` finished episodes on held-out conditions (ProcGen: unseen levels).

        ``seed`` (the round's, shared by every member) seeds the test env and the
        policy's action sampling, so members of a round meet the same conditions. The
        test env is built fresh and the sampling uses forked RNGs: evaluating never
        changes what training does next. ``eval_episodes: 0`` returns NaN at no cost, as
        do non-finite weights (loaded from a diverged donor's file or set by hand),
        and so does a test run cut off by ``eval_max_steps`` (with a warning): the
        episodes that did finish are the short ones, so their mean is no test score.
        """
        s = self.settings
        deterministic = self.test_deterministic if s.eval_deterministic is None else s.eval_deterministic
        return self._mean_return(seed, deterministic, train_levels=False, what="test")

    def score_state(self, seed: int) -> float:
        """Mean return of ``eval_episodes`` finished episodes on the training conditions (ProcGen: the training
        levels), actions sampled as training samples them: what :meth:`train` scores, of the policy as it is.
        Forked RNGs and a fresh env, as :meth:`evaluate`: training is untouched; NaN as there."""
        return self._mean_return(seed, False, train_levels=True, what="start")

    def _mean_return(self, seed: int, deterministic: bool, *, train_levels: bool, what: str) -> float:
        """The mean return of ``eval_episodes`` episodes played from ``seed`` (:meth:`play`), or NaN: none asked
        for, non-finite weights, or ``eval_max_steps`` reached first (with a warning naming ``what`` score)."""
        s = self.settings
        if s.eval_episodes == 0 or not self._finite():
            return math.nan
        played = self.play(seed, s.eval_episodes, deterministic=deterministic, train_levels=train_levels,
                           n_envs=s.eval_n_envs)
        if not played.complete:
            warnings.warn(f"member {self.context.index}: evaluation stopped at eval_max_steps={s.eval_max_steps:,} "
                          f"vector steps with {len(played.returns)} of {s.eval_episodes} {what} episodes finished, "
                          f"so its {what} score is NaN; raise eval_max_steps or give {self.context.env} a time limit",
                          stacklevel=3)
            return math.nan
        return float(np.mean(played.returns))

    def play(self, seed: int, episodes: int, *, deterministic: bool = False, train_levels: bool = False,
             n_envs: int | None = None, max_steps: int | None = None, render: bool = False,
             watchers: Sequence[Watcher] = ()) -> Played:
        """Play ``episodes`` episodes with the policy as it is, in a fresh env (see :func:`pbx.rollout.play`).

        Args:
            seed: seeds the env and the policy's action sampling (forked RNGs: training is untouched).
            deterministic: take the most likely action instead of sampling one.
            train_levels: play ProcGen's training levels (``num_levels`` from ``start_level``) instead of the
                unrestricted distribution; gymnasium ids have one distribution.
            n_envs: envs sharing the episodes (None: one per episode).
            max_steps: vector steps at most (None: ``eval_max_steps``).
            render: gymnasium envs render frames (``render_mode="rgb_array"``) for the watchers.
            watchers: see every observation (:class:`pbx.rollout.Watcher`).
        """
        env = self._make_env(n_envs or episodes, seed, train_levels=train_levels, render=render)
        try:
            with torch.random.fork_rng(devices=[torch.cuda.current_device()] if self._cuda else []):
                torch.manual_seed(seed)
                return play(env, lambda obs: self.act(obs, deterministic), episodes,
                            max_steps or self.settings.eval_max_steps, watchers)
        finally:
            env.close()

    resets_weights = True

    def reset_weights(self, kind: str, seed: int, shrink: float = 1.0, perturb: float = 0.0, *,
                      clear_optimizer: bool = False) -> None:
        """The policy's weights (target networks included) shrunk towards, or replaced by, a fresh policy's;
        every optimizer's state kept (IPBT's reference changes only the checkpoint's ``model_state_dict``), or
        cleared with ``clear_optimizer``. The fresh policy is built as SB3 builds one, from ``seed`` alone
        (the member's own random streams are left as they were); the normalisation statistics stay, as they
        measure the env, which a restart does not change."""
        policy = self.model.policy
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if self._cuda else []):
            torch.manual_seed(seed)
            fresh = self.model.policy_class(self.model.observation_space, self.model.action_space,
                                            self.model.lr_schedule, **self.model.policy_kwargs).to(self.device)
        mine, new = policy.state_dict(), fresh.state_dict()
        with torch.no_grad():
            for name, value in mine.items():
                if torch.is_floating_point(value):
                    value.copy_(new[name] if kind == "reinit" else shrink * value + perturb * new[name])
        if clear_optimizer:
            for optimizer in self._learner.optimizers():
                optimizer.state.clear()

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """The policy's actions on raw observations of a test env, normalised with the statistics frozen."""
        return self.model.policy.predict(self._norm.observe(obs), deterministic=deterministic)[0]

    def close(self) -> None:
        self.model.env.close()
        self.model.logger.close()