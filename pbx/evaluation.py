"""Scoring a trained member's checkpoint, and recording it playing (``python -m pbx.evaluate``).

The checkpoint is a member's file of the run's last finished round; ``best`` is
that round's best member on *train* score (:func:`pbx.standings.best_rows`: the
test set never selects), and ``kept`` the best of it and each generation's best
that a restart kept (:func:`pbx.standings.member_row`). The member is rebuilt from the run's ``config.yaml``
and loads the file as a donor's (``own=False``: the policy, not the training
envs), then plays through its own :meth:`~pbx.members.ppo.ppo.PPOMember.play`, the
code behind its test score each round: on the test levels (ProcGen's
unrestricted distribution, ``num_levels=0``) or on the run's training levels,
with one env per episode. Both policies, the sampled one and the most likely
action, play the same levels (one ``seed``); the run's test score is one of them,
as the agent evaluates itself (:func:`test_policy`: PPO's and A2C's sampled, SAC's,
TD3's and DQN's deterministic), and the output marks which. The video shows the first
episodes of the sampled policy.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from pbx.config import RunConfig, resolve
from pbx.console import counted, format_score
from pbx.envs import family
from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.history import restart_marks
from pbx.standings import member_row
from pbx.members import MemberContext
from pbx.reporting.runs import load_run
from pbx.rollout import Played
from pbx.run_dir import RunDir
from pbx.runners.common import member_seed
from pbx.settings import check_seed
from pbx.video import Recorder, check_path

if TYPE_CHECKING:  # hints only: SB3 imported before pbx.envs would let gym's banner through
    from stable_baselines3.common.vec_env import VecEnv

LEVELS = ("test", "train")
POLICIES = ("stochastic", "deterministic")
"""In the order they play: the recorded one first, so a video that cannot be made fails at once."""


@dataclass(frozen=True)
class Target:
    """The checkpoint to score: member ``member`` of the run in ``run_dir`` after round ``round``."""

    run_dir: RunDir
    cfg: RunConfig
    member: int
    round: int
    steps: int
    rounds: int
    """The run's rounds as its history plans them (:meth:`pbx.config.RunConfig.planned`): a BG-PBT or IPBT run's
    larger first population takes more than one round of the budget."""
    kept: bool = False
    """Whether the checkpoint is one a restart kept (``--member kept``), not of the last round."""

    @property
    def checkpoint(self) -> Path:
        return (self.run_dir.kept_checkpoint if self.kept else self.run_dir.checkpoint)(self.member, self.round)

    def load_member(self, device: str | None = None) -> Any:
        """The member rebuilt from the run's config with the checkpoint loaded as a donor's (the learner, not
        the training envs), on ``device`` (None: the run's); the caller closes it."""
        cfg = self.cfg
        context = MemberContext(env=cfg.run.env, index=self.member, seed=member_seed(cfg.run.seed, self.member),
                                device=cfg.run.device if device is None else device, env_settings=cfg.env_settings)
        member: Any = cfg.member_cls(context, cfg.member, {})
        try:
            member.load(self.checkpoint, own=False)
        except BaseException:
            member.close()
            raise
        return member


@dataclass(frozen=True)
class Score:
    """One policy's episodes: the returns of finished and cut-off episodes, and how many were cut off."""

    returns: list[float]
    cut: int
    mean: float
    std: float
    """Over the episodes (population std, ddof 0)."""
    count: int

    @classmethod
    def of(cls, played: Played) -> Score:
        returns = played.returns + played.cut
        return cls(returns, len(played.cut), float(np.mean(returns)), float(np.std(returns)), len(returns))

    def line(self, policy: str, max_steps: int) -> str:
        """``stochastic     mean 12.5 | std 3.1 | 100 episodes``."""
        cut = f" ({self.cut} cut off at {max_steps:,} steps, counted with their return so far)" if self.cut else ""
        return (f"{policy:<14} mean {format_score(self.mean)} | std {format_score(self.std)} | "
                f"{counted(self.count, 'episode')}{cut}")


def find_target(path: Path, member: str = "best") -> Target:
    """The checkpoint of ``member`` (an id, or ``best``) after the last finished round of the run in ``path``,
    or the one ``kept`` picks.

    Raises :class:`UsageError` for a missing or damaged run folder, a run of an env without episodes (the
    toy), a member not in the population, a missing checkpoint file, or a member whose replay buffer would not
    fit in the memory free now (the one member built here, not the run's population).
    """
    run = load_run(path)
    run_dir = RunDir(path)
    try:
        cfg = resolve([run.config], builds=1)
    except UsageError as err:
        raise UsageError(f"{run_dir.config}: {err}") from None
    if not hasattr(cfg.member_cls, "play"):
        raise UsageError(f"{path} trains {cfg.run.env}, which has no episodes to play: pbx.evaluate and pbx.export "
                         f"take SB3 members (a ProcGen game or a gymnasium id)")
    row = member_row(run.frame, member)
    last = int(run.frame["round"].max())
    rounds = cfg.rules.planned(restart_marks(run.frame)).rounds
    target = Target(run_dir, cfg, int(row["member"]), int(row["round"]), int(row["steps"]), rounds,
                    kept=int(row["round"]) < last)
    if target.kept and not run_dir.kept.is_dir():
        raise UsageError(f"{run_dir.kept}: no such folder: this run was trained before pbx kept each generation's "
                         f"best member at a restart, so --member kept has no checkpoint of round {target.round}'s "
                         f"best; use --member best")
    if not target.checkpoint.is_file():
        which = "kept at the restart after it" if target.kept else "the run's last finished round"
        raise UsageError(f"{target.checkpoint}: missing checkpoint of member {target.member} after round "
                         f"{target.round}, {which}; the run folder is damaged")
    return target


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` measured, as written to the JSON file."""

    run: str
    env: str
    member: int
    round: int
    steps: int
    levels: str
    seed: int
    episodes: int
    max_steps: int
    scores: dict[str, Score]
    test_policy: str
    """The policy of the run's test score (:func:`test_policy`)."""
    video: str | None
    video_frames: int | None
    """Frames the video shows (a held frame counts as shown)."""
    video_size: tuple[int, int] | None
    """(width, height) of its frames."""

    def write(self, path: Path) -> None:
        text = json.dumps(asdict(self), indent=1) + "\n"
        durable_write(path, lambda tmp: tmp.write_text(text))


def evaluate(target: Target, *, episodes: int = 100, levels: str = "test", seed: int = 0, device: str | None = None,
             max_steps: int | None = None, video: Path | None = None, video_episodes: int = 3) -> Evaluation:
    """Play ``episodes`` episodes with each policy of ``target``'s member (see the module's docstring).

    Args:
        levels: ``test`` or ``train``.
        seed: seeds the levels and the action sampling: the same seed gives the same scores.
        device: ``auto``, ``cpu`` or ``cuda`` (None: the run's).
        max_steps: cut each episode off after this many steps, counting its return so far (None: the
            member's ``eval_max_steps``).
        video: write the first ``video_episodes`` episodes of the sampled policy to this ``.mp4`` or ``.gif``.
    """
    check_options(episodes, levels, max_steps, video, video_episodes, seed)
    cfg = target.cfg
    member = target.load_member(device)
    try:
        max_steps = max_steps or member.settings.eval_max_steps
        recorder = Recorder(min(video_episodes, episodes)) if video is not None else None
        scores: dict[str, Score] = {}
        with _Progress(len(POLICIES) * episodes) as progress:
            for policy in POLICIES:
                recording = recorder is not None and policy == "stochastic"
                played = member.play(seed, episodes, deterministic=policy == "deterministic",
                                     train_levels=levels == "train", max_steps=max_steps, render=recording,
                                     watchers=[progress, recorder] if recording else [progress])
                scores[policy] = Score.of(played)
    finally:
        member.close()
    frames, size = recorder.write(video) if recorder is not None and video is not None else (None, None)
    return Evaluation(str(target.run_dir.path), cfg.run.env, target.member, target.round, target.steps, levels,
                      seed, episodes, max_steps, scores, test_policy(cfg), None if video is None else str(video),
                      frames, size)


def test_policy(cfg: RunConfig) -> str:
    """Which of :data:`POLICIES` the run's test episodes played: the settings' ``eval_deterministic``, else the
    member's ``test_deterministic``, as SB3 and rl-zoo evaluate each agent (off-policy agents act on their most
    likely action, on-policy ones sample)."""
    chosen = getattr(cfg.member, "eval_deterministic", None)
    deterministic = getattr(cfg.member_cls, "test_deterministic", False) if chosen is None else chosen
    return POLICIES[1] if deterministic else POLICIES[0]


def check_options(episodes: int, levels: str, max_steps: int | None, video: Path | None, video_episodes: int,
                  seed: int) -> None:
    """Raise :class:`UsageError` for options :func:`evaluate` cannot take (before any work is done)."""
    check_seed(seed, "--seed")
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {episodes}")
    if levels not in LEVELS:
        raise UsageError(f"--levels must be test or train, got {levels!r}")
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {max_steps}")
    if video is not None:
        check_path(video)
        if video_episodes < 1:
            raise UsageError(f"--video-episodes must be at least 1, got {video_episodes}")


def result_path(target: Target, levels: str, seed: int) -> Path:
    """Where :func:`evaluate`'s numbers go: ``RUN_DIR/report/evaluate_m<M>_<levels>_seed<S>.json``, or
    ``evaluate_m<M>_kept_r<R>_...`` for a checkpoint a restart kept after round R (member M's last checkpoint
    is another state, whose numbers it would overwrite)."""
    kept = f"_kept_r{target.round}" if target.kept else ""
    return target.run_dir.report / f"evaluate_m{target.member}{kept}_{levels}_seed{seed}.json"


def describe(target: Target, levels: str, episodes: int, seed: int) -> str:
    """``member 2 of runs/X after round 50 (25,000,000 steps): 100 episodes on test levels (unrestricted), seed 0``."""
    cfg = target.cfg
    if not family(cfg.run.env).levels:
        where = f"{cfg.run.env} (one distribution: train and test levels are the same)"
    elif levels == "test":
        where = "test levels (unrestricted, num_levels=0)"
    else:
        env: Any = cfg.env_settings  # ProcGen's: the only family with levels
        where = f"train levels ({env.num_levels or 'unrestricted'} from {env.start_level})"
    kept = ", kept at the restart after it" if target.kept else ""
    return (f"member {target.member} of {target.run_dir.path} after round {target.round + 1}/{target.rounds}{kept} "
            f"({target.steps:,} steps): {counted(episodes, 'episode')} on {where}, seed {seed}")


class _Progress:
    """A bar of finished episodes over both policies (off when the output is no terminal, as pbx.console's)."""

    def __init__(self, total: int) -> None:
        self._bar = tqdm(total=total, desc="evaluate", unit="episode", disable=None, file=sys.stderr, leave=False)
        self._done = np.zeros(0, dtype=bool)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()

    def start(self, env: VecEnv, obs: np.ndarray) -> None:
        self._done = np.zeros(env.num_envs, dtype=bool)

    def step(self, env: VecEnv, obs: np.ndarray, rewards: np.ndarray, dones: np.ndarray,
             infos: list[dict[str, Any]]) -> None:
        new = dones & ~self._done
        if new.any():
            self._done |= new
            self._bar.update(int(new.sum()))
