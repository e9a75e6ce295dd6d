"""Playing a policy for whole episodes in a vector env: the loop behind every test score.

A member's test score each round (:meth:`pbx.members.ppo.ppo.PPOMember.evaluate`) and
the evaluation of a finished run's checkpoint (:mod:`pbx.evaluation`) both play
through :func:`play`, so the two cannot drift apart. Each env plays a share of
the episodes fixed up front, as SB3's ``evaluate_policy`` does: taking the first
episodes to finish would favour short ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:  # hints only: SB3 imported before pbx.envs would let gym's banner through
    from stable_baselines3.common.vec_env import VecEnv


class Watcher(Protocol):
    """Sees every observation of :func:`play` (a video recorder, a progress bar); never changes the play."""

    def start(self, env: VecEnv, obs: np.ndarray) -> None:
        """Called once with the first observations."""

    def step(self, env: VecEnv, obs: np.ndarray, rewards: np.ndarray, dones: np.ndarray,
             infos: list[dict[str, Any]]) -> None:
        """Called after each vector step with what ``env.step`` returned (``obs`` of a done env starts its
        next episode)."""


@dataclass(frozen=True)
class Played:
    """The episodes of one :func:`play`."""

    episodes: int
    """Episodes asked for."""
    returns: list[float]
    """Returns of the finished episodes, in the order they finished."""
    cut: list[float]
    """Returns so far of the episodes still running when ``max_steps`` ran out (an env short of its share has
    one; the episodes of its share not yet started are in neither list)."""

    @property
    def complete(self) -> bool:
        return len(self.returns) == self.episodes


def play(env: VecEnv, act: Callable[[np.ndarray], np.ndarray], episodes: int, max_steps: int,
         watchers: Sequence[Watcher] = ()) -> Played:
    """Step ``env`` with ``act(obs) -> actions`` until each env has finished its share of ``episodes``
    (env ``i`` plays ``(episodes + i) // n_envs``), or for ``max_steps`` vector steps at most.

    Returns are those the env reports in ``info["episode"]["r"]`` (the numbers training scores use).
    """
    n_envs = env.num_envs
    targets = (episodes + np.arange(n_envs)) // n_envs
    counts = np.zeros(n_envs, dtype=int)
    running = np.zeros(n_envs)
    returns: list[float] = []
    obs = env.reset()
    for watcher in watchers:
        watcher.start(env, obs)
    for _ in range(max_steps):
        if not (counts < targets).any():
            break
        obs, rewards, dones, infos = env.step(act(obs))
        running += rewards
        for watcher in watchers:
            watcher.step(env, obs, rewards, dones, infos)
        for i in np.flatnonzero(dones & (counts < targets)):
            returns.append(float(infos[i]["episode"]["r"]))
            counts[i] += 1
        running[dones] = 0.0
    return Played(episodes, returns, [float(running[i]) for i in np.flatnonzero(counts < targets)])
