"""What a population trains: the member contract and the member types.

``--env toy`` trains the PBT paper's toy problem (``toy-cat``: with a categorical
"optimiser"); any other ``--env`` (a ProcGen game or a gymnasium id) trains
Stable-Baselines3 PPO, with DrAC's augmentation regulariser when the run's space
or member settings hold its hyperparameters (:data:`AUGMENTATION`). The PPO
members are imported only when asked for, so toy runs never pay for importing torch.
"""

from __future__ import annotations

from typing import Iterable

from pbx.members.base import Diverged, Member, MemberContext, MemberSettings
from pbx.members.toy import TOY_ENVS, ToyMember

__all__ = ["AUGMENTATION", "Diverged", "Member", "MemberContext", "MemberSettings", "ToyMember", "member_class",
           "register", "space_file"]

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
:class:`pbx.members.drac.DrACMember`."""


def member_class(env: str, hyperparameters: Iterable[str] = ()) -> type[Member]:
    """The member type that trains on ``env``; raises UsageError for an env nothing can train on.

    ``hyperparameters``: the names the run's search space and member settings hold.
    """
    if env in REGISTERED:
        return REGISTERED[env]
    if env in TOY_ENVS:
        return ToyMember
    if env == "toy-deceptive":
        from pbx.members.toy_deceptive import DeceptiveToyMember

        return DeceptiveToyMember
    from pbx.members.ppo import PPOMember

    PPOMember.check_env(env)
    if set(hyperparameters) & set(AUGMENTATION):
        from pbx.members.drac import DrACMember

        DrACMember.check_env(env)
        return DrACMember
    return PPOMember


def space_file(env: str, bandit: bool = False) -> str:
    """The search space (a file under ``search_spaces/``) of a run on ``env`` that names none.

    ``bandit``: a bandit picks the run's categories (``--cat_exp`` exp3, exp3_indep or
    cocabo); on a ProcGen game that is PB2-Mix's space, whose categorical hyperparameter
    is DrAC's augmentation (the ProcGen paper's plain PPO space has none). ``random`` and
    ``fixed`` take the env's own space, as leaving ``--cat_exp`` out does: DrAC comes only
    from a bandit, a space with an augmentation, or an explicit setting.
    """
    cls = member_class(env)
    if bandit and env not in REGISTERED and cls is not ToyMember:
        from pbx.envs import is_procgen
        from pbx.members.drac import DrACMember

        if is_procgen(env):
            return DrACMember.default_space
    return cls.space_file(env)
