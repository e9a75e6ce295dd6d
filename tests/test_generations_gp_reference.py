"""BG-PBT's and IPBT's GP and round as the IPBT authors' code has them (``AwesomeLemon/IPBT``, ``algo/bgpbt.py``,
``algo/ipbt.py``, ``algo/bgpbt_utils.py``): the fit's bounds, the GP across generations' learned mean, where
intervals and donors sit in time, UCB's standard deviation, the pending points, the cut's ties and IPBT's trust
region. Each of pbx's earlier choices is a setting; PB2 keeps its own."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import linalg

from pbx.history import History
from pbx.strategies.base import Pending
from pbx.strategies.bayes.acquisition import Acquisition
from pbx.strategies.bayes.gp import SIGNAL_FREE, FitBounds, Posterior, fit, quiet
from conftest import toy_config
from test_generations_reference import _converging_history, _history, _lineage_history

PBX_BOUNDS = {"signal_cap": 2.0, "signal_floor": 1e-4, "noise_floor": 1e-4, "noise_cap": 10.0}
"""The bounds BG-PBT and IPBT inherited from PB2 before (``signal_cap``, ``signal_floor``, ``noise_*``)."""


def _noisy_history(seed: int = 0) -> History:
    """Eight members whose improvement has nothing to do with their configs: a GP fit free to, calls it noise."""
    rng = np.random.default_rng(seed)
    configs = [[{"h0": float(rng.uniform()), "h1": float(rng.uniform())} for _ in range(8)] for _ in range(6)]
    scores = np.cumsum(rng.normal(1.0, 1.0, size=(6, 8)), axis=0)
    return _history(scores.tolist(), explored=[[r > 0] * 8 for r in range(6)], configs=configs)


@pytest.mark.parametrize("search", ["BGPBT", "IPBT"])
def test_the_gp_fits_in_the_authors_bounds_and_pbx_earlier_ones_are_settings(search: str) -> None:
    """``train_gp``: ``outputscale`` in [0.5, 5], the noise in [1e-6, 0.1]. Targets that differ at one input can
    only be noise: the fit in PB2's bounds ([1e-4, 10], which BG-PBT and IPBT inherited before) puts the noise near
    their variance, 1; the authors' holds it at 0.1. PB2 keeps its cap of 2."""
    cfg = toy_config(search=search, pop_size=8, max_budget=10_000)
    s = cfg.strategy
    assert (s.signal_cap, s.signal_floor, s.noise_floor, s.noise_cap) == (5.0, 0.5, 1e-6, 0.1)
    assert toy_config(search="PB2").strategy.signal_cap == 2.0
    gp = cfg.build_strategy().prepare(_noisy_history(), cfg.space, 1, np.random.default_rng(0)).gps[()]
    assert gp is not None and gp.posterior.noise <= 0.1 and 0.5 <= gp.info()["variance"] <= 5
    rng = np.random.default_rng(0)
    X, y = np.tile(rng.uniform(size=(1, 4)), (20, 1)), rng.normal(size=20)
    y = (y - y.mean()) / y.std()
    assert fit(X, y, bounds=cfg.build_strategy().fit_bounds(4)).noise == pytest.approx(0.1, rel=1e-4)
    wide = toy_config(PBX_BOUNDS, search=search, pop_size=8, max_budget=10_000).build_strategy()
    assert wide.fit_bounds(4).signal == (1e-4, 2.0) and fit(X, y, bounds=wide.fit_bounds(4)).noise > 0.5


PB2_TIME_BOUNDS = {"lengthscale_floor": 1e-5, "lengthscale_cap": 1.0, "lengthscale_per_input": False,
                   "decay_cap": 0.5}
"""The time kernel's bounds BG-PBT and IPBT inherited from PB2 before (:data:`pbx.strategies.bayes.kernels`)."""


def _time_fit(search: str, X: np.ndarray, y: np.ndarray, settings: dict | None = None) -> dict[str, float]:
    strategy = toy_config(settings, search=search, pop_size=8, max_budget=10_000).build_strategy()
    with quiet():
        return fit(X, y, bounds=strategy.fit_bounds(X.shape[1] - 1)).kernel.summary()


