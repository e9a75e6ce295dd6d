"""The exploit step copies on merit only: no NaN donors, no copies between equals, no NaN member left training;
and its guards: burn-in, the replace margin, the sigma rule and what tied members do."""

from __future__ import annotations

import numpy as np
import pytest

from pbx.errors import UsageError
from pbx.history import History, Row
from pbx.space import Continuous, Space
from pbx.strategies.pbt import PBT
from pbx.strategies.selection import ExploitRules, Sigma, Truncation, WinnerTakesAll, make_selection

from conftest import run_toy, synthetic_history

NAN = float("nan")
RULES = [Truncation(0.25), Truncation(0.5), WinnerTakesAll()]
MARGIN = ExploitRules(margin_rel=0.1, margin_abs=0.2)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.name}")
@pytest.mark.parametrize("scores", [[NAN] * 4, [1.0] * 4, [NAN, NAN], [2.0, 2.0]])
def test_no_information_copies_nothing(rule, scores) -> None:
    for seed in range(5):
        assert rule.pairs(np.array(scores), np.random.default_rng(seed)) == {}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.name}")
def test_never_copies_a_nan_donor_and_replaces_every_nan_member(rule) -> None:
    scores = np.array([NAN, 3.0, NAN, NAN])  # one finite member: it is every NaN member's donor
    for seed in range(5):
        assert rule.pairs(scores, np.random.default_rng(seed)) == {0: 1, 2: 1, 3: 1}


def test_truncation_copies_only_strictly_better_donors() -> None:
    # members 0 and 1 tie at the top; 2 and 3 tie at the bottom: with quantile 0.5 both bottom ones copy
    scores = np.array([5.0, 5.0, 1.0, 1.0])
    for seed in range(5):
        pairs = Truncation(0.5).pairs(scores, np.random.default_rng(seed))
        assert set(pairs) == {2, 3} and set(pairs.values()) <= {0, 1}
    # three members tie at the top: the top quarter is member 0 (ties in member order), only member 1 copies
    assert Truncation(0.25).pairs(np.array([5.0, 1.0, 5.0, 5.0]), np.random.default_rng(0)) == {1: 0}


def test_a_finite_member_outside_the_bottom_keeps_training() -> None:
    scores = np.array([4.0, 3.0, 2.0, 1.0, NAN])
    pairs = Truncation(0.25).pairs(scores, np.random.default_rng(0))
    # ceil(0.25 * 5) = 2: the bottom two are 3 and the NaN member 4; both copy one of the top two
    assert set(pairs) == {3, 4} and set(pairs.values()) <= {0, 1}


def test_sigma_rule_on_a_hand_made_population() -> None:
    # mean 5, std 2.89: leaders above 7.89 (member 5), underperformers below 2.11 (member 0)
    scores = np.array([0.0, 5.0, 5.0, 5.0, 5.0, 10.0])
    assert Sigma(1.0).groups(scores) == ([5], [0])
    for seed in range(3):
        assert Sigma(1.0).pairs(scores, np.random.default_rng(seed)) == {0: 5}
    # two leaders (members 4 and 5) and two underperformers: each copies one of the leaders
    scores = np.array([0.0, 1.0, 5.0, 5.0, 9.0, 10.0])
    assert Sigma(0.5).groups(scores) == ([4, 5], [0, 1])
    donors = {d for seed in range(20) for d in Sigma(0.5).pairs(scores, np.random.default_rng(seed)).values()}
    assert donors == {4, 5}
    # nobody stands out: k = 2 finds no leader, so nobody copies, however low the bottom is
    assert Sigma(2.0).pairs(np.array([0.0, 5.0, 5.0, 5.0, 5.0, 10.0]), np.random.default_rng(0)) == {}
    # the NaN policy holds without a leader: a NaN member copies the best
    assert Sigma(1.0).pairs(np.array([NAN, 1.0, 1.0, 2.0]), np.random.default_rng(0)) == {0: 3}
    with pytest.raises(UsageError, match="sigma_k must be > 0"):
        make_selection("sigma", sigma_k=0.0)


