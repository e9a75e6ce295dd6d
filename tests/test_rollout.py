"""The direct rollout (:mod:`pbx.members.ppo.rollout`) gives SB3's numbers: the same buffer, the same update."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

# pbx.envs first: it silences the banner that importing SB3 would print (see pbx.envs).
import pbx.envs  # noqa: F401  # isort: skip
from stable_baselines3.common.buffers import RolloutBuffer

from pbx.members.base import MemberContext
from pbx.members.ppo.ppo import PPOMember
from pbx.members.ppo.rollout import DeviceRolloutBuffer, use_sb3_rollout
from pbx.members.ppo.settings import PPOSettings

CONFIG = {"learning_rate": 1e-3, "ent_coef": 0.01, "clip_range": 0.2}
CASES = {
    # the IMPALA CNN on uint8 frames, the reference value loss, discrete actions
    "bigfish": {"n_envs": 4, "n_steps": 16, "batch_size": 16, "eval_episodes": 0},
    # an MLP, Box actions clipped to their bounds, and 200-step episodes cut by the time limit inside the
    # rollout: the value bootstrap SB3 adds at a truncation
    "Pendulum-v1": {"n_envs": 2, "n_steps": 256, "batch_size": 128, "eval_episodes": 0},
    # episodes that end for good inside the rollout (the untrained policy keeps the pole up about 20 steps, and
    # CartPole's time limit is 500): SB3 adds no bootstrap there, and GAE stops at the episode's end
    "CartPole-v1": {"n_envs": 2, "n_steps": 64, "batch_size": 64, "eval_episodes": 0},
}
WRITES = {
    "host views": False,
    # the path a GPU takes, where the step's numbers are written by torch ops into the device's tensors: on the
    # CPU the buffer writes through NumPy views of the same memory instead, so the test forces it
    "device ops": True,
}
FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns")


def member(env: str) -> PPOMember:
    settings = PPOSettings(**(PPOMember.setting_defaults(env) | CASES[env]))
    return PPOMember(MemberContext(env=env, index=0, seed=7, device="cpu"), settings, dict(CONFIG))


def on_sb3_path(m: PPOMember) -> PPOMember:
    use_sb3_rollout(m.model)
    return m


def buffer_fields(buffer: RolloutBuffer) -> dict[str, np.ndarray]:
    return {name: np.array(torch.as_tensor(getattr(buffer, name)).cpu()) for name in FIELDS}


def weights(m: PPOMember) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.model.policy.state_dict().items()}


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("env", list(CASES))
def test_the_direct_rollout_fills_sb3s_buffer_and_trains_sb3s_update_bit_for_bit(env: str, write: str) -> None:
    direct, sb3 = member(env), on_sb3_path(member(env))
    assert isinstance(direct.model.rollout_buffer, DeviceRolloutBuffer)
    assert type(sb3.model.rollout_buffer) is RolloutBuffer
    if WRITES[write]:
        direct.model.rollout_buffer._host = None  # the NumPy views of the device's tensors, made at the first reset
    seen: dict[str, Any] = {}
    for name, m in (("direct", direct), ("sb3", sb3)):
        get = m.model.rollout_buffer.get

        def spy(batch_size: int | None = None, _get: Any = get, _name: str = name, _m: PPOMember = m) -> Any:
            if _name not in seen:  # the rollout as the first update begins, before get() flattens it
                seen[_name] = buffer_fields(_m.model.rollout_buffer)
            yield from _get(batch_size)

        m.model.rollout_buffer.get = spy  # type: ignore[method-assign]
    rollout = direct.settings.n_envs * direct.settings.n_steps
    scores = direct.train(2 * rollout), sb3.train(2 * rollout)
    np.testing.assert_equal(scores[0], scores[1])
    if env != "bigfish":  # an episode ended inside the recorded rollout: Pendulum's by truncation (its bootstrap
        # was exercised), CartPole's by termination (in the first 64 steps, before any time limit: none bootstrapped)
        assert seen["sb3"]["episode_starts"][1:].any()
    assert (direct.model.rollout_buffer._host is None) == WRITES[write]
    for name in FIELDS:
        assert seen["direct"][name].dtype == seen["sb3"][name].dtype, name
        np.testing.assert_array_equal(seen["direct"][name], seen["sb3"][name], err_msg=name)
    after_direct, after_sb3 = weights(direct), weights(sb3)
    assert after_direct.keys() == after_sb3.keys()
    for key in after_direct:
        assert torch.equal(after_direct[key], after_sb3[key]), key
    assert direct.model._last_obs.tobytes() == sb3.model._last_obs.tobytes()
    assert direct.recent_score() == sb3.recent_score() or np.isnan(direct.recent_score())


def test_the_direct_rollout_trains_after_its_length_is_searched() -> None:
    """A searched ``n_steps`` rebuilds the buffer (:func:`pbx.members.sb3.member.set_rollout`) as the same class."""
    m = member("Pendulum-v1")
    m.apply({"n_steps": 64})
    assert isinstance(m.model.rollout_buffer, DeviceRolloutBuffer) and m.model.rollout_buffer.buffer_size == 64
    m.train(2 * 64)
    assert m.steps == 128
