"""What a round's train score counts (the episodes that both start and end inside it, and its curve), and where
a round may stop inside it (:class:`Boundary`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.callbacks import BaseCallback


class RoundEpisodes(BaseCallback):
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
        self.curve: list[tuple[int, float]] = []
        """After each rollout in which scored episodes ended: (the learner's env steps, their mean return)."""
        self._scored = 0

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

    def _on_rollout_end(self) -> None:
        if len(self.returns) > self._scored:
            self.curve.append((int(self.model.num_timesteps), float(np.mean(self.returns[self._scored:]))))
            self._scored = len(self.returns)

    def state(self) -> dict[str, Any]:
        """What a round in progress keeps of the count (a mid-round checkpoint: :meth:`restored` reads it)."""
        return {"fresh": self.fresh.copy(), "returns": list(self.returns), "left_out": self.left_out,
                "curve": list(self.curve), "scored": self._scored}

    @classmethod
    def restored(cls, state: Mapping[str, Any]) -> RoundEpisodes:
        """The count of a round in progress as :meth:`state` saved it."""
        episodes = cls(np.asarray(state["fresh"]))
        episodes.returns, episodes.left_out = list(state["returns"]), int(state["left_out"])
        episodes.curve, episodes._scored = [tuple(point) for point in state["curve"]], int(state["scored"])
        return episodes


@dataclass
class InRound:
    """A round a member is inside of, stopped between two rollouts (:class:`~pbx.members.Stopped`): where it
    ends, the count of its episodes so far, and the learner as the round found it (what a divergence later in
    the round goes back to, as it would have without the stop)."""

    end: int
    """The member's env steps at the round's end."""
    episodes: RoundEpisodes
    start: dict[str, Any] | None
    """The learner's state at the round's start (:meth:`pbx.members.sb3.member.SB3Member._learner_state`); None in
    a checkpoint carried without it (the GPU campaign's archive), where the load takes the state it restores."""

    def state(self) -> dict[str, Any]:
        """As a checkpoint holds it."""
        return {"end": self.end, "episodes": self.episodes.state(), "start": self.start}

    @classmethod
    def restored(cls, state: Mapping[str, Any]) -> InRound:
        return cls(int(state["end"]), RoundEpisodes.restored(state["episodes"]), state["start"])


class Halt(Exception):
    """Raised by :class:`Boundary` to leave SB3's ``learn`` between two rollouts."""


class Boundary(BaseCallback):
    """Leaves ``learn`` (:class:`Halt`) before a rollout where ``stop()`` says so: after the last update and
    before the envs step again, the one point where the learner, its envs and its count are whole (an off-policy
    agent's replay buffer too: SB3's ``collect_rollouts`` asks at the start of each ``train_freq`` steps)."""

    def __init__(self, stop: Callable[[], bool]) -> None:
        super().__init__()
        self.stop = stop

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        if self.stop():
            raise Halt