@pytest.mark.parametrize("search", ["BGPBT", "IPBT"])
def test_the_time_kernel_fits_in_the_authors_bounds_and_pb2s_are_settings(search: str) -> None:
    """``TemporalKernel``: the decay in [0, 1 - 1e-6]; ``train_gp``: the Matern-5/2 lengthscale in [0.01,
    sqrt(inputs)] (BG-PBT) or [0.01, 0.5] (IPBT's ARD), whose squared-exponential equivalents (the correlation at
    1/e at the same distance) are 1.7e-4, 1.69 per input and 0.42. Rates whose dependence on the config turns over
    halfway through time need a decay past PB2's 0.5; rates that oscillate faster than the inputs are spaced pull
    the lengthscale to the floor; a line pushes it to the cap. PB2 keeps its own bounds."""
    s = toy_config(search=search, pop_size=8, max_budget=10_000).strategy
    caps = {"BGPBT": (1.69, True), "IPBT": (0.42, False)}[search]
    assert (s.lengthscale_floor, s.lengthscale_cap, s.lengthscale_per_input, s.decay_cap) == (1.7e-4, *caps, 1 - 1e-6)
    assert not hasattr(toy_config(search="PB2").strategy, "decay_cap")
    rng = np.random.default_rng(0)
    t, x = np.repeat(np.linspace(0, 1, 8), 5), rng.uniform(size=40)
    turning = np.where(t < 0.5, 1, -1) * np.sin(6 * x) + 0.05 * rng.normal(size=40)
    X = np.column_stack([t, np.zeros(40), x])
    assert _time_fit(search, X, (turning - turning.mean()) / turning.std())["epsilon"] > 0.99
    assert _time_fit(search, X, (turning - turning.mean()) / turning.std(), PB2_TIME_BOUNDS)["epsilon"] <= 0.5
    X[:, 0] = 0.0
    fast = np.sin(300 * x)
    assert _time_fit(search, X, (fast - fast.mean()) / fast.std())["lengthscale"] == pytest.approx(1.7e-4, rel=1e-3)
    assert _time_fit(search, X, (fast - fast.mean()) / fast.std(), PB2_TIME_BOUNDS)["lengthscale"] < 2e-5
    line = (x - x.mean()) / x.std()
    cap = 1.69 * 2 if search == "BGPBT" else 0.42
    assert _time_fit(search, X, line)["lengthscale"] == pytest.approx(cap, rel=1e-3)


@pytest.mark.parametrize("search", ["BGPBT", "IPBT"])
def test_data_at_one_time_fit_no_time_decay(search: str) -> None:
    """The authors fit without their time kernel when the data hold one time (``use_time_varying_gp =
    np.unique(t).shape[0] > 1``): the GP across generations' points at time 0 and its query at 1 are then not
    discounted, where a fitted decay would stay at its start (the bounds' middle) and scale them by 0.71."""
    rng = np.random.default_rng(0)
    X, y = np.column_stack([np.zeros(10), rng.uniform(size=(10, 2))]), rng.normal(size=10)
    strategy = toy_config(search=search, pop_size=8, max_budget=10_000).build_strategy()
    fitted = strategy.fit_gp(X, (y - y.mean()) / y.std())
    assert fitted.kernel.summary()["epsilon"] == 0.0
    later = np.column_stack([np.ones(10), X[:, 1:]])
    assert np.allclose(fitted.kernel.K(later, X), fitted.kernel.K(X, X))
    X[:, 0] = np.linspace(0, 1, 10)
    assert strategy.fit_gp(X, (y - y.mean()) / y.std()).kernel.summary()["epsilon"] > 0.0


def test_a_cap_past_any_fit_leaves_the_kernel_variance_free() -> None:
    """GPy's bounded transform between a floor and a cap of 1e300 sent the variance to 1e169 in its first step: a
    cap from :data:`SIGNAL_FREE` on fits as no cap does."""
    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(30, 4)), rng.normal(size=30)
    free, huge = fit(X, y), fit(X, y, bounds=FitBounds(signal=(0.5, 1e300)))
    assert SIGNAL_FREE <= 1e300 and huge.kernel.summary() == free.kernel.summary() and huge.noise == free.noise


