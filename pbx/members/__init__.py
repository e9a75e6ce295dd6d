"""What a population trains: the member contract and the member types.

``--env toy`` trains the PBT paper's toy problem (``toy-cat``: with a categorical
"optimiser"); any other ``--env`` (a ProcGen game or a gymnasium id) trains the
Stable-Baselines3 agent ``--algo`` names (:data:`ALGOS`): PPO by default, with DrAC's
augmentation regulariser when the run's space or member settings hold its
hyperparameters (:data:`AUGMENTATION`). The SB3 members are imported only when asked
for, so toy runs never pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Iterable

from pbx.errors import UsageError, either
from pbx.members.base import Diverged, Member, MemberContext, MemberSettings, Stopped
from pbx.members.toys.toy import TOY_ENVS, ToyMember

if TYPE_CHECKING:
    from pbx.envs import EnvSettings

__all__ = ["ALGOS", "AUGMENTATION", "Diverged", "Member", "MemberContext", "MemberSettings", "Stopped", "ToyMember",
           "algo_class", "check_algo", "member_class", "own_member", "register", "space_file"]

ALGOS: dict[str, str] = {
    "ppo": "pbx.members.ppo.ppo:PPOMember",
    "a2c": "pbx.members.a2c.a2c:A2CMember",
    "sac": "pbx.members.offpolicy.sac:SACMember",
    "td3": "pbx.members.offpolicy.td3:TD3Member",
    "dqn": "pbx.members.offpolicy.dqn:DQNMember",
}
"""``--algo`` names and the SB3 member each trains (``module:class``, imported when asked for)."""

REGISTERED: dict[str, type[Member]] = {}
"""Members added with :func:`register`, by ``--env`` name; looked up before the built-in ones."""


def register(cls: type[Member], *envs: str) -> type[Member]:
    """Make ``cls`` the member that trains on each of ``envs`` (a member written outside this package; see
    ``docs/add-a-member.md``). Returns ``cls``."""
    if not envs:
        raise ValueError("register a member for at least one --env name")
    REGISTERED.update(dict.fromkeys(envs, cls))
    return cls

AUGMENTATION = ("aug_type", "aug_coef")
"""Hyperparameters only DrAC's PPO has: a run whose space or member settings name one trains
:class:`pbx.members.ppo.drac.DrACMember`."""


def check_algo(algo: str) -> None:
    """Raise UsageError unless ``algo`` is an ``--algo`` name (without importing its member)."""
    if algo not in ALGOS:
        raise UsageError(f"unknown --algo {algo!r}: use one of {', '.join(ALGOS)}")


def algo_class(algo: str) -> type[Member]:
    """The SB3 member ``--algo`` names; raises UsageError for a name it is not."""
    check_algo(algo)
    module, name = ALGOS[algo].split(":")
    return getattr(importlib.import_module(module), name)


def member_class(env: str, hyperparameters: Iterable[str] = (), algo: str = "ppo",
                 env_settings: EnvSettings | None = None) -> type[Member]:
    """The member type that trains on ``env``; raises UsageError for an env nothing can train on, or that
    ``algo`` cannot act in.

    ``hyperparameters``: the names the run's search space and member settings hold; ``env_settings``: how the
    env is built (its family's settings; None: their defaults), which may change its spaces (gymnasium's
    ``env_kwargs``).
    """
    check_algo(algo)
    if own_member(env):
        if algo != "ppo":
            raise UsageError(f"--algo {algo} trains an SB3 agent on a gymnasium id; {env} trains its own member: "
                             f"leave --algo out")
        if env in REGISTERED:
            return REGISTERED[env]
        if env in TOY_ENVS:
            return ToyMember
        from pbx.members.toys.deceptive import DeceptiveToyMember

        return DeceptiveToyMember
    if algo != "ppo":
        return _agent(algo_class(algo), env, algo, hyperparameters, env_settings)
    from pbx.members.ppo.ppo import PPOMember

    PPOMember.check_env(env)
    _check_observations(env, algo, env_settings)
    _check_actions(PPOMember, env, algo, env_settings)
    if set(hyperparameters) & set(AUGMENTATION):
        from pbx.members.ppo.drac import DrACMember

        DrACMember.check_env(env)
        return DrACMember
    return PPOMember


def own_member(env: str) -> bool:
    """Whether ``env`` names a member's own env (a toy, or one :func:`register` added), not an SB3 agent's."""
    return env in REGISTERED or env in TOY_ENVS or env == "toy-deceptive"


def _agent(cls: type[Member], env: str, algo: str, hyperparameters: Iterable[str],
           env_settings: EnvSettings | None) -> type[Member]:
    """``cls``, the member ``algo`` names, once it is known to train on ``env`` and to act in its action space."""
    from pbx.envs import check_env
    from pbx.members.offpolicy.member import OffPolicyMember
    from pbx.members.sb3.agent import SB3Agent

    assert issubclass(cls, SB3Agent)
    check_env(env)
    # the actions first: an agent that cannot act in them (SAC on Pong) has no defaults there either, and the
    # user's fix is another agent, not a row of defaults
    _check_actions(cls, env, algo, env_settings)
    cls.check_env(env)
    _check_observations(env, algo, env_settings, off_policy=issubclass(cls, OffPolicyMember))
    if set(hyperparameters) & set(AUGMENTATION):
        raise UsageError(f"aug_type and aug_coef are DrAC's, a PPO on ProcGen games; --algo {algo} has neither")
    return cls


def _check_actions(cls: type[Member], env: str, algo: str, env_settings: EnvSettings | None) -> None:
    """Raise :class:`UsageError` unless ``cls`` (``algo``'s member) acts in ``env``'s action space, naming the
    agents that do, or the spaces pbx's agents act in when none does (a Tuple: SB3's PPO asserted on it)."""
    from pbx.envs import observation_and_action_spaces
    from pbx.members.sb3.agent import SB3Agent

    _, action_space = observation_and_action_spaces(env, env_settings)
    assert issubclass(cls, SB3Agent)
    if cls.acts_in(action_space):
        return
    agents: dict[str, type[SB3Agent]] = {name: algo_class(name) for name in ALGOS}  # type: ignore[misc]
    able = [name for name, agent in agents.items() if agent.has_defaults(env) and agent.acts_in(action_space)]
    if able:
        needs = either([ACTION_KINDS.get(kind.__name__, kind.__name__) for kind in cls.action_spaces])
        found = ACTION_KINDS.get(type(action_space).__name__, f"a {type(action_space).__name__}").split(" (")[0]
        fix = f"{cls.name} needs {needs} actions and {env}'s are {found}; use --algo {either(able)}"
    else:
        kinds = list(dict.fromkeys(kind.__name__ for agent in agents.values() for kind in agent.action_spaces))
        fix = f"no pbx agent can (they act in {either(kinds)} spaces): wrap the env's actions as one of those"
    raise UsageError(f"--algo {algo} cannot act in {env}'s action space {action_space}: {fix}")


ACTION_KINDS = {"Box": "continuous (Box)", "Discrete": "discrete (Discrete)",
                "MultiDiscrete": "multi-discrete (MultiDiscrete)", "MultiBinary": "binary (MultiBinary)"}
"""How a refusal names an action space's kind, by its class name."""


