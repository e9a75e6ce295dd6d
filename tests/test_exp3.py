"""DepRound's exact marginals and TV.EXP3.M on synthetic bandits and, through PB2, on population histories."""

from __future__ import annotations

import numpy as np
import pytest

from pbx.history import History, Row
from pbx.space import Categorical, Continuous, Space
from pbx.strategies import PB2, PB2Settings, RunContext
from pbx.strategies.bayes.categorical import SHARE_PER_ROUND, CategoryBandits
from pbx.strategies.bayes.exp3 import Exp3M, Play, dep_round, exp3m_gamma

ARMS, BEST = 8, 3


def test_dep_round_draws_k_distinct_arms_with_marginals_k_p() -> None:
    """10,000 draws of 3 of 8: each arm's frequency within 0.016 of p_i (3.3 standard errors at most)."""
    rng = np.random.default_rng(0)
    raw = rng.uniform(0.05, 1.0, ARMS)
    p = np.minimum(3 * raw / raw.sum(), 1.0)
    p *= 3 / p.sum()  # no entry reaches 1 here: sum exactly 3
    draws = 10_000
    counts = np.zeros(ARMS)
    for _ in range(draws):
        picked = dep_round(p, 3, rng)
        assert len(picked) == 3 and len(set(picked.tolist())) == 3
        counts[picked] += 1
    np.testing.assert_allclose(counts / draws, p, atol=0.016)


def test_dep_round_takes_certain_arms_and_refuses_bad_input() -> None:
    rng = np.random.default_rng(1)
    p = np.array([1.0, 0.5, 0.5, 0.0, 1.0])
    for _ in range(50):
        picked = set(dep_round(p, 3, rng).tolist())
        assert {0, 4} <= picked and 3 not in picked and len(picked) == 3
    assert dep_round(np.ones(4), 4, rng).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="summing to k=2"):
        dep_round(np.array([0.5, 0.5, 0.5]), 2, rng)


def test_exp3m_probabilities_are_capped_at_one_and_sum_to_k() -> None:
    bandit = Exp3M(ARMS, 3, gamma=0.2, share=0.0)
    weights = np.array([50.0, 1, 1, 1, 1, 1, 1, 1])
    p, capped = bandit.probabilities(weights / weights.sum(), 3)
    assert np.isclose(p.sum(), 3) and np.all(p <= 1) and p[0] == pytest.approx(1.0)
    assert capped.tolist() == [True] + [False] * 7
    p, capped = bandit.probabilities(np.full(ARMS, 1 / ARMS), 3)
    np.testing.assert_allclose(p, 3 / ARMS)
    assert not capped.any()


def _play(means: np.ndarray, rounds: int, seed: int) -> list[int]:
    """One pick per round for ``rounds`` rounds; rewards ``means`` plus noise, clipped to [0, 1]."""
    rng = np.random.default_rng(seed)
    bandit = Exp3M(ARMS, 1, exp3m_gamma(ARMS, 1, rounds), SHARE_PER_ROUND / rounds)
    weights, picks = bandit.uniform(), []
    for _ in range(rounds):
        arm = bandit.draw(weights, 1, rng)[0]
        picks.append(arm)
        weights = bandit.update(weights, [Play(arm, float(np.clip(means[arm] + rng.normal(0, 0.1), 0, 1)))])
    return picks


def test_exp3_learns_a_clearly_best_arm() -> None:
    """8 arms, one with mean reward 0.9 and the rest 0.1, 200 rounds, 10 seeds: the best arm's share of the
    picks grows from about chance in the first quarter to over half in the last."""
    means = np.full(ARMS, 0.1)
    means[BEST] = 0.9
    shares = np.array([[np.mean(np.equal(q, BEST)) for q in np.array_split(_play(means, 200, seed), 4)]
                       for seed in range(10)]).mean(axis=0)
    assert shares[0] < 0.25 and shares[-1] > 0.5 and np.all(np.diff(shares) > 0), shares


def test_exp3_stays_near_uniform_when_no_arm_is_better() -> None:
    counts = np.bincount(np.concatenate([_play(np.full(ARMS, 0.5), 200, seed) for seed in range(10)]),
                         minlength=ARMS)
    np.testing.assert_allclose(counts / counts.sum(), 1 / ARMS, atol=0.04)


def test_bandits_replay_from_the_window_without_drawing() -> None:
    """The weights are a function of the plays alone; the round's generator is used only by the draw."""
    space = Space({"x": Continuous(0.0, 1.0), "opt": Categorical(("a", "b", "c", "d"))})
    rounds = np.repeat(np.arange(1, 11), 4)
    cats = np.tile([[0.0], [1.0], [2.0], [3.0]], (10, 1))
    rate = np.where(cats[:, 0] == 2, 1.0, 0.1) * np.repeat(np.linspace(1, 0.5, 10), 4)
    explored = np.ones(len(rounds), dtype=bool)
    one = CategoryBandits.replay(space, rounds, cats, rate, explored, run_rounds=20, plays=1, exp3_plays="all")
    two = CategoryBandits.replay(space, rounds, cats, rate, explored, run_rounds=20, plays=1, exp3_plays="all")
    np.testing.assert_array_equal(one.weights["opt"], two.weights["opt"])
    assert int(np.argmax(one.weights["opt"])) == 2
    info = one.info()
    assert set(info) == {f"exp3.opt.{c}" for c in "abcd"} and np.isclose(sum(info.values()), 1)
    rng, twin = np.random.default_rng(5), np.random.default_rng(5)
    picks = one.draw(3, rng)
    assert len({p["opt"] for p in picks}) == 3
    assert picks == two.draw(3, twin)


