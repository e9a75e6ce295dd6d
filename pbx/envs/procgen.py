"""ProcGen (Cobbe et al., 2020) as a Stable-Baselines3 ``VecEnv``.

``procgen.ProcgenEnv`` wraps ProcGen's native vectorised C++ env in a
baselines-style adapter that builds a Python dict per env and per info key on
every step, and it hands out channels-last observations that SB3 then
transposes in another wrapper. This module talks to the native env
(``ProcgenGym3Env``, the object inside ``ProcgenEnv``) directly: one
``act``/``observe`` pair per vector step, episode sums kept in NumPy arrays,
channels-first observations, and Python work only for the envs whose episode
just ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces
from procgen import ProcgenGym3Env  # imported quietly by pbx.envs first
from procgen.env import DISTRIBUTION_MODE_DICT, ENV_NAMES
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from pbx.envs.settings import EnvSettings, check_whole
from pbx.errors import UsageError

GAMES: tuple[str, ...] = tuple(ENV_NAMES)
"""The ProcGen games, each a valid ``--env``."""
DISTRIBUTION_MODES: tuple[str, ...] = tuple(DISTRIBUTION_MODE_DICT)
LEVEL_SEEDS = 2**31 - 1
"""The largest ProcGen level number (its C ``int``)."""


@dataclass(frozen=True)
class ProcgenSettings(EnvSettings):
    """ProcGen's levels: by default the ProcGen paper's protocol, 200 easy levels to train on and the unrestricted
    distribution to test on (train-procgen's ``--num_levels``, ``--start_level``, ``--distribution_mode``)."""

    num_levels: int = 200
    """Training levels (0: unrestricted); test episodes always play the unrestricted distribution."""
    start_level: int = 0
    """The first training level's seed."""
    distribution_mode: str = "easy"
    """Difficulty, of the training and the test envs alike: one of :data:`DISTRIBUTION_MODES`."""

    def __post_init__(self) -> None:
        check_whole("num_levels", self.num_levels, 0, LEVEL_SEEDS, " (0: unrestricted)")
        check_whole("start_level", self.start_level, 0, LEVEL_SEEDS)
        if self.distribution_mode not in DISTRIBUTION_MODES:
            raise UsageError(f"distribution_mode must be one of {', '.join(DISTRIBUTION_MODES)}, got "
                             f"{self.distribution_mode!r}")


class ProcgenVecEnv(VecEnv):
    """A vector of ProcGen games behind SB3's ``VecEnv`` interface.

    ProcGen resets an env inside C++ the moment its episode ends, so ``step`` returns
    the first observation of the next episode with ``done`` set (as SB3 expects) but
    no ``terminal_observation``: ProcGen's time limits end episodes like any other
    end, as in the ProcGen paper. Finished episodes appear as SB3's monitor entries
    ``info["episode"] = {"r": return, "l": length}``.

    Args:
        game: one of :data:`GAMES`.
        n_envs: number of games stepped together.
        seed: ProcGen's ``rand_seed``; it decides which levels are drawn and in which order.
        num_levels: number of distinct levels (0 = unrestricted, the test distribution).
        start_level: the first level seed of the restricted set.
        distribution_mode: ``easy``, ``hard``, ... (one of :data:`DISTRIBUTION_MODES`).
        num_threads: ProcGen's worker threads; 0 steps the games in the calling thread.
    """

    def __init__(self, game: str, n_envs: int, seed: int, *, num_levels: int = 0, start_level: int = 0,
                 distribution_mode: str = "easy", num_threads: int = 0) -> None:
        self._env = ProcgenGym3Env(num=n_envs, env_name=game, num_levels=num_levels, start_level=start_level,
                                   distribution_mode=distribution_mode, rand_seed=seed, num_threads=num_threads)
        # cffi binds a library's C functions on first use, under a lock all ProcGen envs share. An env the garbage
        # collector frees unclosed closes itself in __del__: binding libenv_close then, while another env's
        # constructor holds that lock (a collection can run there), hung the process for good. Bound now.
        self._env._c_lib.libenv_close  # noqa: B018
        height, width, channels = self._env.ob_space["rgb"].shape
        self.render_mode = None
        super().__init__(n_envs, spaces.Box(0, 255, (channels, height, width), np.uint8),
                         spaces.Discrete(self._env.ac_space.eltype.n))
        self._episode_return = np.zeros(n_envs, dtype=np.float64)
        self._episode_length = np.zeros(n_envs, dtype=np.int64)

    @staticmethod
    def _channels_first(ob: dict[str, np.ndarray]) -> np.ndarray:
        # (n_envs, H, W, C) -> (n_envs, C, H, W) as a view: torch convolves it as a channels-last
        # tensor, and SB3's rollout buffer makes the one transposing copy training needs.
        return ob["rgb"].transpose(0, 3, 1, 2)

    def reset(self) -> VecEnvObs:
        """The current observations: ProcGen cannot restart an episode on demand."""
        _, ob, _ = self._env.observe()
        return self._channels_first(ob)

    def step_async(self, actions: np.ndarray) -> None:
        # ProcGen starts stepping here and returns; ``observe`` waits for it.
        self._env.act(np.asarray(actions))  # ProcGen casts to int32 itself

    def step_wait(self) -> VecEnvStepReturn:
        # ``first`` marks the first observation of a new episode: the previous one just ended,
        # and ``rew`` is that episode's last reward.
        rew, ob, first = self._env.observe()
        self._episode_return += rew
        self._episode_length += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(first):
            infos[i]["episode"] = {"r": float(self._episode_return[i]), "l": int(self._episode_length[i])}
        self._episode_return[first] = 0.0
        self._episode_length[first] = 0
        return self._channels_first(ob), rew, first, infos

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue these games bit for bit (levels, positions, RNGs, episode sums)."""
        return {"games": self._env.get_state(), "episode_return": self._episode_return.copy(),
                "episode_length": self._episode_length.copy()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`get_state` of an env of the same game and size."""
        self._env.set_state(state["games"])
        self._episode_return = state["episode_return"].copy()
        self._episode_length = state["episode_length"].copy()

    def close(self) -> None:
        self._env.close()

    def _indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else indices

    # The games share one C++ object, so the per-env attribute API of VecEnv reads and
    # writes attributes of this adapter.
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [getattr(self, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        result = getattr(self, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(self._indices(indices))