def _check_observations(env: str, algo: str, env_settings: EnvSettings | None, off_policy: bool = False) -> None:
    """Raise :class:`UsageError` unless ``env``'s observations are one array, the only kind pbx's SB3 members take.

    Their policies are SB3's ``MlpPolicy`` and ``CnnPolicy`` (the IMPALA CNN for ProcGen), which take a Box,
    Discrete, MultiDiscrete or MultiBinary space; a Dict needs SB3's ``MultiInputPolicy``, and with it a
    dictionary replay buffer, per-key observation statistics, checkpoints and test episodes of dictionaries,
    none of which pbx's members hold. An ``off_policy`` agent cannot take a Discrete space either: SB3 stores an
    episode's last observation through the member's observation normaliser, which indexes it as a row of
    features, and one integer per env is not one. Refused here, before a run folder exists, instead of a
    traceback from SB3 (PPO; an off-policy agent at its first episode's end) or pbx's replay-buffer sizing (SAC,
    TD3, DQN on a Dict); gymnasium's ``FlattenObservation`` turns a Dict, a Tuple or a Discrete into one Box.
    """
    from gymnasium import spaces

    from pbx.envs import observation_and_action_spaces

    observations, _ = observation_and_action_spaces(env, env_settings)
    arrays = (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary) + (() if off_policy else (spaces.Discrete,))
    if isinstance(observations, arrays):
        return
    kind = type(observations).__name__
    if isinstance(observations, spaces.Discrete):
        raise UsageError(f"--algo {algo} cannot take {env}'s observations, a Discrete space: SB3's off-policy agents "
                         f"store them through pbx's observation normaliser, which needs a row of features per env; "
                         f"use --algo ppo or a2c, or register the env wrapped in "
                         f"gymnasium.wrappers.FlattenObservation, which makes them one-hot in a Box")
    keys = f" (keys {', '.join(observations.spaces)})" if isinstance(observations, spaces.Dict) else ""
    raise UsageError(f"--algo {algo} cannot take {env}'s observations, a {kind} space{keys}: pbx's agents act on one "
                     f"array (SB3's MlpPolicy and CnnPolicy, not its MultiInputPolicy); register the env wrapped in "
                     f"gymnasium.wrappers.FlattenObservation, which makes them one Box")


def space_file(env: str, bandit: bool = False, algo: str = "ppo", env_settings: EnvSettings | None = None) -> str:
    """The search space (a file under ``search_spaces/``) of a run on ``env`` that names none.

    ``bandit``: a bandit picks the run's categories (``--cat_exp`` exp3, exp3_indep or
    cocabo); on a ProcGen game that is PB2-Mix's space, whose categorical hyperparameter
    is DrAC's augmentation (the ProcGen paper's plain PPO space has none). ``random`` and
    ``fixed`` take the env's own space, as leaving ``--cat_exp`` out does: DrAC comes only
    from a bandit, a space with an augmentation, or an explicit setting.
    """
    cls = member_class(env, algo=algo, env_settings=env_settings)
    if bandit and algo == "ppo" and not own_member(env):
        from pbx.members.ppo.drac import DrACMember

        if DrACMember.has_defaults(env):
            return DrACMember.space_file(env)
    return cls.space_file(env)