def test_a_drawn_play_is_importance_weighted_and_a_sure_one_is_not() -> None:
    """Same reward on two arms: the arm the bandit drew (chance 1/4) grows by exp(k gamma 0.8 / (K / 4)), the arm
    a member kept running on (chance 1) by exp(k gamma 0.8 / K); two plays of one arm are two updates."""
    bandit = Exp3M(4, 1, gamma=0.5, share=0.0)
    w = bandit.update(bandit.uniform(), [Play(0, 0.8), Play(1, 0.8, drawn=False)])
    assert w[0] / w[2] == pytest.approx(np.exp(0.5 * 0.8)) and w[1] / w[2] == pytest.approx(np.exp(0.5 * 0.8 / 4))
    twice = bandit.update(bandit.uniform(), [Play(1, 0.8, drawn=False), Play(1, 0.8, drawn=False)])
    assert twice[1] / twice[2] == pytest.approx(np.exp(0.5 * 0.8 / 2))


@pytest.mark.parametrize("exp3_plays", ["all", "drawn"])
def test_exp3_plays_says_which_intervals_count_as_drawn(exp3_plays: str) -> None:
    """One round, rates 1, 1, 0: arm a ran by a member that kept running, b by one the bandit drew it for, c
    by one that kept running. ``all`` weighs a and b alike; ``drawn`` counts a's round at chance 1, so b
    ends ahead of a, and a (reward 1) still ahead of c (reward 0) and d (not played)."""
    space = Space({"opt": Categorical(("a", "b", "c", "d"))})
    rounds, cats, rate = np.array([1, 1, 1]), np.array([[0.0], [1.0], [2.0]]), np.array([1.0, 1.0, 0.0])
    bandits = CategoryBandits.replay(space, rounds, cats, rate, np.array([False, True, False]), run_rounds=25,
                                     plays=1, exp3_plays=exp3_plays)
    w = bandits.weights["opt"]
    assert w[2] == pytest.approx(w[3]) and w[0] > w[2]
    assert w[0] == pytest.approx(w[1]) if exp3_plays == "all" else w[0] < w[1]


OPTS = Space({"opt": Categorical(("a", "b", "c", "d"))})
POP = 4


def population_history(heights: dict[str, float], rounds: int, seed: int) -> History:
    """4 members, each round improving at their category's height plus noise (sd 0.2); after each round the
    worst copies the best and redraws its category uniformly, the others keep running."""
    rng = np.random.default_rng(seed)
    cats = [str(rng.choice(list(heights))) for _ in range(POP)]
    scores, parents, rows = np.zeros(POP), list(range(POP)), []
    for r in range(rounds + 1):
        if r:
            scores = scores + np.array([heights[c] for c in cats]) + rng.normal(0, 0.2, POP)
        rows += [Row(m, r, r + 1, float(r), float(scores[m]), float("nan"), parents[m], parents[m] != m,
                     {"opt": cats[m]}) for m in range(POP)]
        worst, best = int(np.argmin(scores)), int(np.argmax(scores))
        parents = [best if m == worst else m for m in range(POP)]
        scores[worst], cats[worst] = scores[best], str(rng.choice(list(heights)))
    return History(OPTS.names).with_rows(rows)


def exp3_chances(history: History, rounds: int) -> np.ndarray:
    """(4,) PB2-Mult's chance of each category for its pick after the first ``rounds`` rounds of ``history``."""
    strategy = PB2(PB2Settings(cat_exp="exp3"), context=RunContext(rounds=60, pop_size=POP))
    head = History(OPTS.names, history.frame[history.frame["round"] <= rounds])
    pick = next(d for d in strategy.decide(head, OPTS, np.random.default_rng(0)) if d.explored)
    return np.array([pick.info[f"exp3.opt.{c}"] for c in "abcd"])


def test_pb2_mult_learns_a_better_category_as_rounds_pass_and_not_an_equal_one() -> None:
    """Population 4, 4 categories, 6 histories of 60 rounds. c improves twice as fast: its chance grows from 15
    to 30 rounds and holds there (the fixed share caps it: about 0.70 from 30 rounds on over 20 histories), well
    above uniform's 0.25. All equal: every chance stays near 0.25."""
    better = [population_history({"a": 0.5, "b": 0.5, "c": 1.0, "d": 0.5}, 60, seed) for seed in range(6)]
    p_best = [np.mean([exp3_chances(h, n)[2] for h in better]) for n in (15, 30, 60)]
    assert p_best[0] + 0.1 < min(p_best[1], p_best[2]) and p_best[2] > 0.55, p_best
    equal = np.array([exp3_chances(population_history(dict.fromkeys("abcd", 0.5), 60, seed), 60)
                      for seed in range(6)])
    # each history drifts (the reference's plays, the default, weigh held categories up: 0.12 to 0.40 here), far
    # less than the better category's lead; the average over histories stays near uniform
    assert equal.min() > 0.1 and equal.max() < 0.42 and np.abs(equal.mean(0) - 0.25).max() < 0.07, equal
