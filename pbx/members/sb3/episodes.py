"""What a round's train score counts: the episodes that both start and end inside it, and its curve."""

from __future__ import annotations

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