def test_the_gp_across_generations_learns_a_constant_mean_and_the_lowest_target_is_a_setting() -> None:
    """The authors' meta GP has GPyTorch's ``ConstantMean``, fitted with the kernel. pbx's constant, fitted with the
    kernel by marginal likelihood, is where that likelihood peaks for the fitted kernel: the generalised least
    squares mean ``1' A^-1 y / 1' A^-1 1`` (``A`` the kernel matrix plus the noise). ``across_mean: lowest`` is pbx's
    earlier prior mean, the lowest target."""
    history = _lineage_history()
    cfg = toy_config(search="IPBT", pop_size=4, max_budget=10_000)
    strategy = cfg.build_strategy()
    points = strategy.meta_points(history, cfg.space)
    fitted = strategy.fit_across(points, (40.0, 4.0))
    assert fitted is not None
    posterior = fitted[0]
    y = posterior.prior_mean + posterior.kernel.K(posterior.X) @ posterior.alpha \
        + posterior.noise * posterior.alpha  # the targets back from alpha = A^-1 (y - mean)
    A = posterior.kernel.K(posterior.X) + posterior.noise * np.eye(len(y))
    ones = np.ones(len(y))
    gls = ones @ linalg.solve(A, y) / (ones @ linalg.solve(A, ones))
    assert posterior.prior_mean == pytest.approx(gls, abs=0.02) and posterior.prior_mean > np.min(y) + 0.1
    lowest = toy_config({"across_mean": "lowest"}, search="IPBT", pop_size=4, max_budget=10_000).build_strategy()
    posterior = lowest.fit_across(points, (40.0, 4.0))[0]
    assert posterior.prior_mean == pytest.approx(float(np.min(y)))


def test_intervals_are_stamped_at_their_end_and_a_donor_asked_at_its_last_interval() -> None:
    """``update_bayesian_dataset`` stamps a round's row at ``t_cur + t_step``; ``explore`` asks at the donor's row
    at the latest time, with its ``R_before``: each member's latest steps (60) and the score it started the round
    from (the round before's, each member its own parent here). ``interval_time: start`` is pbx's earlier (PB2's)
    choice: intervals at their start, a donor asked at its latest score."""
    history = _converging_history(0)
    frame = history.frame
    before = frame[frame["round"] == 4].set_index("member")["score"]
    latest = frame[frame["round"] == 5].set_index("member")["score"]
    for settings, times, scores in [({}, (20, 60), before), ({"interval_time": "start"}, (10, 50), latest)]:
        cfg = toy_config(settings, search="BGPBT", pop_size=8)
        strategy = cfg.build_strategy()
        data = strategy.observations(history, cfg.space)
        assert (data.t.min(), data.t.max()) == times
        members, t, r = strategy.query_points(history, data)
        assert list(members) == list(range(8)) and set(t) == {60.0}
        assert r == pytest.approx(scores.loc[list(members)].to_numpy())


def test_ucb_takes_the_observation_std_with_the_likelihood_noise_and_the_latent_std_is_a_setting() -> None:
    """The authors' ``_lcb`` reads ``gp.likelihood(gp(x))``: its variance is the latent one plus the noise.
    ``ucb_std: latent`` is pbx's earlier (PB2's) std; BG-PBT's global restart ranks by the latent std, as the
    authors' ``aux_gp(x).stddev``."""
    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(20, 4)), rng.normal(size=20)
    fitted = fit(X, y, bounds=FitBounds((0.5, 5.0), (1e-6, 0.1), (1.0, 1e-3)))
    posterior = Posterior(fitted.kernel, 0.05, X, y)
    units, pending = rng.uniform(size=(5, 2)), np.column_stack([np.full(2, 0.5), np.full(2, 0.5),
                                                               rng.uniform(size=(2, 2))])

    def std(observed: bool) -> np.ndarray:
        mean, _ = Acquisition(posterior, (0.5, 0.5), pending, 0.0, observed=observed)(units)
        return Acquisition(posterior, (0.5, 0.5), pending, 1.0, observed=observed)(units)[0] - mean

    assert std(True) ** 2 == pytest.approx(std(False) ** 2 + 0.05)
    assert toy_config(search="IPBT", max_budget=10_000).build_strategy().ucb_observed()
    assert toy_config(search="BGPBT").build_strategy().ucb_observed()
    assert not toy_config({"ucb_std": "latent"}, search="IPBT", max_budget=10_000).build_strategy().ucb_observed()
    assert not toy_config(search="PB2").build_strategy().ucb_observed()