def test_sigma_copies_nothing_inside_the_replace_margin() -> None:
    # member 3 (95) is the one below mean - k std; its leaders (104, 104.5) beat it by 9 and 9.5, not by more
    # than 10% of 95: with the margin it stays, without it it copies
    scores = np.array([100.0, 100.0, 100.0, 95.0, 104.0, 104.5])
    assert Sigma(0.5).groups(scores) == ([4, 5], [3])
    for seed in range(5):
        assert Sigma(0.5, MARGIN).pairs(scores, np.random.default_rng(seed)) == {}
        assert Sigma(0.5).pairs(scores, np.random.default_rng(seed)).keys() == {3}


@pytest.mark.parametrize("rule", [Truncation(0.5, MARGIN), WinnerTakesAll(MARGIN)], ids=lambda r: r.name)
def test_no_copy_inside_the_replace_margin(rule) -> None:
    # the best (10) beats member 0 (9.5) by 5% < 10% relative, and member 1 (9.9) by 0.1 < 0.2 absolute;
    # member 2 (4) is replaced; member 3 (-1) too (its relative gap is measured from |-1|)
    scores = np.array([9.5, 9.9, 4.0, -1.0, 10.0])
    for seed in range(5):
        pairs = rule.pairs(scores, np.random.default_rng(seed))
        assert 0 not in pairs and 1 not in pairs and 3 in pairs
    assert Truncation(0.5).pairs(np.array([9.5, 9.9, 4.0, -1.0, 10.0]), np.random.default_rng(0)).keys() >= {3}
    assert WinnerTakesAll().pairs(scores, np.random.default_rng(0)) == {0: 4, 1: 4, 2: 4, 3: 4}  # no margin
    assert MARGIN.better(np.array([NAN, 0.0]), 1, 0)  # a NaN member is replaced whatever the margin
    for bad in ({"margin_rel": -0.1}, {"margin_abs": -1.0}, {"burn_in": -1}, {"tied": "copy"}):
        with pytest.raises(UsageError, match=f"{next(iter(bad))} must"):
            ExploitRules(**bad)


def test_no_copy_before_burn_in() -> None:
    space = Space({"x": Continuous(0.0, 1.0)})
    history = synthetic_history(space, pop=4, rounds=3)  # 10 steps per round: 30 after the last
    for burn_in, copies in ((31, False), (30, True)):
        strategy = PBT(selection=Truncation(0.25, ExploitRules(burn_in=burn_in)))
        decisions = strategy.decide(history, space, np.random.default_rng(0))
        assert any(d.copies for d in decisions) is copies


def test_burn_in_in_a_toy_run(tmp_path) -> None:
    """The guard through the runner: no row before step 40 started from a copy; after it, copies."""
    frame = run_toy(tmp_path / "run", burn_in=40, max_budget=80).frame
    copied = frame[frame["parent"] != frame["member"]]
    assert copied["steps"].min() == 44  # the first decision allowed is after step 40; it shows in the next row


def test_tied_members_explore_their_own_config_when_told() -> None:
    scores = np.array([1.0, 1.0, 1.0, 1.0])  # a converged deterministic population
    assert Truncation(0.25).pairs(scores, np.random.default_rng(0)) == {}
    assert Truncation(0.25, ExploitRules(tied="explore")).pairs(scores, np.random.default_rng(0)) == {3: 3}
    assert WinnerTakesAll(ExploitRules(tied="explore")).pairs(scores, np.random.default_rng(0)) == {1: 1, 2: 2, 3: 3}
    space = Space({"x": Continuous(0.0, 1.0)})
    rows = [Row(member=m, round=0, steps=4, wall_s=0.0, score=1.0, test_score=NAN, parent=m, explored=False,
                config={"x": 0.5}) for m in range(4)]
    history = History(space.names).with_rows(rows)
    strategy = PBT(selection=Truncation(0.25, ExploitRules(tied="explore")))
    decisions = strategy.decide(history, space, np.random.default_rng(0))
    assert [(d.copies, d.explored) for d in decisions] == [(False, False)] * 3 + [(False, True)]
    assert decisions[3].ops[0] == "tied" and decisions[3].config["x"] != 0.5
