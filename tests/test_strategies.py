"""The strategy contract, run over every registered strategy, plus selection and PBT specifics."""

from __future__ import annotations

import numpy as np
import pytest

from pbx.errors import UsageError
from pbx.history import History
from pbx.standings import rank_best_first
from pbx.plan import Rules
from pbx.space import Categorical, Continuous, Integer, Space
from pbx.strategies import STRATEGIES, ExploitExplore, RunContext, Truncation, WinnerTakesAll, make_selection
from pbx.strategies.pbt import FACTORS, PBT, perturb

from conftest import synthetic_history

ALL = sorted(STRATEGIES)
EXPLOITING = [n for n in ALL if issubclass(STRATEGIES[n], ExploitExplore)]
WHOLE = [n for n in EXPLOITING if n != "FIRE"]
"""Strategies whose selection spans the whole population (FIRE's works within sub-populations: test_fire.py)."""


def _decide(name: str, history: History, space: Space, seed: int, selection=None):
    cls = STRATEGIES[name]
    pop = int(history.frame["member"].nunique())
    settings = cls.settings_cls()
    context = RunContext(rounds=10, pop_size=pop, roles=cls.roles(settings, pop),
                         rules=Rules(10**6, 4, growth=cls.round_growth(settings)))
    strategy = cls(selection=selection, context=context)
    return strategy.decide(history, space, np.random.default_rng(seed))


@pytest.fixture
def history(mixed_space: Space) -> History:
    return synthetic_history(mixed_space, pop=8, rounds=6)


@pytest.mark.parametrize("name", ALL)
def test_one_decision_per_member_in_order_and_inside_bounds(name: str, history: History, mixed_space) -> None:
    decisions = _decide(name, history, mixed_space, seed=0)
    assert [d.member for d in decisions] == list(range(8))
    for d in decisions:
        assert mixed_space.clip(d.config) == dict(d.config)
        assert d.config["aug"] in ("crop", "flip", "rotate")


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_decisions(name: str, history: History, mixed_space) -> None:
    assert _decide(name, history, mixed_space, seed=3) == _decide(name, history, mixed_space, seed=3)


@pytest.mark.parametrize("name", EXPLOITING)
def test_other_seed_other_decisions(name: str, history: History, mixed_space) -> None:
    runs = [_decide(name, history, mixed_space, seed=s) for s in range(4)]
    assert any(r != runs[0] for r in runs[1:])


@pytest.mark.parametrize("name", WHOLE)
def test_truncation_copies_only_top_quantile_into_bottom_quantile(name: str, history: History, mixed_space) -> None:
    latest = history.latest()
    order = rank_best_first(latest["score"].to_numpy())
    top, bottom = set(order[:2].tolist()), set(order[-2:].tolist())  # ceil(0.25 * 8) = 2
    for seed in range(5):
        decisions = _decide(name, history, mixed_space, seed=seed)
        copies = {d.member: d.donor for d in decisions if d.copies}
        assert set(copies) == bottom and set(copies.values()) <= top
        assert all(d.explored for d in decisions if d.copies)
        assert all(d.config == history.config_of(latest.iloc[d.member]) for d in decisions if not d.copies)


@pytest.mark.parametrize("name", WHOLE)
def test_winner_takes_all_copies_the_best_into_all_others(name: str, history: History, mixed_space) -> None:
    decisions = _decide(name, history, mixed_space, seed=0, selection=WinnerTakesAll())
    best = int(rank_best_first(history.latest()["score"].to_numpy())[0])
    assert [d.donor for d in decisions] == [best] * 8
    assert not decisions[best].copies and not decisions[best].explored


@pytest.mark.parametrize("name", WHOLE)
def test_selection_positions_become_member_ids(name: str, history: History, mixed_space) -> None:
    """Member ids need not be positions 0..n-1: donors and recipients are reported by id."""
    frame = history.frame.copy()
    frame[["member", "parent"]] += 10
    decisions = _decide(name, History(history.hp_names, frame), mixed_space, seed=0)
    expected = _decide(name, history, mixed_space, seed=0)
    assert [d.member for d in decisions] == list(range(10, 18))
    assert [(d.member - 10, d.donor - 10, d.config) for d in decisions] == [
        (d.member, d.donor, d.config) for d in expected]
    assert any(d.copies for d in decisions)


