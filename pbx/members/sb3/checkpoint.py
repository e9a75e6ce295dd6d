"""How an SB3 member is saved, resumed and copied: the checkpoint half of :class:`pbx.members.sb3.member.SB3Member`.

A checkpoint holds everything a member needs to continue bit for bit (the learner as SB3's own
save table lists it, the normalisation statistics, the envs, the random streams, the step and
update counts); an exploit takes the learner and leaves the recipient's world (envs, streams)
as it was. :meth:`Checkpointed.export` writes the learner as plain SB3 files instead, for use outside pbx.
The methods read the member's attributes (``model``, ``_norm``, ``_venv``,
``_learner``, ``_rng``, ``settings``, ``context``), which :class:`~pbx.members.sb3.member.SB3Member` sets up.
The file is one ``torch.save`` of that state, read back with one clear error for any damage
(:func:`read_checkpoint`).
"""

from __future__ import annotations

import copy
import pickle
import zipfile
from collections import deque
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.vec_env import VecNormalize

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.members.sb3.episodes import InRound
from pbx.members.sb3.process import seeded_cuda_state


CHECKPOINT_FORMAT = 1
"""Bumped when a checkpoint's meaning changes; keys added since (``obs_norm``) are read with defaults."""


def read_checkpoint(path: Path, keys: tuple[str, ...], algo: str = "ppo") -> dict[str, Any]:
    """A checkpoint's state of an ``algo`` member (an ``--algo`` name); anything unreadable, or a checkpoint of
    another algorithm, is one :class:`UsageError` naming the file and the way out."""
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
        raise UsageError(f"{path}: not a pbx {algo.upper()} checkpoint of format {CHECKPOINT_FORMAT} (found {found!r}); "
                         f"{fix}")
    trained = state.get("algo", "ppo")  # written before other agents existed: PPO's
    if trained != algo:
        raise UsageError(f"{path}: a checkpoint of --algo {trained}, not {algo}; {fix}")
    missing = [key for key in keys if key not in state]
    if missing:
        raise UsageError(f"{path}: checkpoint lacks {missing}; {fix}")
    return state


