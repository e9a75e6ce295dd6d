"""What an SB3 agent is before any member of it is built: its table, and what a run asks of it first.

An agent's file (``ppo/ppo.py``, ``a2c.py``, the off-policy ones through
:mod:`pbx.members.offpolicy.member`) declares as data what it trains: the ``--algo`` name, the
chunk a round trains whole, the hyperparameters SB3 reads live, the action spaces it acts in, its
defaults per task family (:class:`AgentDefaults`: settings, search space, schedule) and what its
checkpoint holds. The registry (:mod:`pbx.members`) and the run's config ask the class, before
any member exists, whether it trains on an env and acts in its actions, which defaults an env
gets, whether a space, settings and device are valid, and how many steps a round really trains;
:class:`SB3Agent` answers from that table. The member that trains (envs, statistics, random
streams, updates, test episodes) is its subclass :class:`~pbx.members.sb3.member.SB3Member`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Mapping

from gymnasium import spaces

from pbx.envs import EnvSettings, check_env, family, observation_and_action_spaces
from pbx.errors import UsageError
from pbx.members.base import Member, MemberSettings
from pbx.members.sb3.process import check_device
from pbx.members.sb3.settings import SB3Settings
from pbx.plan import whole_chunks
from pbx.space import Config, Space


@dataclass(frozen=True)
class AgentDefaults:
    """An agent's defaults on one task family, where a run names none (rl-zoo keeps them as data too)."""

    space: str
    """The search space (a file under ``search_spaces/``)."""
    settings: Mapping[str, object] = field(default_factory=dict)
    """Member settings above the settings' own defaults."""
    run: Mapping[str, object] = field(default_factory=dict)
    """``t_ready`` and ``max_budget``."""
    image_policy: str | None = None
    """The policy on image observations where it is not the agent's own (PPO's is the IMPALA CNN): SB3's
    ``"CnnPolicy"`` (the Nature DQN CNN)."""


class SB3Agent(Member):
    """An SB3 algorithm as a member type: what it declares, and the answers a run asks of the class."""

    algo: ClassVar[str]
    """The ``--algo`` name (``"sac"``); a checkpoint records it."""
    name: ClassVar[str]
    """What :meth:`describe` and messages call the algorithm (``"SAC"``)."""
    chunk: ClassVar[str]
    """The hyperparameter that, times ``n_envs``, is what SB3 collects whole between updates (``n_steps``,
    ``train_freq``): a round trains whole ones."""
    live: ClassVar[tuple[str, ...]] = ()
    """Hyperparameters SB3 reads from the algorithm's attribute of the same name at each use."""
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Discrete)
    """The action spaces the algorithm can act in."""
    defaults: ClassVar[Mapping[str, AgentDefaults]] = {}
    """Defaults by task family name (:class:`~pbx.envs.families.Family`): the agent trains on the families it has
    a row for, and on no other (a missing row is a one-line error naming both, never another family's row)."""
    counters: ClassVar[tuple[str, ...]] = ()
    """Attributes of the SB3 algorithm that count env steps as ``steps`` does (DQN's ``_n_calls``, which times
    its target updates): saved, and taken from the donor with its step count on an exploit."""
    test_deterministic: ClassVar[bool] = False
    """Test episodes take the most likely action (SB3's and rl-zoo's evaluation of off-policy agents), unless the
    settings' ``eval_deterministic`` says otherwise."""
    checkpoint_keys: ClassVar[tuple[str, ...]] = (
        "format", "env", "n_envs", "steps", "n_updates", "config", "reward_norm", "last_obs", "last_episode_starts",
        "env_state", "rng")
    """What a checkpoint holds (:meth:`~pbx.members.sb3.checkpoint.Checkpointed.save`) and ``load`` requires, with
    the learner's entries."""

    @classmethod
    def check_env(cls, env: str) -> None:
        """Raise :class:`UsageError` unless a task family holds ``env``, its simulator is installed and this agent
        has defaults for that family."""
        check_env(env)
        cls.family_defaults(env)

    @classmethod
    def acts_in(cls, action_space: spaces.Space) -> bool:
        return isinstance(action_space, cls.action_spaces)

    @classmethod
    def has_defaults(cls, env: str) -> bool:
        """Whether this agent has a row for ``env``'s task family."""
        return family(env).name in cls.defaults

    @classmethod
    def family_defaults(cls, env: str) -> AgentDefaults:
        """This agent's row for ``env``'s task family; :class:`UsageError` naming both where it has none."""
        task = family(env)
        if task.name not in cls.defaults:
            raise UsageError(f"--algo {cls.algo} has no defaults for the {task.name} family ({env}): it trains on "
                             f"{', '.join(cls.defaults)}; add a {task.name!r} row to {cls.__name__}.defaults")
        return cls.defaults[task.name]

    @classmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        return dict(cls.family_defaults(env).run)

    @classmethod
    def setting_defaults(cls, env: str) -> dict[str, object]:
        return dict(cls.family_defaults(env).settings)

    @classmethod
    def space_file(cls, env: str) -> str:
        return cls.family_defaults(env).space

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
        return cls.name

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        if not isinstance(settings, cls.settings_cls):
            raise UsageError(f"{cls.__name__} needs {cls.settings_cls.__name__}, got {type(settings).__name__}")
        settings.check_space(space)
        check_device(device)

    @classmethod
    def validate_env(cls, env: str, settings: MemberSettings, env_settings: EnvSettings | None = None) -> None:
        """Settings of the MLP policy (``normalize_obs``, ``net_arch``) refused on image observations, from the
        env's observation space (one env built and closed, once a process: :func:`observation_and_action_spaces`)."""
        assert isinstance(settings, SB3Settings)
        if observes_images(env, env_settings) and (settings.normalize_obs or settings.net_arch is not None):
            bad = "normalize_obs" if settings.normalize_obs else "net_arch"
            raise UsageError(f"{bad} is for MLP policies on vector observations; {env}'s observations are "
                             f"images (a CNN policy): leave {bad} at its default")

    @classmethod
    def plan_chunk(cls, settings: MemberSettings, space: Space) -> int | None:
        """A rollout (or ``train_freq`` steps) of every env: SB3 collects them whole. Where the space searches
        the chunk's length each member's differs, so the plan takes the steps as asked (None): each member
        trains whole chunks of its own to the boundary nearest the plan, and skips a round it begins at or past
        the plan's end (:meth:`pbx.config.RunConfig.steps_due`)."""
        assert isinstance(settings, SB3Settings)
        return None if cls.chunk in space.params else settings.n_envs * int(getattr(settings, cls.chunk))

    @classmethod
    def steps_trained(cls, settings: MemberSettings, config: Config, steps: int) -> int:
        """Whole chunks of the config's length (the settings' where the space does not search it), the number
        nearest ``steps`` and at least one."""
        assert isinstance(settings, SB3Settings)
        return whole_chunks(steps, settings.n_envs * int(config.get(cls.chunk, getattr(settings, cls.chunk))))


def observes_images(env: str, env_settings: EnvSettings | None = None) -> bool:
    """Whether an agent on ``env`` built with ``env_settings`` (None: its family's defaults) sees images (and so
    trains a CNN policy), by SB3's own test of the space."""
    from stable_baselines3.common.preprocessing import is_image_space

    return is_image_space(observation_and_action_spaces(env, env_settings)[0])