def test_pending_points_sit_at_the_donors_point_and_their_own_is_a_setting() -> None:
    """``explore`` tiles the donor's ``R_before`` and time under every pending config (``current``). A running
    member whose latest round ended without an episode (its score carried: no interval, so no point of its own to
    be asked at) still is a pending point at the donor's; at its own point (``pending_at: own``, PB2's placement)
    it is left out."""
    rows = _converging_history(0).frame.copy()
    rows.loc[(rows["round"] == 5) & (rows["member"] == 3), ["score", "carried"]] = (4.0, True)
    history = History(["h0", "h1"], rows)
    counts = {}
    for pending_at in ("donor", "own"):
        cfg = toy_config({"pending_at": pending_at}, search="BGPBT", pop_size=8)
        strategy = cfg.build_strategy()
        assert strategy.pending_at(Pending(3, {}), 5) == (5 if pending_at == "donor" else 3)
        explored = [d for d in strategy.decide(history, cfg.space, np.random.default_rng(0))
                    if d.explored and d.info.get("gp")]
        counts[pending_at] = {d.info["pending"] for d in explored}
    assert counts == {"donor": {7.0}, "own": {6.0}}  # 7 members keep running (member 3 among them), 1 copies
    assert toy_config(search="PB2").build_strategy().pending_at(Pending(3, {}), 5) == 3


def test_the_cut_keeps_the_higher_ids_on_a_tie_in_id_order_and_pbx_places_are_a_setting() -> None:
    """``np.argsort(fitnesses)[-pop_size:]`` then the survivors in index order: on a tie the higher ids go on
    (an IPBT restart's candidates are the prior's draws first and the GP's picks last: the GP's picks go on), in
    places 0, 1, ... ``cut_rule: places`` is pbx's earlier cut: ties to the lower ids, each kept candidate below
    ``pop_size`` in its own place."""
    def cut(settings: dict[str, object], scores: list[float]) -> dict[int, int]:
        strategy = toy_config(settings, search="IPBT", pop_size=4, max_budget=10_000).build_strategy()
        return strategy.cut(_history([scores]).latest())

    assert cut({}, [1.0] * 8) == {0: 4, 1: 5, 2: 6, 3: 7}
    assert cut({"cut_rule": "places"}, [1.0] * 8) == {0: 0, 1: 1, 2: 2, 3: 3}
    scores = [5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.0]
    assert cut({}, scores) == {0: 0, 1: 5, 2: 6, 3: 7}
    assert cut({"cut_rule": "places"}, scores) == {0: 0, 1: 1, 2: 2, 3: 6}
    assert cut({}, [np.nan, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0, np.nan]) == {0: 1, 1: 2, 2: 3, 3: 6}  # NaN ranks lowest


def test_ipbts_trust_region_only_grows_as_the_authors_and_counting_explores_is_a_setting() -> None:
    """The authors' rows are all tagged ``'bo'``: every round from a generation's first is a success, and ``L``
    grows x1.5 every 3 rounds whatever explores did (0.4 -> 0.6 -> 0.9 -> 1). ``tr_success: explored`` (BG-PBT's
    default, the original BG-PBT's count) counts a round whose best member ran an explored config."""
    never = _history([[float(r), float(r) - 0.5] for r in range(9)], explored=[[False, r > 0] for r in range(9)])
    lengths = [toy_config(search="IPBT", pop_size=2, max_budget=10_000).build_strategy().trust_length(
        History(never.hp_names, never.frame[never.frame["round"] < n])) for n in (2, 3, 6, 9)]
    assert lengths == pytest.approx([0.4, 0.6, 0.9, 1.0])
    explored = toy_config({"tr_success": "explored"}, search="IPBT", pop_size=2, max_budget=10_000)
    assert explored.build_strategy().trust_length(never) == pytest.approx(0.4)
    assert toy_config(search="BGPBT", pop_size=2).strategy.tr_success == "explored"


@pytest.mark.parametrize("field, value", [("signal_floor", 5.0), ("signal_floor", 0.0), ("noise_floor", 0.2),
                                          ("noise_cap", 1e300), ("across_mean", "mean"), ("interval_time", "middle"),
                                          ("ucb_std", "both"), ("pending_at", "mine"), ("cut_rule", "lowest"),
                                          ("tr_success", "never"), ("lengthscale_floor", 0.0),
                                          ("lengthscale_cap", 1e-5), ("lengthscale_cap", 1e300), ("decay_cap", 1.0),
                                          ("decay_cap", 0.0)])
def test_bad_gp_settings_are_refused_with_one_line(field: str, value: object) -> None:
    from pbx.errors import UsageError

    with pytest.raises(UsageError, match=field) as err:
        toy_config({field: value}, search="IPBT")
    assert "\n" not in str(err.value)

