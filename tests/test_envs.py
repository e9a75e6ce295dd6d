"""The env builders: the ProcGen adapter against raw ProcGen, level settings, gymnasium ids, bad names."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from procgen import ProcgenGym3Env

from pbx.envs import GAMES, GymVecEnv, ProcgenSettings, ProcgenVecEnv, check_env, make_env
from pbx.errors import UsageError

N_ENVS = 3


def random_actions(seed: int, steps: int, n_envs: int = N_ENVS) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(15, size=n_envs) for _ in range(steps)]


def test_adapter_matches_raw_procgen_step_for_step() -> None:
    """Same seed and actions: the adapter's obs are ProcGen's, channels first; rewards and ends are ProcGen's."""
    env = make_env("bigfish", N_ENVS, seed=5)
    raw = ProcgenGym3Env(num=N_ENVS, env_name="bigfish", num_levels=200, start_level=0, distribution_mode="easy",
                         rand_seed=5, num_threads=0)
    assert env.observation_space.shape == (3, 64, 64) and env.observation_space.dtype == np.uint8
    obs = env.reset()
    assert obs.shape == (N_ENVS, 3, 64, 64) and obs.dtype == np.uint8
    assert np.array_equal(obs, raw.observe()[1]["rgb"].transpose(0, 3, 1, 2))
    sums = np.zeros(N_ENVS)
    lengths = np.zeros(N_ENVS, dtype=int)
    episodes = 0
    for actions in random_actions(0, 400):
        obs, rew, done, infos = env.step(actions)
        raw.act(actions.astype(np.int32))
        raw_rew, raw_ob, raw_first = raw.observe()
        assert np.array_equal(obs, raw_ob["rgb"].transpose(0, 3, 1, 2))
        assert rew.shape == (N_ENVS,) and np.array_equal(rew, raw_rew)
        assert done.dtype == bool and np.array_equal(done, raw_first)
        assert len(infos) == N_ENVS
        sums += raw_rew
        lengths += 1
        for i in range(N_ENVS):
            if done[i]:
                # SB3's monitor convention, which fills its ep_info_buffer
                assert infos[i]["episode"] == {"r": sums[i], "l": lengths[i]}
                sums[i], lengths[i] = 0.0, 0
                episodes += 1
            else:
                assert "episode" not in infos[i]
    assert episodes > 0
    env.close()
    raw.close()


@pytest.mark.parametrize("num_levels, start_level, mode", [(200, 0, "easy"), (0, 0, "easy"), (10, 500, "hard")])
def test_level_settings_reach_procgen(num_levels: int, start_level: int, mode: str) -> None:
    env = make_env("bigfish", 1, seed=0, settings=ProcgenSettings(num_levels, start_level, mode))
    assert isinstance(env, ProcgenVecEnv)
    options = env._env.options
    assert (options["num_levels"], options["start_level"]) == (num_levels, start_level)
    assert options["distribution_mode"] == {"easy": 0, "hard": 1}[mode]


def test_state_round_trip_continues_bit_for_bit() -> None:
    """get_state / set_state into another env (other seed): the same future, episode sums included."""
    env = make_env("bigfish", N_ENVS, seed=1)
    for actions in random_actions(1, 60):
        env.step(actions)
    state = env.get_state()
    other = make_env("bigfish", N_ENVS, seed=2)
    other.set_state(state)
    for actions in random_actions(2, 300):
        a, b = env.step(actions), other.step(actions)
        for x, y in zip(a[:3], b[:3]):
            assert np.array_equal(x, y)
        assert a[3] == b[3]



def test_an_env_closes_while_another_env_is_being_built() -> None:
    # An env the garbage collector frees unclosed closes itself in __del__, which can run inside another env's
    # constructor while that holds cffi's lock (binding a C function): the close must not need the lock.
    env = make_env("bigfish", 1, seed=0)
    with env._env._ffi._lock:
        closer = threading.Thread(target=env.close, daemon=True)
        closer.start()
        closer.join(timeout=10)
        assert not closer.is_alive(), "closing the env waited for the lock another env's constructor holds"

@pytest.mark.parametrize("game", GAMES)
def test_every_procgen_game_builds_and_steps(game: str) -> None:
    check_env(game)
    env = make_env(game, 2, seed=0)
    obs, rew, done, infos = env.step(np.zeros(2, dtype=int))
    assert obs.shape == (2, 3, 64, 64) and rew.shape == done.shape == (2,)
    env.close()


def test_gymnasium_id_reports_episodes_and_restores_state() -> None:
    check_env("CartPole-v1")
    env = make_env("CartPole-v1", 2, seed=0)
    assert isinstance(env, GymVecEnv)
    env.reset()
    ones = np.ones(2, dtype=int)
    for _ in range(5):
        env.step(ones)
    state = env.get_state()
    first = [env.step(ones) for _ in range(40)]
    env.set_state(state)
    second = [env.step(ones) for _ in range(40)]
    for a, b in zip(first, second):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[2])
    episodes = [info["episode"] for _, _, done, infos in first for info, d in zip(infos, done) if d]
    assert episodes and all(set(e) >= {"r", "l"} for e in episodes)


def test_unknown_env_lists_the_procgen_games() -> None:
    with pytest.raises(UsageError) as err:
        check_env("bigfsh")
    message = str(err.value)
    assert "'bigfsh'" in message
    assert all(game in message for game in GAMES)
    assert "CartPole-v1" in message
