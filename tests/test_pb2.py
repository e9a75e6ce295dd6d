"""PB2 on synthetic histories with real GPy fits: finds the peak, spreads a round's picks, never dies."""

from __future__ import annotations

import copy
import logging
import math

import GPy
import numpy as np
import pytest
from scipy import linalg
from scipy.optimize import minimize

from pbx.errors import UsageError
from pbx.history import History, Row
from pbx.standings import rank_best_first
from pbx.space import Categorical, Config, Continuous, Integer, Space
from pbx.strategies import pb2
from pbx.strategies.bayes import acquisition, gp
from pbx.strategies.bayes.kernels import TimeVaryingSE
from pbx.strategies.bayes.acquisition import Acquisition, starts
from pbx.strategies.bayes.gp import Posterior
from pbx.strategies.bayes.observations import intervals
from pbx.strategies.pb2 import PB2, PB2Settings
from pbx.strategies.base import Pending, RoundContext, RunContext
from pbx.strategies.bayes.categorical import CategoryBandits
from pbx.strategies.selection import WinnerTakesAll

from conftest import rate_history

STEPS = 100
PEAK = np.array([0.3, 0.7])
NAN = float("nan")
RNG = np.random.default_rng(0)
"""The generator prepare() is handed; with cat_exp random it draws nothing from it."""


@pytest.fixture
def space() -> Space:
    return Space({"lr": Continuous(1e-5, 1e-3, log=True), "ent": Continuous(0.0, 0.2)})


@pytest.fixture
def mixed() -> Space:
    return Space({"lr": Continuous(1e-5, 1e-3, log=True), "ent": Continuous(0.0, 0.2),
                  "aug": Categorical(("crop", "flip", "rotate"))})


def peak_rate(unit: np.ndarray) -> float:
    """Improvement rate of a config: a bump at PEAK in the unit cube."""
    return float(np.exp(-np.sum((unit[:2] - PEAK) ** 2) / (2 * 0.25**2)))


def peaked_history(space: Space, rounds: int = 16, pop: int = 8, seed: int = 0, noise: float = 0.02) -> History:
    """Every member draws a fresh config each round and improves at ``peak_rate`` plus noise."""
    return rate_history(space, lambda config: peak_rate(space.to_unit(config)), rounds, pop, seed, noise, STEPS)


def flat_history(space: Space, rounds: int = 6, pop: int = 4, score=lambda m, r: float(r)) -> History:
    """Every member keeps the same config; ``score(m, r)`` gives the scores."""
    config = space.initial()
    rows = [Row(member=m, round=r, steps=(r + 1) * STEPS, wall_s=float(r), score=score(m, r), test_score=NAN,
                parent=m, explored=False, config=config) for r in range(rounds) for m in range(pop)]
    return History(space.names).with_rows(rows)


def best_donor(history: History) -> tuple[int, Config]:
    latest = history.latest()
    donor = int(rank_best_first(latest["score"].to_numpy(float))[0])
    return donor, history.config_of(latest.iloc[donor])


def pick(strategy: PB2, history: History, space: Space, seed: int, pending: list[Config], context,
         running: list[Pending] = ()) -> Config:
    """The pick for the best member's copy, with ``pending`` picked earlier this round (from the same donor)."""
    donor, config = best_donor(history)
    round_ = RoundContext(history, space, context, running=list(running),
                          picks=[Pending(donor, c) for c in pending])
    return strategy.explore(donor, config, round_, np.random.default_rng(seed))[0]


def distance(space: Space, a: Config, b: Config) -> float:
    return float(np.linalg.norm(space.to_unit(a) - space.to_unit(b)))


def in_bounds(space: Space, config: Config) -> bool:
    return space.clip(config) == dict(config) and set(config) == set(space.names)


@pytest.mark.parametrize("changes", [{"window": 2}, {"fit_rows": 0}, {"restarts": 0}, {"window": 10.5},
                                     {"resample_prob": 2.0}, {"pending": "all"},
                                     {"prior_mean": "median"}, {"signal_cap": 0.5}, {"signal_cap": "x"},
                                     {"signal_cap": True}])
def test_settings_name_the_bad_value(changes: dict) -> None:
    (key, value), = changes.items()
    with pytest.raises(UsageError, match=f"{key} must .*{value}"):
        PB2Settings(**changes)


