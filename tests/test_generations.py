"""BG-PBT and IPBT on the toy: a first population larger than the kept one, restarts that change the round's
length and the weights, and the runner's promises kept through them (kill -9 and --resume, two MPI ranks)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from pbx.history import Row, read_csv
from pbx.members import MemberContext, algo_class
from pbx.strategies.generations import copula
from pbx.strategies.ipbt import smoothed, stagnated
from conftest import kill_after, run_toy, start_train, toy_config
from test_mpi import history, mpiexec, train

IPBT_TOY = ("--env", "toy", "--search", "IPBT", "--seed", "0")


def _rounds(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.groupby("round").agg(rows=("member", "count"), steps=("steps", "max"), restart=("restart", "first"))


def test_ipbt_cuts_its_first_population_and_restarts_with_rounds_twice_as_long(tmp_path) -> None:
    frame = run_toy(tmp_path / "run", search="IPBT").frame
    rounds = _rounds(frame)
    assert rounds["rows"].iloc[0] == 8 and (rounds["rows"].iloc[1:][~rounds["restart"].iloc[1:]] == 4).all()
    restarts = list(rounds.index[rounds["restart"]])
    assert restarts, "the toy stagnates: IPBT must restart at least once"
    first = restarts[0]
    assert (rounds.loc[restarts, "rows"] == 8).all()  # the restart's 8 candidates, then the best 4 go on
    lengths = rounds["steps"].diff().fillna(rounds["steps"].iloc[0]).astype(int)
    assert set(lengths.iloc[:first]) == {4} and set(lengths.iloc[first:first + 2]) == {8}  # t_ready 4, then 8
    candidates = frame[frame["round"] == first]
    assert candidates["explored"].all() and candidates["parent"].isin(range(4)).all()
    # half the candidates have fresh weights: their scores fall back near the toy's start (Q(0.9, 0.9) = -0.42)
    before = frame[frame["round"] == first - 1]["score"].max()
    assert (candidates["score"] < before - 0.5).sum() >= 2 and (candidates["score"] > before).any()
    after = frame[frame["round"] == first + 1]
    assert len(after) == 4 and set(after["parent"]) <= set(candidates["member"])
    # budget: the first round and each restart round count twice (8 members for 4), so members end short of 200
    assert frame["steps"].max() == 200 - 4 - sum(4 * 2 ** (k + 1) for k in range(len(restarts)))


def test_bgpbt_starts_three_times_larger_and_exploits_one_in_eight(tmp_path) -> None:
    frame = run_toy(tmp_path / "run", search="BGPBT", pop_size=8, max_budget=80).frame
    rounds = _rounds(frame)
    assert rounds["rows"].iloc[0] == 24 and (rounds["rows"].iloc[1:] == 8).all()
    kept = frame[frame["round"] == 1]
    first = frame[frame["round"] == 0].set_index("member")["score"]
    assert set(kept["parent"]) <= set(first.nlargest(8).index)  # the best 8 of 24 go on (some exploited at once)
    assert (kept["parent"] >= 8).any()  # kept members from past pop_size moved into the free places
    copies = frame[(frame["round"] > 1) & (frame["parent"] != frame["member"])]
    assert copies.groupby("round").size().max() == 1  # quantile 0.125 of 8: one recipient a round


def test_bgpbt_restarts_a_stagnant_generation_with_new_configs_and_the_same_weights(tmp_path) -> None:
    """The toy's best rises every round, so BG-PBT never restarts on it: three rounds that fall short of the
    generation's best are added to a real run's history, and the decisions after them restart."""
    cfg = toy_config({"patience": 3}, search="BGPBT", max_budget=40)
    history = run_toy(tmp_path / "run", {"patience": 3}, search="BGPBT", max_budget=40)
    strategy, record = cfg.build_strategy(), history.latest()["score"].max()
    assert not any(d.restart for d in strategy.decide(history, cfg.space, np.random.default_rng(0)))
    for k in range(3):
        latest = history.latest()
        history = history.with_rows([Row(member=int(r["member"]), round=int(r["round"]) + 1, steps=int(r["steps"]) + 4,
                                         wall_s=0.0, score=record - 0.1 * (k + 1) - 0.01 * int(r["member"]),
                                         test_score=np.nan, parent=int(r["member"]), explored=False,
                                         config=history.config_of(r)) for _, r in latest.iterrows()])
    decisions = strategy.decide(history, cfg.space, np.random.default_rng(0))
    assert all(d.restart and d.explored and not d.copies and d.reset is None for d in decisions)
    assert len(decisions) == 4 and all(d.config != history.config_of(r) for d, (_, r) in
                                       zip(decisions, history.latest().iterrows()))


@pytest.mark.parametrize("rows", [7, 92, 100])  # after round 0 (8 candidates), before and in the restart round
def test_a_killed_ipbt_run_resumes_to_the_uninterrupted_history(rows: int, tmp_path) -> None:
    whole = start_train(*IPBT_TOY, "--run-dir", str(tmp_path / "whole"))
    assert whole.wait(timeout=300) == 0, whole.stderr.read()
    killed = start_train(*IPBT_TOY, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=rows)
    resumed = start_train("--resume", str(tmp_path / "killed"))
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    expected = read_csv(tmp_path / "whole" / "history.csv").drop(columns="wall_s")
    assert expected["restart"].any()
    pd.testing.assert_frame_equal(read_csv(tmp_path / "killed" / "history.csv").drop(columns="wall_s"), expected)


def test_two_ranks_write_the_synchronous_ipbt_history(tmp_path) -> None:
    sync = train(*IPBT_TOY, "--run-dir", str(tmp_path / "sync"))
    assert sync.returncode == 0, sync.stderr
    mpi = mpiexec("-m", "pbx.train", *IPBT_TOY, "--run-dir", str(tmp_path / "mpi"))
    assert mpi.returncode == 0, mpi.stderr
    pd.testing.assert_frame_equal(history(tmp_path / "mpi"), history(tmp_path / "sync"))
    assert history(tmp_path / "mpi")["restart"].any()


def test_stagnation_fails_a_round_whose_smoothed_best_did_not_rise() -> None:
    rising = np.linspace(0.0, 1.0, 8)
    assert stagnated(rising, 15) == (False, False)
    assert stagnated(np.array([0.0, 0.5, 0.9, 1.0, 1.0, 0.99, 0.98, 0.97]), 15) == (True, False)
    assert stagnated(np.array([1.0, 1.0, 1.0]), 15) == (True, False)  # flat: nothing rose
    # 15 rounds whose last 14 barely passed the first's best: the slow rule, which restarts at once
    slow = np.concatenate([[1.0], np.linspace(0.0, 1.01, 14)])
    assert stagnated(slow, 15) == (True, True) and stagnated(slow[:14], 15) == (False, False)
    noisy = np.array([0.0, 1.0, 0.2, 1.2, 0.4, 1.4, 0.6, 1.6])
    assert np.all(np.diff(smoothed((noisy - noisy.mean()) / noisy.std(ddof=1))) > 0)  # the GP sees the trend


def test_copula_gives_normal_scores_of_the_ranks() -> None:
    y = copula(np.array([3.0, 1.0, 2.0, 2.0]))
    assert y is not None and y[1] < y[2] == y[3] < y[0] and abs(y[2]) < abs(y[1])
    assert copula(np.array([1.0, 1.0])) is None


def _sac(seed: int):
    cls = algo_class("sac")
    settings = cls.settings_cls(buffer_size=1000, learning_starts=32, batch_size=32, net_arch=[16, 16],
                                eval_episodes=1)
    return cls(MemberContext(env="Pendulum-v1", index=seed, seed=seed, device="cpu"), settings, {})


def _weights(member) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in member.model.policy.state_dict().items() if torch.is_floating_point(v)}


def test_an_sb3_member_resets_its_weights_from_a_seed_alone() -> None:
    """SAC: several networks (actor, critics, target critics) and optimizers. A fresh learner depends on the seed
    only; shrink and perturb mixes the two; the optimizers' moments are cleared and training goes on."""
    member, other = _sac(0), _sac(1)
    member.train(64)
    trained = _weights(member)
    assert any(opt.state for opt in member._learner.optimizers())
    member.reset_weights("shrink_perturb", seed=7, shrink=1.0, perturb=0.0)
    assert all(torch.equal(trained[k], v) for k, v in _weights(member).items())
    assert not any(opt.state for opt in member._learner.optimizers())
    other.reset_weights("reinit", seed=7)
    fresh = _weights(other)
    assert not torch.equal(fresh["actor.mu.weight"], trained["actor.mu.weight"])
    member.reset_weights("shrink_perturb", seed=7, shrink=0.2, perturb=0.1)
    assert all(torch.allclose(v, 0.2 * trained[k] + 0.1 * fresh[k]) for k, v in _weights(member).items())
    member.reset_weights("reinit", seed=7)
    assert all(torch.equal(v, fresh[k]) for k, v in _weights(member).items())
    member.train(64)
    assert all(torch.isfinite(v).all() for v in _weights(member).values())


def test_ipbt_refuses_a_member_that_cannot_reset_its_weights() -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--env", "toy-deceptive", "--search", "IPBT"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "reset_weights" in proc.stderr