@pytest.mark.parametrize("name", ["none", "random"])
def test_baselines_never_copy_or_change_a_config(name: str, history: History, mixed_space) -> None:
    decisions = _decide(name, history, mixed_space, seed=0)
    assert not any(d.copies or d.explored for d in decisions)


def test_baseline_starting_configs(mixed_space: Space) -> None:
    rng = np.random.default_rng(0)
    assert STRATEGIES["none"]().initial_configs(mixed_space, 3, rng) == [mixed_space.initial()] * 3
    drawn = STRATEGIES["random"]().initial_configs(mixed_space, 3, rng)
    assert len({d["lr"] for d in drawn}) == 3


def test_truncation_quantile_size_and_nan_ranks_last() -> None:
    rng = np.random.default_rng(0)
    scores = np.array([1.0, np.nan, 3.0, 2.0])
    assert Truncation(0.25).pairs(scores, rng) == {1: 2}
    assert set(Truncation(0.5).pairs(scores, rng)) == {1, 0}
    assert Truncation(0.25).pairs(np.array([0.0, 1.0]), rng) == {0: 1}  # a pair still exploits
    with pytest.raises(UsageError, match="quantile must be in"):
        Truncation(0.7)
    with pytest.raises(UsageError, match="unknown selection 'best'"):
        make_selection("best", 0.25)


def test_pbt_perturbations_use_only_the_two_factors_or_a_resample() -> None:
    space = Space({"x": Continuous(0.0, 10.0), "lr": Continuous(1e-5, 1e-1, log=True),
                   "c": Categorical(("a", "b", "c"))})
    config = {"x": 5.0, "lr": 1e-3, "c": "a"}
    rng = np.random.default_rng(0)
    seen = {"x": set(), "resample": 0, "c": 0}
    for _ in range(400):
        new, ops = perturb(config, space, rng, resample_prob=0.25)
        assert space.clip(new) == new
        for name in ("x", "lr"):
            ratio = new[name] / config[name]
            if f"{name} resample" in ops:
                seen["resample"] += 1
            else:
                factor = next(f for f in FACTORS if f"{name} * {f}" in ops)
                assert np.isclose(ratio, factor)
                seen["x"].add(factor)
        seen["c"] += "c resample" in ops
    assert seen["x"] == {0.8, 1.2}
    assert 0.15 < seen["resample"] / 800 < 0.35
    assert 0.4 < seen["c"] / 400 < 0.6


def test_pbt_clips_at_the_bound() -> None:
    space = Space({"x": Continuous(0.0, 1.0)})
    rng = np.random.default_rng(1)
    for _ in range(50):
        new, _ = perturb({"x": 1.0}, space, rng, resample_prob=0.0)
        assert new["x"] in (0.8, 1.0)
    with pytest.raises(UsageError, match="resample_prob must be in"):
        PBT.settings_cls(resample_prob=1.5)


def test_pbt_perturbs_a_discount_on_the_horizon_scale_by_its_horizon() -> None:
    space = Space({"gamma": Continuous(0.95, 0.9999, horizon=True), "linear": Continuous(0.95, 0.9999)})
    seen = set()
    for seed in range(40):
        new, ops = perturb({"gamma": 0.99, "linear": 0.99}, space, np.random.default_rng(seed), resample_prob=0.0)
        seen.add((round(new["gamma"], 6), ops[0]))
        assert new["linear"] in (0.95, 0.9999)  # on the value itself, either factor lands on a bound
    # horizon 100 times 1.2 is 120 (0.99167), times 0.8 is 80 (0.9875)
    assert seen == {(round(1 - 1 / 120, 6), "gamma horizon * 1.2"), (0.9875, "gamma horizon * 0.8")}


def test_pbt_moves_a_small_integer_by_at_least_one_step_the_factors_way() -> None:
    space = Space({"n": Integer(1, 20)})
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(50):
        new, ops = perturb({"n": 2}, space, rng, resample_prob=0.0)  # 2 * 0.8 and 2 * 1.2 both round to 2
        assert type(new["n"]) is int
        seen.add((new["n"], *ops))
    assert seen == {(1, "n * 0.8"), (3, "n * 1.2")}
    for _ in range(20):  # at the bound only the move inwards changes the value
        new, ops = perturb({"n": 1}, space, rng, resample_prob=0.0)
        assert new["n"] == (1 if ops == ["n * 0.8"] else 2)
    moved, _ = perturb({"n": 10}, space, np.random.default_rng(0), resample_prob=0.0)
    assert moved["n"] in (8, 12)  # a factor that moves the value on its own is used as is
