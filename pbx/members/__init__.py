"""What a population trains: the member contract and the member types.

``--env toy`` trains the PBT paper's toy problem; any other ``--env`` (a ProcGen
game or a gymnasium id) trains Stable-Baselines3 PPO. The PPO member is imported
only when asked for, so toy runs never pay for importing torch.
"""

from __future__ import annotations

from pbx.members.base import Diverged, Member, MemberContext, MemberSettings
from pbx.members.toy import ToyMember

__all__ = ["Diverged", "Member", "MemberContext", "MemberSettings", "ToyMember", "member_class"]


def member_class(env: str) -> type[Member]:
    """The member type that trains on ``env``; raises UsageError for an env nothing can train on."""
    if env == "toy":
        return ToyMember
    from pbx.members.ppo import PPOMember

    PPOMember.check_env(env)
    return PPOMember