def test_intervals_pair_each_row_with_its_parents_previous_round(space: Space) -> None:
    config = space.initial()
    rows = [Row(0, 0, 100, 0.0, 1.0, NAN, 0, False, config), Row(1, 0, 100, 0.0, 5.0, NAN, 1, False, config),
            Row(0, 1, 200, 1.0, 9.0, NAN, 1, True, config), Row(1, 1, 200, 1.0, 6.0, NAN, 1, False, config),
            Row(0, 2, 300, 2.0, NAN, NAN, 0, False, config), Row(1, 2, 300, 2.0, 8.0, NAN, 1, False, config)]
    data = intervals(History(space.names).with_rows(rows), space, window=1000)
    # (0, 1) started from member 1's round-0 state; (0, 2) has no score and is dropped.
    np.testing.assert_allclose(data.reward, [5.0, 5.0, 6.0])
    np.testing.assert_allclose(data.t, [100, 100, 200])
    np.testing.assert_allclose(data.rate, [4.0 / 100, 1.0 / 100, 2.0 / 100])
    assert len(intervals(History(space.names).with_rows(rows), space, window=2).rate) == 2



def test_a_skipped_rounds_carried_score_starts_the_next_interval(space: Space) -> None:
    """Member 0's rollout is twice t_ready: it trains every other round and skips the others (steps unchanged,
    its score carried). The carried score is exactly the state the next round starts from, so the next interval
    starts at it; a skipped round is no interval itself. Member 1's round 2 carried a score after training
    (no episode ended): that stale score starts nothing."""
    config = space.initial()
    rows = []
    for r in range(5):
        skipped = r % 2 == 1
        steps0 = 200 * ((r + 2) // 2)
        rows.append(Row(0, r, steps0, float(r), float(steps0 // 100), NAN, 0, False, config, carried=skipped))
        rows.append(Row(1, r, 100 * (r + 1), float(r), 10.0 + r, NAN, 1, False, config, carried=r == 2))
    data = intervals(History(space.names).with_rows(rows), space, window=1000)
    # (round, start steps, start score, rate): member 0's rounds 2 and 4 start from the carried scores of its
    # skipped rounds 1 and 3; member 1's rounds 1 and 4 (round 2's score is carried, and round 3 starts from it)
    assert sorted(zip(data.round, data.t, data.reward, data.rate)) == [
        (1, 100.0, 10.0, 1 / 100), (2, 200.0, 2.0, 2 / 200), (4, 400.0, 4.0, 2 / 200), (4, 400.0, 13.0, 1 / 100)]

def test_picks_the_peak_of_the_improvement_rate(space: Space) -> None:
    hits = 0
    for seed in range(10):
        history = peaked_history(space, seed=seed)
        strategy = PB2()
        new = pick(strategy, history, space, seed, [], strategy.prepare(history, space, 1, RNG))
        hits += np.linalg.norm(space.to_unit(new) - PEAK) < 0.1
    assert hits >= 7


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_pending_pick_pushes_the_next_one_away(space: Space, seed: int) -> None:
    history = peaked_history(space, rounds=4, seed=seed)
    strategy = PB2()
    context = strategy.prepare(history, space, 1, RNG)
    first = pick(strategy, history, space, seed, [], context)
    # The same generator without pending would return `first` again: the difference is the pending term.
    assert pick(strategy, history, space, seed, [], context) == first
    assert distance(space, pick(strategy, history, space, seed, [first], context), first) > 0.05


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_running_members_config_pushes_the_pick_away(space: Space, seed: int) -> None:
    """With one recipient per round, the running members are the only pending points: they must act."""
    history = peaked_history(space, rounds=4, seed=seed)
    strategy = PB2()
    context = strategy.prepare(history, space, 1, RNG)
    alone = pick(strategy, history, space, seed, [], context)  # nothing pending
    donor, _ = best_donor(history)
    # the member nearest the donor in (t, R) already runs the config the pick would take
    queries = context.gps[()].queries
    other = min((m for m in queries if m != donor),
                key=lambda m: np.linalg.norm(np.subtract(queries[m], queries[donor])))
    running = [Pending(other, alone)]
    spread = PB2(PB2Settings(pending="running"))
    # 0.045 to 0.18 on these seeds: a pick near the data's peak moves less than one in an empty corner
    assert distance(space, pick(spread, history, space, seed, [], context, running), alone) > 0.02
    # without the running members in the pending set the pick stays put (up to the optimiser's extra starts)
    assert distance(space, pick(PB2(PB2Settings(pending="picks")), history, space, seed, [], context, running),
                    alone) < 1e-3


def converged_4d(seed: int, rows: int = 1000, pop: int = 4) -> tuple[Space, History]:
    """4 continuous hyperparameters, ``rows`` intervals around a narrow peak, as a PB2 run late in training.

    Configs scatter around the peak and the last round's sit close to it, so the donor's
    config is where the acquisition is high, and almost all of the cube is far from the data.
    """
    space = Space({f"x{i}": Continuous(0.0, 1.0) for i in range(4)})
    rng = np.random.default_rng(seed)
    peak = rng.uniform(0.2, 0.8, size=4)
    rounds, scores, records = rows // pop, np.zeros(pop), []
    for r in range(rounds):
        for m in range(pop):
            unit = np.clip(peak + rng.normal(0, 0.08 if r < rounds - 1 else 0.02, 4), 0, 1)
            if r:
                scores[m] += np.exp(-np.sum((unit - peak) ** 2) / 0.02) + rng.normal(0, 0.05)
            config = {name: float(u) for name, u in zip(space.names, unit)}
            records.append(Row(m, r, (r + 1) * STEPS, float(r), float(scores[m]), NAN, m, r > 0, config))
    return space, History(space.names).with_rows(records)


@pytest.fixture(scope="module")
def converged() -> list[tuple[Space, History]]:
    return [converged_4d(seed) for seed in range(4)]


def ucb_pick_and_donor(converged: list[tuple[Space, History]]) -> list[tuple[float, float]]:
    """(UCB at the pick, UCB at the donor's config) of every PB2 pick on the ``converged`` histories."""
    out = []
    for seed, (space, history) in enumerate(converged):
        for d in PB2().decide(history, space, np.random.default_rng(seed)):
            if d.explored:
                assert d.info["gp"] == 1
                out.append((d.info["ucb"], d.info["ucb_donor"]))
    return out


def test_random_starts_alone_miss_the_donors_region_on_these_histories(converged, monkeypatch) -> None:
    """The donor's config must be a start: climbed from the screened random points only, a pick falls below
    the acquisition at the donor's config (1 of these 4; 3 of 4 with the reference's mean as the GP's prior
    mean). The test below climbs every start, the donor's among them."""
    maximise = pb2.maximise
    monkeypatch.setattr(pb2, "maximise", lambda *args, seeds=None: maximise(*args))
    assert sum(pick < donor for pick, donor in ucb_pick_and_donor(converged)) >= 1


def local_maximum(acquisition: Acquisition, start: np.ndarray) -> float:
    """The acquisition at the top of scipy's L-BFGS-B climb from ``start`` alone."""
    def negative(u: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = acquisition(u[None, :], gradient=True)  # the gradient is checked on its own below
        return -value[0], -grad[0]

    result = minimize(negative, start, jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * len(start))
    return float(acquisition(np.clip(result.x, 0.0, 1.0)[None, :])[0][0])


def test_the_pick_is_never_below_any_starts_own_local_maximum(converged, monkeypatch) -> None:
    """Every start (best screened points, donor's config, running configs) is climbed on its own. The one
    L-BFGS-B run on the sum of the starts' values that pbx used before ends 5e-5 and 3e-7 below here."""
    calls = []
    maximise = pb2.maximise

    def recorded(acquisition, box, restarts, rng, seeds=None):
        again = copy.deepcopy(rng)  # the draws maximise makes, for the starts it climbs
        best = maximise(acquisition, box, restarts, rng, seeds=seeds)
        calls.append((acquisition, starts(acquisition, box, restarts, again, seeds), best))
        return best

    monkeypatch.setattr(pb2, "maximise", recorded)
    for seed, (space, history) in enumerate(converged[:2]):
        PB2().decide(history, space, np.random.default_rng(seed))
    assert len(calls) == 2
    for acquisition, points, best in calls:
        assert len(points) == PB2Settings().restarts + 4  # the donor's config and the 3 running members'
        picked = float(acquisition(best[None, :])[0][0])
        assert all(picked >= local_maximum(acquisition, p) - 1e-9 for p in points)


@pytest.mark.parametrize("pending, counts", [("running", [6.0, 7.0]), ("picks", [0.0, 1.0])])
def test_each_pick_carries_the_fit_behind_it(mixed: Space, pending: str, counts: list[float]) -> None:
    """``Decision.info``: the round's fitted GP, the size of the pending set and the pick's UCB, as numbers."""
    history = peaked_history(mixed, rounds=5)  # 8 members: 2 recipients, 6 running
    strategy = PB2(PB2Settings(pending=pending))
    kernel = strategy.prepare(history, mixed, 1, RNG).gps[()].posterior.kernel
    explored = [d for d in strategy.decide(history, mixed, np.random.default_rng(0)) if d.explored]
    assert [d.info["pending"] for d in explored] == counts
    for d in explored:
        assert set(d.info) == {"gp", "rows", "lengthscale", "epsilon", "variance", "noise", "kappa", "pending",
                               "ucb", "ucb_donor"}
        assert all(isinstance(v, float) and math.isfinite(v) for v in d.info.values())
        assert d.info["gp"] == 1 and d.info["rows"] == len(intervals(history, mixed, 1000).rate)
        for name in ("lengthscale", "epsilon", "variance"):
            assert d.info[name] == pytest.approx(getattr(kernel, name).values[0], rel=1e-6)
        assert d.info["ucb"] >= d.info["ucb_donor"]


def test_one_rounds_picks_spread_out(space: Space) -> None:
    history = peaked_history(space, rounds=4)
    decisions = PB2(selection=WinnerTakesAll()).decide(history, space, np.random.default_rng(0))
    picks = {tuple(np.round(space.to_unit(d.config), 2)) for d in decisions if d.explored}
    assert len(picks) >= 5  # of 7 recipients


def test_pending_variance_equals_a_second_gp_holding_the_pending_points() -> None:
    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(30, 4)), rng.normal(size=30)
    kernel = TimeVaryingSE(4, variance=1.2, lengthscale=0.3, epsilon=0.2)
    # each pending point at its own (t, R): the first two of its columns
    query, pending, unit = (0.9, 0.6), rng.uniform(size=(3, 4)), rng.uniform(size=(5, 2))
    acquisition = Acquisition(Posterior(kernel, 0.05, X, y), query, pending, kappa=1.5)

    def inputs(u: np.ndarray) -> np.ndarray:
        return np.hstack([np.tile(query, (len(u), 1)), u])

    data_gp = GPy.models.GPRegression(X, y[:, None], kernel.copy(), noise_var=0.05)
    pending_gp = GPy.models.GPRegression(np.vstack([X, pending]), np.zeros((33, 1)), kernel.copy(),
                                         noise_var=0.05)
    mean, _ = data_gp.predict_noiseless(inputs(unit))
    _, var = pending_gp.predict_noiseless(inputs(unit))
    # GPy adds 1e-8 to the noise, hence the tolerance.
    np.testing.assert_allclose(acquisition(unit)[0], mean[:, 0] + 1.5 * np.sqrt(var[:, 0]), atol=1e-6)


def test_far_from_the_data_the_gp_expects_the_lowest_rate() -> None:
    """``prior_mean``: away from every observation the mean falls to the window's lowest rate (``lowest``) or
    to the mean rate (``mean``, the reference's), and near the data both follow the data."""
    rng = np.random.default_rng(2)
    X, y = np.hstack([np.full((20, 2), 0.5), rng.uniform(0.4, 0.6, size=(20, 2))]), rng.normal(size=20)  # at the query's (t, R)
    kernel = TimeVaryingSE(4, variance=1.0, lengthscale=0.02, epsilon=0.1)
    nothing_pending = np.zeros((0, 4))
    lowest, mean = (Acquisition(Posterior(kernel, 0.01, X, y, prior), (0.5, 0.5), nothing_pending, kappa=0.0)
                    for prior in (float(y.min()), 0.0))
    corners = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    np.testing.assert_allclose(lowest(corners)[0], y.min(), atol=1e-6)  # the kernel's tail: below 1e-8 here
    np.testing.assert_allclose(mean(corners)[0], 0.0, atol=1e-6)
    near = X[:1, 2:]
    assert abs(lowest(near)[0][0] - mean(near)[0][0]) < 0.05 * abs(y.min())


def test_a_corner_is_picked_where_the_rates_rise_towards_it() -> None:
    """Corners on purpose: with the lowest rate as the GP's prior mean, data that rise towards a corner
    still take the pick there (the toy's optimum is such a corner)."""
    space = Space({"a": Continuous(0.0, 1.0), "b": Continuous(0.0, 1.0)})
    corner = np.ones(2)
    history = rate_history(space, lambda c: float(np.exp(-np.sum((space.to_unit(c) - corner) ** 2))), 8, 8)
    strategy = PB2()
    new = pick(strategy, history, space, 0, [], strategy.prepare(history, space, 1, RNG))
    assert np.linalg.norm(space.to_unit(new) - corner) < 0.05


def test_a_capped_kernel_variance_keeps_the_pick_off_an_extrapolated_trend() -> None:
    """``signal_cap``: data on one side of a bump (its optimum just past them) fit freely to a long, tall trend
    whose mean rises past the optimum to the cube's face; capped at 2, the fit is a bump and the pick lands
    near the optimum."""
    wide = Space({"a": Continuous(0.0, 1.0), "b": Continuous(0.0, 1.0)})
    seen = Space({"a": Continuous(0.05, 0.4), "b": Continuous(0.25, 0.55)})  # where the history's configs lie
    optimum = np.array([0.55, 0.3])

    def rate(config: Config) -> float:
        return float(np.exp(-np.sum((wide.to_unit(config) - optimum) ** 2) / (2 * 0.2**2)))

    capped, free = [], []
    for seed in range(4):
        history = rate_history(seen, rate, 8, 4, seed=seed, noise=0.05)
        for cap, picks in ((2.0, capped), (None, free)):
            decision = next(d for d in PB2(PB2Settings(signal_cap=cap)).decide(history, wide, np.random.default_rng(0))
                            if d.explored)
            picks.append((decision.info["variance"], rate(decision.config)))
    assert all(variance <= 2.0 + 1e-9 and true > 0.85 for variance, true in capped), capped
    assert max(variance for variance, _ in free) > 5 and min(true for _, true in free) < 0.1, free


def test_acquisition_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(1)
    X, y = rng.uniform(size=(40, 4)), rng.normal(size=40)
    kernel = TimeVaryingSE(4, variance=0.8, lengthscale=0.4, epsilon=0.1)
    acquisition = Acquisition(Posterior(kernel, 0.1, X, y), (0.5, 0.5), rng.uniform(size=(2, 4)), kappa=1.0)
    unit = rng.uniform(size=(4, 2))
    _, grad = acquisition(unit, gradient=True)
    numeric = np.zeros_like(unit)
    for j in range(2):
        step = np.zeros(2)
        step[j] = 1e-6
        numeric[:, j] = (acquisition(unit + step)[0] - acquisition(unit - step)[0]) / 2e-6
    np.testing.assert_allclose(grad, numeric, atol=1e-6)
    # One row takes the triangular-solve path for vectors; it must agree with the batched one.
    value_1, grad_1 = acquisition(unit[:1], gradient=True)
    np.testing.assert_allclose(value_1, acquisition(unit)[0][:1], rtol=1e-12)
    np.testing.assert_allclose(grad_1, grad[:1], rtol=1e-10)


def test_same_seed_same_decisions_other_seed_other(mixed: Space) -> None:
    history = peaked_history(mixed, rounds=5)
    runs = [PB2().decide(history, mixed, np.random.default_rng(seed)) for seed in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_decisions_in_bounds_from_top_quantile_donors_with_readable_ops(mixed: Space) -> None:
    history = peaked_history(mixed, rounds=5)
    order = rank_best_first(history.latest()["score"].to_numpy(float))
    for seed in range(3):
        decisions = PB2().decide(history, mixed, np.random.default_rng(seed))
        copies = [d for d in decisions if d.copies]
        assert {d.member for d in copies} == set(order[-2:].tolist())
        assert {d.donor for d in copies} <= set(order[:2].tolist())
        for d in copies:
            assert in_bounds(mixed, d.config) and d.explored
            assert [op for op in d.ops if op.startswith(("lr", "ent"))] == [
                f"lr -> {d.config['lr']:.3g} (PB2)", f"ent -> {d.config['ent']:.3g} (PB2)"]
            assert all(op == "aug resample" for op in d.ops if op.startswith("aug"))


def test_an_integer_parameter_is_picked_on_the_cube_and_handed_out_whole() -> None:
    space = Space({"lr": Continuous(1e-5, 1e-3, log=True), "n_steps": Integer(250, 15_000, log=True)})
    history = peaked_history(space, rounds=5)
    assert history.frame["n_steps"].dtype == np.int64
    for seed in range(3):
        copies = [d for d in PB2().decide(history, space, np.random.default_rng(seed)) if d.copies]
        assert copies
        for d in copies:
            n = d.config["n_steps"]
            assert type(n) is int and 250 <= n <= 15_000 and in_bounds(space, d.config)
            assert f"n_steps -> {n} (PB2)" in d.ops  # the GP's pick, not PBT's fallback, shown whole (not 1.23e+03)


def _assert_pbt_fallback(strategy: PB2, history: History, space: Space) -> None:
    assert strategy.prepare(history, space, 1, RNG).gps[()] is None
    for d in strategy.decide(history, space, np.random.default_rng(0)):
        assert in_bounds(space, d.config)
        assert not any("(PB2)" in op for op in d.ops)
        assert d.info == ({"gp": 0.0} if d.explored else {})


def test_too_little_data_explores_as_pbt_silently(mixed: Space, caplog) -> None:
    history = peaked_history(mixed, rounds=1)  # round 0: no interval has a start and an end yet
    _assert_pbt_fallback(PB2(), history, mixed)
    assert not caplog.records


def test_nan_scores_fall_back(mixed: Space) -> None:
    history = flat_history(mixed, score=lambda m, r: NAN if r else 0.0)
    _assert_pbt_fallback(PB2(), history, mixed)


def test_nan_scores_among_finite_ones_are_dropped(mixed: Space) -> None:
    history = peaked_history(mixed, rounds=5)
    frame = history.frame.copy()
    frame.loc[frame.index % 3 == 0, "score"] = NAN
    holed = History(mixed.names, frame)
    assert len(intervals(holed, mixed, 1000).rate) < len(intervals(history, mixed, 1000).rate)
    decisions = PB2().decide(holed, mixed, np.random.default_rng(0))
    assert all(in_bounds(mixed, d.config) for d in decisions)
    assert any("(PB2)" in op for d in decisions for op in d.ops)


def test_identical_rows_with_constant_rates_fall_back_with_a_warning(mixed: Space, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=pb2.__name__):
        _assert_pbt_fallback(PB2(), flat_history(mixed), mixed)
    assert "equal" in caplog.text


def test_identical_configs_with_varying_rates_still_fit(space: Space) -> None:
    history = flat_history(space, rounds=8, score=lambda m, r: r * (1.0 + m) + math.sin(r))
    decisions = PB2().decide(history, space, np.random.default_rng(0))
    explored = [d for d in decisions if d.explored]
    assert explored and all(in_bounds(space, d.config) and "(PB2)" in d.ops[0] for d in explored)


def test_a_failed_fit_retries_with_fixed_noise(space: Space, monkeypatch) -> None:
    calls = []
    real_fit = pb2.fit_kernel

    def failing_once(X, y, fixed_noise=None, n_cat=0, signal_cap=None):
        calls.append(fixed_noise)
        if fixed_noise is None:
            raise linalg.LinAlgError("not positive definite")
        return real_fit(X, y, fixed_noise, n_cat, signal_cap)

    monkeypatch.setattr(pb2, "fit_kernel", failing_once)
    assert PB2().prepare(peaked_history(space, rounds=4), space, 1, RNG).gps[()] is not None
    assert calls == [None, pb2.FALLBACK_NOISE]


def test_a_gp_that_keeps_failing_falls_back_to_pbt_and_warns_once(mixed: Space, monkeypatch, caplog) -> None:
    def failing(X, y, fixed_noise=None, n_cat=0, signal_cap=None):
        raise linalg.LinAlgError("not positive definite")

    monkeypatch.setattr(pb2, "fit_kernel", failing)
    history = peaked_history(mixed, rounds=4)
    with caplog.at_level(logging.WARNING, logger=pb2.__name__):
        decisions = PB2(selection=WinnerTakesAll()).decide(history, mixed, np.random.default_rng(0))
    assert len(caplog.records) == 1 and "exploring as PBT" in caplog.text
    assert all(in_bounds(mixed, d.config) and not any("(PB2)" in op for op in d.ops) for d in decisions)
    assert all(d.info == {"gp": 0.0} for d in decisions if d.explored)  # strategy.csv shows the fallback


def test_cholesky_adds_jitter_to_a_singular_matrix_and_gives_up_on_nan() -> None:
    ones = np.ones((5, 5))
    L = gp.cholesky(ones)
    assert np.all(np.isfinite(L)) and np.allclose(L @ L.T, ones, atol=1e-3)
    with pytest.raises(linalg.LinAlgError):
        gp.cholesky(np.full((3, 3), np.nan))


def test_only_categorical_parameters_explore_as_pbt() -> None:
    space = Space({"aug": Categorical(("crop", "flip"))})
    history = flat_history(space)
    assert PB2().prepare(history, space, 1, RNG).gps[()] is None
    assert all(in_bounds(space, d.config) for d in PB2().decide(history, space, np.random.default_rng(0)))


def test_quiet_and_free_of_global_randomness(mixed: Space, capsys, recwarn, caplog) -> None:
    history = peaked_history(mixed, rounds=4)
    state = np.random.get_state()[1].copy()
    with caplog.at_level(logging.INFO):
        PB2().decide(history, mixed, np.random.default_rng(0))
    assert np.array_equal(np.random.get_state()[1], state)
    assert capsys.readouterr() == ("", "")
    assert not recwarn.list and not caplog.records


def test_a_category_with_few_intervals_is_searched_near_the_donors_values(mixed: Space) -> None:
    """The GP knows the peak from crop and flip; rotate, held by ``cat_exp fixed``, has no interval of its
    own, so a copy moving to it keeps within TRUST_RADIUS of the donor's values instead of jumping to the
    other categories' peak (where the unit cube's search sends it: the crop copy below)."""
    seen = Space({**{name: mixed.params[name] for name in mixed.continuous},
                  "aug": Categorical(("crop", "flip"))})
    history = peaked_history(seen, rounds=12, seed=3)
    latest = history.latest()
    donor = int(np.argmax([np.linalg.norm(mixed.to_unit(history.config_of(row)) - PEAK)
                           for _, row in latest.iterrows()]))
    donor_config = history.config_of(latest.iloc[donor])
    donor_unit = mixed.to_unit(donor_config)
    assert np.linalg.norm(donor_unit - PEAK) > 0.3
    moves = {}
    for held in ("rotate", "crop"):
        strategy = PB2(PB2Settings(cat_exp="fixed", fixed_cat_val=held))
        plan = strategy.prepare(history, mixed, 1, RNG)
        rows = plan.category_rows.get((held,), 0)
        assert rows == 0 if held == "rotate" else rows >= acquisition.TRUST_ROWS
        new = strategy.explore(donor, donor_config, RoundContext(history, mixed, plan), np.random.default_rng(0))[0]
        assert new["aug"] == held
        moves[held] = np.abs(mixed.to_unit(new) - donor_unit)
    assert np.all(moves["rotate"] <= acquisition.TRUST_RADIUS + 1e-9)
    assert np.max(moves["crop"]) > acquisition.TRUST_RADIUS


def test_a_move_to_a_category_that_has_hardly_run_keeps_the_donors_values(mixed: Space, monkeypatch) -> None:
    """PB2-Mult has no GP for rotate (no interval ran it): the move is the member's exploration, and its
    continuous values stay the donor's rather than PBT's perturbation of them."""
    seen = Space({**{name: mixed.params[name] for name in mixed.continuous},
                  "aug": Categorical(("crop", "flip"))})
    history = peaked_history(seen, rounds=6, seed=1)
    monkeypatch.setattr(CategoryBandits, "draw", lambda self, k, rng: [{"aug": "rotate"}] * k)
    strategy = PB2(PB2Settings(cat_exp="exp3_dep"), context=RunContext(rounds=20, pop_size=8))
    explored = [d for d in strategy.decide(history, mixed, np.random.default_rng(0)) if d.explored]
    assert explored
    for d in explored:
        donor = history.config_of(history.latest().iloc[d.donor])
        assert d.config == {**donor, "aug": "rotate"} and d.info["gp"] == 0
