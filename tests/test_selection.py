"""The exploit step copies on merit only: no NaN donors, no copies between equals, no NaN member left training."""

from __future__ import annotations

import numpy as np
import pytest

from pbx.strategies.selection import Truncation, WinnerTakesAll

NAN = float("nan")
RULES = [Truncation(0.25), Truncation(0.5), WinnerTakesAll()]


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