class Checkpointed:
    """:meth:`save` and :meth:`load` of an SB3 member, and what a resume or an exploit restores."""

    model: Any
    settings: Any
    context: Any
    algo: str
    counters: tuple[str, ...]
    checkpoint_keys: tuple[str, ...]
    steps: int
    _norm: Any
    _venv: Any
    _learner: Any
    _rng: dict[str, Any]
    _config: dict[str, Any]
    _cuda: bool
    _round: InRound | None
    _learner_state: Callable[[], dict[str, Any]]
    apply: Callable[[Any], None]
    _started: Callable[[np.ndarray], None]

    def save(self, path: Path) -> None:
        path = Path(path)
        state = {**self._checkpoint(), **self._save_beside(path)}
        durable_write(path, lambda tmp: torch.save(state, tmp))

    def export(self, folder: Path) -> list[Path]:
        """Write the learner as plain Stable-Baselines3 files into ``folder``; return their paths.

        ``model.zip`` is SB3's own save of the model, which the agent's class loads (``SAC.load``) without
        pbx: SB3 keeps some classes by reference, and pbx's own there (an off-policy agent's replay buffer
        class) are left out, so SB3's defaults take their place. ProcGen's IMPALA policy is pbx's class and
        loads where pbx is installed. A member that normalises observations or rewards adds
        ``vecnormalize.pkl``, the statistics as ``VecNormalize.load`` reads them (rl-zoo's layout); the
        policy acts on observations normalised with them.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        model = self.model
        ours = [name for name, value in vars(model).items() if name != "policy_class" and isinstance(value, type)
                and value.__module__.split(".")[0] == "pbx"]
        written = [folder / "model.zip"]
        durable_write(written[0], lambda tmp: _save_model(model, tmp, ours))
        if self._norm.norm_obs or self._norm.norm_reward:
            written.append(folder / "vecnormalize.pkl")
            plain = _plain_normalizer(self._norm)
            durable_write(written[1], lambda tmp: tmp.write_bytes(pickle.dumps(plain)))
        return written

    def _save_beside(self, path: Path) -> dict[str, Any]:
        """Write durably what is kept beside the checkpoint ``path`` (an off-policy agent's replay buffer), before
        the checkpoint that refers to it; return the checkpoint's entries that refer to it (none here)."""
        return {}

    def _checkpoint(self) -> dict[str, Any]:
        """The state :meth:`save` writes, one entry per name in ``checkpoint_keys`` and the learner's."""
        model = self.model
        norm = self._norm.learner_state()
        return {
            "format": CHECKPOINT_FORMAT,
            "algo": self.algo,
            "member": self.context.index,
            "env": self.context.env,
            "n_envs": self.settings.n_envs,
            "steps": self.steps,
            "n_updates": model._n_updates,
            **{name.lstrip("_"): getattr(model, name) for name in self.counters},
            "config": self._config,
            **self._learner.state(),
            "reward_norm": {**norm["reward"], "returns": self._norm.returns},
            "obs_norm": norm["obs"],
            "raw_obs": self._norm.raw_obs() if norm["obs"] is not None else None,
            "last_obs": model._last_obs,
            "last_episode_starts": model._last_episode_starts,
            "env_state": self._venv.get_state(),
            "rng": self._rng,
            "recent_episodes": list(model.ep_info_buffer or ()),
            "in_round": None if self._round is None else self._round.state(),
        }

    def load(self, path: Path, *, own: bool) -> None:
        path = Path(path)
        state = read_checkpoint(path, tuple(dict.fromkeys((*self.checkpoint_keys, *self._learner.keys()))), self.algo)
        if (state["env"], state["n_envs"]) != (self.context.env, self.settings.n_envs):
            raise UsageError(f"{path} holds a member trained on {state['env']} with {state['n_envs']} envs; "
                             f"this member runs {self.context.env} with {self.settings.n_envs}")
        model = self.model
        self._learner.load(state)
        # A checkpoint from before observation statistics were saved has none (it was trained without them).
        obs_norm = state.get("obs_norm")
        if (obs_norm is not None) != self.settings.normalize_obs:
            raise UsageError(f"{path} was trained with normalize_obs {obs_norm is not None}, this run's settings "
                             f"say {self.settings.normalize_obs}; the run folder does not match its config.yaml")
        self._norm.set_learner_state({"reward": state["reward_norm"], "obs": obs_norm})
        self.steps = model.num_timesteps = state["steps"]
        model._n_updates = state["n_updates"]
        for name in self.counters:
            setattr(model, name, state[name.lstrip("_")])
        if own:
            self._restore_world(state, path)
        else:
            self._exploited(state, path)
        # The window of recent episodes (recent_score) travels with the weights, as the statistics do: after an
        # exploit it holds the donor's episodes until the recipient's own replace them. A checkpoint from before
        # the window was saved has none. SB3 creates its windows at the first learn only if there are none yet.
        model.ep_info_buffer = deque(state.get("recent_episodes", ()), maxlen=model._stats_window_size)
        if model.ep_success_buffer is None:
            model.ep_success_buffer = deque(maxlen=model._stats_window_size)
        # The optimizer load restored the saved lr into the param groups; apply sets it again.
        self._config = {}
        self.apply(state["config"])
        # A round in progress (a mid-round save) is the member's own: a resume goes on with it, an exploit (between
        # rounds, from a finished round's file) has none to take.
        in_round = state.get("in_round") if own else None
        self._round = None if in_round is None else InRound.restored(in_round)
        if self._round is not None:
            if self._round.start is None:  # a checkpoint carried without it: a divergence goes back to here
                self._round.start = self._learner_state()
            if state["env_state"] is None:  # the envs restarted their episodes: each now begins inside the round
                self._round.episodes.fresh[:] = True

    def _exploited(self, state: dict[str, Any], path: Path) -> None:
        """What an exploit does besides copying the donor's learner: the envs' latest observations, normalised by
        the recipient's old statistics, as the donor's statistics see them, so the next action is the donor's
        policy's on the same raw observation."""
        if state.get("obs_norm") is not None:
            self.model._last_obs = self._norm.observe(self._norm.raw_obs())

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
            obs = self.model.env.reset()  # through SB3's transpose of images, where it put one
        finally:
            self._norm.training = training
        self._started(obs)


def _save_model(model: Any, path: Path, exclude: list[str]) -> None:
    # a file object: given a path without ".zip", SB3 would add the suffix
    with open(path, "wb") as f:
        model.save(f, exclude=exclude)


def _plain_normalizer(norm: VecNormalize) -> VecNormalize:
    """SB3's ``VecNormalize`` holding ``norm``'s statistics and settings (pbx's subclass would need pbx to load),
    frozen (``training`` off), without an env: ``VecNormalize.load(path, venv)`` gives it one."""
    plain = VecNormalize.__new__(VecNormalize)
    plain.__dict__.update(copy.deepcopy(norm.__getstate__()))
    # VecNormalize.__getstate__ drops these three when pickled
    plain.__dict__.update(venv=None, class_attributes={}, returns=None, training=False)
    return plain
