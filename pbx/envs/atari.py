"""Atari 2600 games (gymnasium's ``ALE/<Game>-v5`` ids, through ``ale-py``) as the PBT paper and rl-zoo train them.

Each env is the v5 game with its own frame skip off (``frameskip=1``; v5's sticky actions stay, the
Machado et al. protocol the v5 ids stand for) under SB3's :class:`AtariWrapper`: up to 30 no-op actions
at a reset, each action repeated on 4 frames with the last two max-pooled, 84x84 grey frames, a lost
life ends a training episode (not a test one), rewards clipped to their sign; then the last 4 frames
stacked, as rl-zoo's ``atari`` rows do (``env_wrapper: AtariWrapper``, ``frame_stack: 4``). Those are the
defaults of :class:`AtariSettings`, a run's ``env_settings``. SB3's
``Monitor`` sits under the wrappers, so an episode's score is the game's, unclipped, over all its lives.

The state of each env is the emulator's (``cloneState(include_rng=True)``: RAM, frame counters,
the sticky-action RNG) plus what the Python wrappers hold (the no-op RNG, the frame buffers, the
lives left, the episode sums), the frame stack's frames, and the episode's replay: the emulator's state at the game's
last reset and the action of every frame since. ALE's state leaves out part of the TIA's: its two frame buffers,
which a game repaints only in part (Arcade-Learning-Environment PR #739), and what else Stella's ``TIA::save`` skips,
the object masks among it (after a Pong game over, an env restored without the replay drew a moving object the
original did not, for all 50 steps checked).
A restore plays the episode again from its start, which rebuilds them, then restores the saved state, so an env
continues frame for frame. It costs an episode's frames once per env at a resume (v5 truncates at 108k frames, about
30 s on a busy core); the replay adds about 15 kB per env (the start state; the actions compress to at most ~21 kB).
"""

from __future__ import annotations

import contextlib
import functools
import pickle
import zlib
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from pbx.envs.plain import PlainEnv
from pbx.envs.settings import EnvSettings, check_whole
from pbx.errors import UsageError

with contextlib.suppress(ImportError):  # the "atari" extra; without it no ALE/ id is registered
    import ale_py

    gymnasium.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr at each game's start

MAX_FRAMES = 108_000
"""The most frames a game of a v5 id lasts (its ``max_num_frames_per_episode``): a longer frame skip or no-op
start is no game at all."""
MAX_STACK = 64
"""The most frames stacked into one observation (rl-zoo stacks 4): each is a 84x84 frame in every stored
observation."""


