"""One Stable-Baselines3 PPO agent as a population member.

Defaults are the ProcGen paper's PPO settings (Cobbe et al., 2020, "Leveraging
Procedural Generation to Benchmark Reinforcement Learning"): IMPALA CNN, 64 envs x
256 steps, 8 minibatches, 3 epochs, gamma 0.999, lambda 0.95, entropy 0.01, lr
5e-4, clip 0.2 (the value's too), reward normalisation; train on 200 easy levels,
test on the unrestricted level distribution. On ProcGen the loss is the reference
PPO's (``value_loss: reference``, :mod:`pbx.members.update`); what still departs
from that PPO is listed in ``docs/algorithms.md``.

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
import random
import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np
import torch

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import StatefulVecEnv, check_env, family, is_procgen, make_env  # isort: skip
from stable_baselines3.common.logger import Logger, configure
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.utils import FloatSchedule

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.members.base import Diverged, Member, MemberContext, MemberSettings
from pbx.members.checkpoint import CHECKPOINT_FORMAT, read_checkpoint
from pbx.members.episodes import RoundEpisodes
from pbx.members.impala import ImpalaPolicy
from pbx.members.normalize import Normalizer
from pbx.members.ppo_settings import INTEGER_HYPERPARAMETERS, PPOSettings, fit_rollout
from pbx.members.process import (LOCAL_RANKS_VARS, check_device, deterministic_torch, resolve_device,  # noqa: F401
                                 rng_state, seeded_cuda_state, set_rng_state, thread_budget)
from pbx.members.update import PPOUpdate
from pbx.rollout import Played, Watcher, play
from pbx.space import Config, Space

_NON_FINITE = re.compile(r"\b(nan|inf)\b", re.IGNORECASE)
"""An error message about non-finite numbers (whole words: "information" is not one)."""


class PPOMember(Member):
    """SB3 PPO on a ProcGen game (IMPALA CNN) or a gymnasium id (MLP)."""

    settings_cls = PPOSettings
    default_space = "ppo_procgen.yaml"
    settings: PPOSettings
    algorithm: ClassVar[type[PPOUpdate]] = PPOUpdate
    """The SB3 class trained; a subclass may add to its update (see :mod:`pbx.members.drac`)."""
    name: ClassVar[str] = "PPO"
    """What :meth:`describe` calls the algorithm."""
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
        """The env's family's schedule (:mod:`pbx.envs.families`). ProcGen: the PB2 paper's (25M steps, exploit
        every 500k); continuous control: the PB2 paper's (1M steps, every 50k); classic control: about 30
        rounds of two default rollouts, where PPO solves CartPole in ~360k steps."""
        return dict(family(env).run)

    @classmethod
    def setting_defaults(cls, env: str) -> dict[str, object]:
        """The env's family's settings. ProcGen: the ProcGen paper's PPO (the settings' defaults). Classic
        control: SB3's value loss, under which ``ppo_classic.yaml``'s defaults (rl-zoo's CartPole PPO) were
        tuned. Continuous control: SB3's PPO defaults with rl-zoo's normalised observations and rewards."""
        return dict(family(env).settings)

    @classmethod
    def resume_note(cls, env: str) -> str:
        """What a resume cannot restore exactly on ``env``, for the run's start line ("" when it restores all)."""
        task = family(env)
        if task.resume == "exact":
            return ""
        return (f"{env}'s envs cannot be saved ({task.name}): a resume restarts the episodes in progress, "
                f"so the rounds after it differ from an uninterrupted run's (the finished rounds stay as they are)")

    @classmethod
    def describe(cls, settings: MemberSettings) -> str:
        """``"PPO (reference loss)"`` or ``"PPO (SB3 loss)"`` (a subclass's ``name`` in place of PPO)."""
        assert isinstance(settings, PPOSettings)
        return f"{cls.name} ({'reference' if settings.value_loss == 'reference' else 'SB3'} loss)"

    @classmethod
    def space_file(cls, env: str) -> str:
        """The search space for ``env`` when the run names none: ProcGen's, or a classic-control one."""
        # A subclass's own ProcGen space (DrAC's PB2-Mix space) before the family's plain PPO one.
        return cls.default_space if is_procgen(env) else family(env).space

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        if not isinstance(settings, cls.settings_cls):
            raise UsageError(f"{cls.__name__} needs {cls.settings_cls.__name__}, got {type(settings).__name__}")
        settings.check_space(space)
        check_device(device)

    @classmethod
    def feasible(cls, config: Config, settings: MemberSettings, space: Space) -> tuple[Config, list[str]]:
        """A searched rollout length or minibatch size moved to the nearest pair SB3 can train (the minibatch
        dividing the rollout), and the moves as operations (:func:`~pbx.members.ppo_settings.fit_rollout`)."""
        assert isinstance(settings, PPOSettings)
        return fit_rollout(config, settings, space)

    def __init__(self, context: MemberContext, settings: PPOSettings, config: Config) -> None:
        super().__init__(context, settings, config)
        if settings.deterministic:
            deterministic_torch()
        threads = thread_budget()
        # Handing steps to worker threads costs more than it saves on a core or two
        # (bigfish, 64 envs, 2 cores: 55k steps/s in the calling thread, 36k with 2 threads).
        self._env_threads = threads if threads > 2 else 0
        venv = self._make_env(settings.n_envs, context.seed, settings.num_levels, settings.start_level)
        self._venv: StatefulVecEnv = venv
        image = is_image_space(venv.observation_space)
        if image and (settings.normalize_obs or settings.net_arch is not None):
            bad = "normalize_obs" if settings.normalize_obs else "net_arch"
            raise UsageError(f"{bad} is for MLP policies on vector observations; {context.env}'s observations are "
                             f"images (IMPALA CNN): leave {bad} at its default")
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
                # SB3 warns that MLP PPO is meant for the CPU; only an explicit --device cuda gets here.
                warnings.filterwarnings("ignore", message="You are trying to run PPO on the GPU")
                # The other hyperparameters are set by apply(), the one place that knows where SB3 reads them.
                hp = self._hyperparameters(config)
                net = {} if settings.net_arch is None else {"policy_kwargs": {"net_arch": list(settings.net_arch)}}
                self.model = self.algorithm(ImpalaPolicy if image else "MlpPolicy", self._norm,
                                            n_steps=int(hp["n_steps"]), batch_size=int(hp["batch_size"]),
                                            value_loss=settings.value_loss, device=self.device, verbose=0, **net)
        # Start from the envs' first observations now (not inside the first ``learn``), so a
        # checkpoint written before any training holds them too. Reset the env SB3 steps
        # (``model.env``): for channels-last images it adds a ``VecTransposeImage`` on top.
        self.model._last_obs = self.model.env.reset()
        self.model._last_episode_starts = np.ones(settings.n_envs, dtype=bool)
        self.model.set_logger(configure(str(context.log_dir), ["tensorboard"]) if context.log_dir is not None
                              else Logger(folder=None, output_formats=[]))
        self._config: Config = {}
        self._note = ""
        self._curve: list[tuple[int, float]] = []
        self.apply(config)

    def _make_env(self, n_envs: int, seed: int, num_levels: int, start_level: int,
                  render: bool = False) -> StatefulVecEnv:
        return make_env(self.context.env, n_envs, seed, num_levels=num_levels, start_level=start_level,
                        distribution_mode=self.settings.distribution_mode, num_threads=self._env_threads,
                        render=render)

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
        return ({name: getattr(self.settings, name) for name in self.settings_cls.hyperparameters}
                | (self._config if config is None else config))

    def apply(self, config: Config) -> None:
        """Set each hyperparameter in ``config`` everywhere SB3 reads it; others keep their values."""
        self.settings.check_searched(list(config))
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
        # The reference value loss reads clip_range (tied); SB3's reads clip_range_vf, off for the reference's.
        model.clip_range = FloatSchedule(hp["clip_range"])
        sb3_vf = hp["clip_range_vf"] if self.settings.value_loss == "sb3" else None
        model.clip_range_vf = None if sb3_vf is None else FloatSchedule(sb3_vf)
        for name in ("ent_coef", "vf_coef", "max_grad_norm", "n_epochs", "batch_size", "gamma", "gae_lambda"):
            setattr(model, name, hp[name])
        if hp["n_steps"] != model.n_steps:
            # SB3 sizes the buffer once, in _setup_model; collect_rollouts fills model.n_steps steps per env.
            # Between rounds the buffer holds nothing that is still needed, so a new one loses nothing.
            model.n_steps = hp["n_steps"]
            model.rollout_buffer = model.rollout_buffer_class(
                model.n_steps, model.observation_space, model.action_space, device=model.device,
                gamma=hp["gamma"], gae_lambda=hp["gae_lambda"], n_envs=model.n_envs, **model.rollout_buffer_kwargs)
        # GAE reads copies held by the rollout buffer; the reward normaliser discounts on its own.
        model.rollout_buffer.gamma = hp["gamma"]
        model.rollout_buffer.gae_lambda = hp["gae_lambda"]
        self._norm.gamma = hp["gamma"]

    @classmethod
    def round_steps(cls, settings: MemberSettings, steps: int, space: Space) -> int:
        """Whole rollouts, the nearest number to ``steps`` and at least one: SB3 collects rollouts whole. Where
        the space searches the rollout length each member's differs, so the plan is ``steps`` itself and each
        member ends a round at its own rollout's boundary nearest the plan (:meth:`train`)."""
        assert isinstance(settings, PPOSettings)
        return steps if "n_steps" in space.params else cls.steps_trained(settings, {}, steps)

    @classmethod
    def steps_trained(cls, settings: MemberSettings, config: Config, steps: int) -> int:
        """Whole rollouts of the config's length (the settings' where the space does not search it), the number
        nearest ``steps`` and at least one."""
        assert isinstance(settings, PPOSettings)
        rollout = settings.n_envs * int(config.get("n_steps", settings.n_steps))
        return max(1, round(steps / rollout)) * rollout

    def train(self, steps: int) -> float:
        """Train the whole rollouts of the current length nearest to ``steps`` env steps (at least one).

        Returns:
            The mean return of the training episodes that started and ended during this
            call, NaN if none did (:meth:`score_note` then says how many were left out).

        Raises:
            Diverged: the loss, logits or weights went non-finite; the learner is back in
                the state it had when the call started, and the steps count as trained.
        """
        if steps <= 0:
            raise UsageError(f"steps to train must be positive, got {steps}")
        total = self.steps_trained(self.settings, self._config, steps)
        episodes = RoundEpisodes(self.model._last_episode_starts)
        self._curve = []
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
        self._curve = episodes.curve
        self._note = "" if episodes.returns else (
            f"no episode both started and ended in the round ({episodes.left_out} in progress at its start left out)")
        return float(np.mean(episodes.returns)) if episodes.returns else math.nan

    def curve(self) -> list[tuple[int, float]]:
        """After each rollout in which scored episodes ended, their mean return (the round's score is the mean
        over all of them): ``n_envs * n_steps`` env steps apart at the finest."""
        return list(self._curve)

    def score_note(self) -> str:
        return self._note

    def _finite(self) -> bool:
        """Whether the weights and the normalisation statistics are all finite numbers."""
        return all(bool(torch.isfinite(p).all()) for p in self.model.policy.parameters()) and self._norm.finite()

    def _learner_state(self) -> dict[str, Any]:
        """The learner's state as a deep copy (weights, optimizer, normalisation statistics, update count)."""
        return {"policy": {k: v.detach().clone() for k, v in self.model.policy.state_dict().items()},
                "optimizer": copy.deepcopy(self.model.policy.optimizer.state_dict()),
                "norm": self._norm.learner_state(),
                "n_updates": self.model._n_updates}

    def _set_learner_state(self, state: dict[str, Any]) -> None:
        model = self.model
        model.policy.load_state_dict(state["policy"])
        model.policy.optimizer.load_state_dict(state["optimizer"])
        self._norm.set_learner_state(state["norm"])
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
                return play(env, lambda obs: self.act(obs, deterministic), episodes, max_steps or s.eval_max_steps,
                            watchers)
        finally:
            env.close()

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """The policy's actions on raw observations of a test env, normalised with the statistics frozen."""
        return self.model.policy.predict(self._norm.observe(obs), deterministic=deterministic)[0]

    def save(self, path: Path) -> None:
        state = self._checkpoint()
        durable_write(path, lambda tmp: torch.save(state, tmp))

    def _checkpoint(self) -> dict[str, Any]:
        """The state :meth:`save` writes, one entry per name in ``checkpoint_keys``."""
        model = self.model
        norm = self._norm.learner_state()
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
            "reward_norm": {**norm["reward"], "returns": self._norm.returns},
            "obs_norm": norm["obs"],
            "raw_obs": self._norm.raw_obs() if norm["obs"] is not None else None,
            "last_obs": model._last_obs,
            "last_episode_starts": model._last_episode_starts,
            "env_state": self._venv.get_state(),
            "rng": self._rng,
            "value_loss": self.settings.value_loss,
        }

    def load(self, path: Path, *, own: bool) -> None:
        state = read_checkpoint(Path(path), self.checkpoint_keys)
        if (state["env"], state["n_envs"]) != (self.context.env, self.settings.n_envs):
            raise UsageError(f"{path} holds a member trained on {state['env']} with {state['n_envs']} envs; "
                             f"this member runs {self.context.env} with {self.settings.n_envs}")
        model = self.model
        model.policy.load_state_dict(state["policy"])
        model.policy.optimizer.load_state_dict(state["optimizer"])
        # A checkpoint from before observation statistics were saved has none (it was trained without them).
        obs_norm = state.get("obs_norm")
        if (obs_norm is not None) != self.settings.normalize_obs:
            raise UsageError(f"{path} was trained with normalize_obs {obs_norm is not None}, this run's settings "
                             f"say {self.settings.normalize_obs}; the run folder does not match its config.yaml")
        self._norm.set_learner_state({"reward": state["reward_norm"], "obs": obs_norm})
        self.steps = model.num_timesteps = state["steps"]
        model._n_updates = state["n_updates"]
        if own:
            # a checkpoint from before the setting existed was trained with SB3's loss
            trained = state.get("value_loss", "sb3")
            if trained != self.settings.value_loss:
                raise UsageError(f"{path} was trained with value_loss {trained}, this run's settings say "
                                 f"{self.settings.value_loss}: set value_loss: {trained} in the member section "
                                 f"of the run's config.yaml to resume it as it was trained")
            self._restore_world(state, path)
        elif obs_norm is not None:
            # The envs' latest observations, normalised by the recipient's old statistics, as the donor's
            # statistics see them: the next action is the donor's policy's on the same raw observation.
            model._last_obs = self._norm.observe(self._norm.raw_obs())
        if model.ep_info_buffer is not None:
            model.ep_info_buffer.clear()
        # The optimizer load restored the saved lr into the param groups; apply sets it again.
        self._config = {}
        self.apply(state["config"])

    def _restore_world(self, state: dict[str, Any], path: Path) -> None:
        """Restore the envs, the per-env discounted returns and the RNG streams: this member's own resume.

        An exploit (a checkpoint of another member) leaves them alone. Copied too,
        they would make the recipient replay the donor's next rollout step for step:
        same policy, same levels, same random actions, so a round's data twice.
        """
        model = self.model
        self._rng = dict(state["rng"])
        if state["env_state"] is None:
            self._restart_episodes()
        else:
            self._norm.returns = state["reward_norm"]["returns"].copy()
            self._venv.set_state(state["env_state"])
            # Same values in the memory layout this env produces (ProcGen: channels-last strides):
            # conv kernels for other layouts differ in the last bit, and so would the next actions.
            model._last_obs = np.empty_like(model._last_obs)
            model._last_obs[...] = state["last_obs"]
            model._last_episode_starts = state["last_episode_starts"]
            if state.get("raw_obs") is not None:
                self._norm.old_obs = state["raw_obs"]
        # A run may resume on another device (--resume -m device=...): the CPU streams carry on as they were;
        # a GPU run resumed on the CPU drops its CUDA stream, a CPU run resumed on a GPU starts one of the
        # member's own (seeded from its seed and step count), not the one the process's other members share.
        if not self._cuda:
            self._rng["cuda"] = None
        elif self._rng["cuda"] is None:
            self._rng["cuda"] = seeded_cuda_state(int(np.random.SeedSequence(
                self.context.seed, spawn_key=(2, self.steps)).generate_state(1, np.uint64)[0]))

    def _restart_episodes(self) -> None:
        """Start new episodes in every env, for a resume whose envs could not be saved (a Box2D world).

        The seeds are the member's own and its step count's, so resuming twice restarts alike; the
        observation statistics are left as saved (the first observations do not update them here).
        """
        self._venv.seed(int(np.random.SeedSequence(self.context.seed, spawn_key=(3, self.steps))
                            .generate_state(1)[0] % 2**31))
        training, self._norm.training = self._norm.training, False
        try:
            self.model._last_obs = self._norm.reset()
        finally:
            self._norm.training = training
        self.model._last_episode_starts = np.ones(self.settings.n_envs, dtype=bool)

    def close(self) -> None:
        self.model.env.close()
        self.model.logger.close()
