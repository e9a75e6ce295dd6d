"""An env of your own for pbx: a point on a line that should reach 0.

gymnasium.register below runs when the module is imported, so pbx trains it as
``module:Point-v0``; from the repository's root:

    python -m pbx.train --env docs.examples.point:Point-v0 --algo sac --search PB2 --t_ready 1000 --max_budget 10000

From your own project's folder it is ``--env my_module:Name-v0`` (``python -m`` puts that folder on the path).
"""

import gymnasium as gym
import numpy as np


class Point(gym.Env):
    """Observation: the position in [-10, 10]; action: a move in [-1, 1]; reward: minus the distance to 0.
    Episodes of 50 steps from a uniform start in [-5, 5]. It cannot render (no ``render_modes``)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-10, 10, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x, self.t = self.np_random.uniform(-5, 5, 1).astype(np.float32), 0
        return self.x.copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.x, self.t = np.clip(self.x + action, -10, 10).astype(np.float32), self.t + 1
        return self.x.copy(), -float(abs(self.x[0])), False, self.t >= 50, {}


gym.register("Point-v0", entry_point=Point)
