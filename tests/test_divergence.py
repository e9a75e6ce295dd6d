"""A diverged off-policy member recovers (issue 33): no non-finite action reaches its envs or its replay buffer.

TD3's actor is deterministic: weights gone NaN give NaN actions, and no distribution raises on them as SAC's,
PPO's and A2C's do. Stepped and stored, they left NaN rows in the buffer and NaN states in the envs, which the
rollback of the learner did not undo, so the member diverged again every round, even after copying a healthy
donor. These tests force a TD3 member's actor to NaN inside a round and check that the round raises
:class:`Diverged`, that every row of the buffer in use and the envs' latest observations are finite
afterwards, and that the member trains normally again, after a rollback and after an exploit alike.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from pbx.history import read_csv
from pbx.members.base import Diverged, MemberContext
from pbx.members.offpolicy.replay_store import FIELDS
from pbx.members.offpolicy.td3 import TD3Member, TD3Settings
from pbx.train import main


def _td3(seed: int = 0, **settings: Any) -> TD3Member:
    return TD3Member(MemberContext(env="Pendulum-v1", index=seed, seed=seed, device="cpu"),
                     TD3Settings(**{"buffer_size": 1000, "learning_starts": 32, "batch_size": 32,
                                    "net_arch": [16, 16], "policy_delay": 1, **settings}), {})


def _poison_actor_at_next_update(member: TD3Member) -> None:
    """The actor's weights turn NaN in the member's next gradient update, as a huge step would make them; the
    rest of the round then acts with them."""
    update = member.model.train

    def poisoned(gradient_steps: int, batch_size: int) -> None:
        update(gradient_steps=gradient_steps, batch_size=batch_size)
        with torch.no_grad():
            for p in member.model.actor.parameters():
                p.fill_(math.nan)
        del member.model.train  # once: SB3's own update from then on

    member.model.train = poisoned  # type: ignore[method-assign]


def _rows_in_use(member: TD3Member) -> dict[str, np.ndarray]:
    """The buffer's rows SB3 samples from (``pos`` and ``full`` say which)."""
    buffer = member.model.replay_buffer
    filled = buffer.buffer_size if buffer.full else buffer.pos
    return {name: getattr(buffer, name)[:filled] for name in FIELDS}


def _assert_clean(member: TD3Member) -> None:
    """Every row in use, the envs' latest observations and the learner are finite."""
    rows = _rows_in_use(member)
    assert len(rows["rewards"]) > 0
    for name, array in rows.items():
        bad = np.flatnonzero(~np.isfinite(array).reshape(len(array), -1).all(axis=1))
        assert len(bad) == 0, f"{len(bad)} of {len(array)} rows in use hold non-finite {name}"
    assert np.isfinite(member.model._last_obs).all() and np.isfinite(member.model._last_original_obs).all()
    assert member._finite()


def _diverge(member: TD3Member) -> None:
    """Train past the warm-up, then a round (ending mid-episode) in which the actor goes NaN."""
    member.train(200)
    _poison_actor_at_next_update(member)
    with pytest.raises(Diverged):
        member.train(100)
    assert member.steps == 300


def test_a_diverged_td3_member_keeps_its_buffer_and_envs_finite_and_trains_on() -> None:
    member = _td3()
    _diverge(member)
    _assert_clean(member)
    # Pendulum's episodes last 200 steps: a round of 400 holds a whole one whatever the envs' phase, so it scores
    score = member.train(400)
    assert math.isfinite(score)
    _assert_clean(member)


@pytest.mark.parametrize("copy_buffer", [False, True])
def test_a_diverged_td3_member_that_copies_a_donor_holds_no_non_finite_row(copy_buffer: bool,
                                                                           tmp_path: Path) -> None:
    donor, member = _td3(1, copy_buffer=copy_buffer), _td3(2, copy_buffer=copy_buffer)
    donor.train(400)
    donor.save(tmp_path / "donor.ckpt")
    _diverge(member)
    member.load(tmp_path / "donor.ckpt", own=False)
    _assert_clean(member)
    assert math.isfinite(member.train(400))
    _assert_clean(member)


def test_a_td3_run_whose_member_diverges_trains_it_normally_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A whole run on Pendulum: member 1's actor goes NaN in round 1. It scores NaN that round, copies member 0
    (keeping its own buffer, the default), and scores again in the two rounds after (rounds of two episodes:
    each holds a whole one whatever the envs' phase)."""
    train = TD3Member.train

    def forced(self: TD3Member, steps: int, stop: Callable[[], bool] | None = None) -> float:
        if self.context.index == 1 and self.steps == 400:
            _poison_actor_at_next_update(self)
        return train(self, steps, stop)

    monkeypatch.setattr(TD3Member, "train", forced)
    run_dir = tmp_path / "run"
    assert main(["--algo", "td3", "--env", "Pendulum-v1", "--search", "PBT", "--batchsize", "2", "--quantile",
                 "0.5", "--t_ready", "400", "--max_budget", "1600", "--device", "cpu", "--run-dir", str(run_dir),
                 "-m", "buffer_size=2000", "learning_starts=64", "net_arch=[16,16]", "batch_size=32",
                 "train_freq=4", "eval_episodes=1"]) == 0
    assert "diverged" in capsys.readouterr().out
    frame = read_csv(run_dir / "history.csv").set_index(["member", "round"])
    assert np.isnan(frame.loc[(1, 1), "score"]) and not frame.loc[(1, 1), "carried"]
    assert frame.loc[(1, 2), "parent"] == 0  # the NaN member copied the healthy one
    for r in (2, 3):
        assert np.isfinite(frame.loc[(1, r), "score"]) and not frame.loc[(1, r), "carried"], frame.loc[1]
        assert np.isfinite(frame.loc[(1, r), "score100"])