@dataclass(frozen=True)
class AtariSettings(EnvSettings):
    """How an Atari game is played: SB3's ``AtariWrapper`` and frame stack over the emulator, rl-zoo's ``atari``
    rows' choices by default."""

    repeat_action_probability: float = 0.25
    """Sticky actions: the chance the emulator repeats its last action on a frame instead of the one asked
    (Machado et al., 2018). By default the id's own: 0.25 for the ``ALE/...-v5`` ids, 0 for ``NoFrameskip-v4``."""
    frame_skip: int = 4
    """Frames each action is repeated on, the last two max-pooled (the id's own frame skip is off)."""
    frame_stack: int = 4
    """The last frames stacked into one observation."""
    noop_max: int = 30
    """At most this many no-op frames at a game's start, a random number each game (0: none)."""
    terminal_on_life_loss: bool = True
    """A lost life ends a training episode (the game goes on); test episodes always play whole games."""
    clip_reward: bool = True
    """The agent learns from rewards clipped to their sign; scores are the game's, unclipped."""

    @classmethod
    def defaults(cls, env: str) -> dict[str, Any]:
        """The id's own sticky actions (gymnasium's record of it; an id not registered keeps 0.25, and is refused
        as unknown or its simulator missing before any env is built)."""
        try:
            kwargs = gymnasium.spec(env).kwargs
        except gymnasium.error.Error:
            return {}
        return {"repeat_action_probability": float(kwargs.get("repeat_action_probability", 0.25))}

    def __post_init__(self) -> None:
        p = self.repeat_action_probability
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise UsageError(f"repeat_action_probability must be a probability in [0, 1], got {p!r}")
        check_whole("frame_skip", self.frame_skip, 1, MAX_FRAMES)
        check_whole("frame_stack", self.frame_stack, 1, MAX_STACK)
        check_whole("noop_max", self.noop_max, 0, MAX_FRAMES, " (0: no no-op start)")
        for name in ("terminal_on_life_loss", "clip_reward"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be true or false, got {getattr(self, name)!r}")

EnvState = tuple[list[dict[str, Any]], Any, np.random.Generator, Any]
"""An env's saved state (see :func:`_env_state`)."""


class _Replay(gymnasium.Wrapper):
    """Records the emulator's state at the game's last real reset and every action since, one per frame.

    ALE's state leaves out the TIA's frame buffers and object masks, and ale-py cannot set them. A reset sets them
    afresh (Stella's ``TIA::reset``) and the emulator is deterministic, so resetting, restoring the start state and
    acting the same actions again rebuilds them as they were. It sits directly on gymnasium's game so that every
    frame's action is recorded, SB3's no-ops, fire and skipped frames included; SB3's lost life is no reset of the
    game and so no new start.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.start: ale_py.ALEState | None = None
        self.actions = bytearray()  # the game's action indices; v5 has at most 18

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        out = self.env.reset(**kwargs)
        self.start, self.actions = self.unwrapped.ale.cloneState(include_rng=True), bytearray()
        return out

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self.actions.append(int(action))
        return self.env.step(action)

    def state(self) -> tuple[ale_py.ALEState, bytes] | None:
        """The start state and the actions, compressed (a frame's action repeats over the agent's frame skip);
        ``None`` in an episode begun before a restore from a checkpoint without them."""
        return None if self.start is None else (self.start, zlib.compress(self.actions))

    def replay(self, state: tuple[ale_py.ALEState, bytes] | None) -> None:
        """Play the episode so far again from its start, which rebuilds the TIA's state that ALE's leaves out."""
        if state is None:
            self.start, self.actions = None, bytearray()
            return
        self.start, self.actions = state[0], bytearray(zlib.decompress(state[1]))
        ale = self.unwrapped.ale
        ale.reset_game()  # sets the frame buffers and masks afresh, which restoreState leaves as they are
        ale.restoreState(self.start)
        actions = [ale_py.Action[name] for name in self.unwrapped.get_action_meanings()]
        for action in self.actions:
            ale.act(actions[action])


class AtariVecEnv(VecFrameStack):
    """SB3's frame stack over the wrapped games, whose state can be saved and restored whole."""

    venv: DummyVecEnv

    def get_state(self) -> bytes:
        return pickle.dumps(([_env_state(env) for env in self.venv.envs], self.stacked_obs.stacked_obs))

    def set_state(self, state: bytes) -> None:
        envs, stacked = pickle.loads(state)
        for env, saved in zip(self.venv.envs, envs):
            _set_env_state(env, saved)
        self.stacked_obs.stacked_obs = stacked


def _chain(env: gymnasium.Env) -> list[gymnasium.Env]:
    """The wrappers from the outermost in, then the game."""
    chain = [env]
    while isinstance(chain[-1], gymnasium.Wrapper):
        chain.append(chain[-1].env)
    return chain


def _parts(env: gymnasium.Env) -> tuple[list[gymnasium.Wrapper], _Replay, gymnasium.Env]:
    """The SB3 and gymnasium wrappers (the order the state lists their attributes in), the replay, the game."""
    *wrappers, game = _chain(env)
    replay = next(w for w in wrappers if isinstance(w, _Replay))
    return [w for w in wrappers if w is not replay], replay, game.unwrapped


def _env_state(env: gymnasium.Env) -> EnvState:
    """Each wrapper's own attributes, the emulator's state with its RNG, the game's RNG (the no-ops'), and the
    episode's replay."""
    wrappers, replay, game = _parts(env)
    return ([{k: v for k, v in vars(w).items() if k != "env"} for w in wrappers],
            game.ale.cloneState(include_rng=True), game.np_random, replay.state())


def _set_env_state(env: gymnasium.Env, state: EnvState) -> None:
    """Restore a state of :func:`_env_state`; one saved before the replay was (three parts) restores all but the
    TIA's state that ALE's leaves out, as it did then."""
    attributes, emulator, rng, *replayed = state
    wrappers, replay, game = _parts(env)
    for wrapper, saved in zip(wrappers, attributes):
        wrapper.__dict__.update(saved)
    replay.replay(replayed[0] if replayed else None)
    game.ale.restoreState(emulator)
    game.np_random = rng


def _make_game(env: str, settings: AtariSettings, render: bool) -> _Replay:
    """The game with its replay innermost, under SB3's Monitor and wrappers."""
    return _Replay(gymnasium.make(env, **_game_kwargs(settings), render_mode="rgb_array" if render else None))


def _game_kwargs(settings: AtariSettings) -> dict[str, Any]:
    """The game's keywords: its own frame skip off (``AtariWrapper``'s in its place), its sticky actions."""
    return {"frameskip": 1, "repeat_action_probability": settings.repeat_action_probability}


def _wrapper_kwargs(settings: AtariSettings, train: bool) -> dict[str, Any]:
    """``AtariWrapper``'s keywords; ``train``: a lost life ends the episode where the settings say so."""
    return {"noop_max": settings.noop_max, "frame_skip": settings.frame_skip, "clip_reward": settings.clip_reward,
            "terminal_on_life_loss": train and settings.terminal_on_life_loss}


def make_atari_env(env: str, n_envs: int, seed: int, settings: AtariSettings | None = None, *, train: bool = True,
                   render: bool = False, **_: Any) -> AtariVecEnv:
    """``n_envs`` games of ``env`` seeded from ``seed``, played as ``settings`` say (None: the defaults of
    ``env``); ``train``: a lost life ends the episode where the settings say so."""
    settings = settings if settings is not None else AtariSettings(**AtariSettings.defaults(env))
    make = functools.partial(_make_game, env, settings, render)
    venv = make_vec_env(make, n_envs=n_envs, seed=seed, wrapper_class=AtariWrapper,
                        wrapper_kwargs=_wrapper_kwargs(settings, train), vec_env_cls=DummyVecEnv)
    return AtariVecEnv(venv, settings.frame_stack)


def plain_env(env: str, settings: AtariSettings) -> PlainEnv:
    """``env`` as test episodes play it, built by plain SB3: the game, ``AtariWrapper`` (a lost life is no end),
    the frame stack, as ``settings`` say."""
    return PlainEnv(env, _game_kwargs(settings), f"{AtariWrapper.__module__}.{AtariWrapper.__name__}",
                    _wrapper_kwargs(settings, train=False), settings.frame_stack, ("ale_py",))
