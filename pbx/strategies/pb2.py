"""PB2: population-based bandits.

Parker-Holder, Nguyen, Roberts, "Provably Efficient Online Hyperparameter
Optimization with Population-Based Bandits", NeurIPS 2020 (arXiv:2002.02518).

PB2 keeps PBT's exploit step and replaces its random explore by a GP bandit.
Every finished interval of the history is one observation: the input is
``(t, R_before, continuous hyperparameters)`` and the target the improvement
rate ``(R_after - R_before) / steps``. A GP with the time-varying kernel
(:class:`~pbx.strategies.bayes.kernels.TimeVaryingSE`) is fit once per round
(:meth:`PB2.prepare`); each member that copied a donor then gets the config
maximising UCB at the donor's time and score (:meth:`PB2.explore`). The mean
comes from the data, the standard deviation from the data plus the pending
points: the configs already picked this round, each at its donor's time and
score, and (``pending: running``, the default) the configs of the members that
keep running, each at its own time and score, as the PB2 authors' ProcGen code
does. With one recipient per round (population 4, quantile 0.25: the paper's
setting) the picks alone leave the pending set empty and the spread never acts.

Categorical hyperparameters follow ``cat_exp`` (:mod:`pbx.strategies.bayes.categorical`;
Parker-Holder et al., "Tuning Mixed Input Hyperparameters on the Fly for Efficient
Population Based AutoRL", NeurIPS 2021):

- ``random`` (default; PB2-Rand) and ``fixed``: categories as PBT (or held), one GP
  over ``(t, R_before, continuous)`` on every interval;
- ``exp3_dep`` (= ``exp3``; PB2-Mult): EXP3 picks the category; the GP is fit on the
  intervals that ran that category only, and its pending points are those of that
  category (the reference code leaves the pending points unfiltered, so configs
  running another category shrink this category's variance). With fewer than
  :data:`MIN_ROWS` such intervals EXP3's category is kept (the reference drops it and
  copies the donor's config) and the continuous values are explored as PBT does, or,
  for a member moving to that category while others have data, kept at the donor's;
- ``exp3_indep``: EXP3 picks the category; one GP on every interval, category ignored;
- ``cocabo`` (PB2-Mix): EXP3 picks the category; one GP over
  ``(t, R_before, categories, continuous)`` with the CoCaBO kernel
  (:class:`~pbx.strategies.bayes.kernels.MixedKernel`), and the acquisition is maximised
  with the category that will run held fixed. The reference holds the donor's
  category there while returning EXP3's, so its continuous values are tuned for a
  category the member does not run.

A member moving to another category than its donor's, one with few intervals in
the window (fewer than :data:`~pbx.strategies.bayes.acquisition.TRUST_ROWS`), has its
continuous values searched near the donor's
(:func:`~pbx.strategies.bayes.acquisition.search_box`): the GP knows too little of that
category to send it across the cube.

With too little data (round 0), or when the GP fails numerically, PB2 explores
as PBT does, as the paper and Ray do; a run never dies of a GP failure.

The GP (:mod:`pbx.strategies.bayes.gp`) is fit on the most recent ``fit_rows``
intervals and conditions on the whole window; the acquisition and its maximiser
are :mod:`pbx.strategies.bayes.acquisition`. A round with 1000 rows takes about 0.3 s
on 2 cores (``benchmarks/bench_pb2.py``): about half of it the fit, the rest the
window's kernel matrix, its Cholesky factor and the climbs of the acquisition.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import numpy as np
from scipy import linalg
from threadpoolctl import threadpool_limits

from pbx.errors import UsageError
from pbx.history import History
from pbx.settings import check_choices
from pbx.space import Config, Space, shown
from pbx.strategies.bayes.acquisition import Acquisition, Box, kappa, maximise, search_box
from pbx.strategies.base import Decision, Explored, Pending, RoundContext
from pbx.strategies.bayes.categorical import BANDITS, CAT_EXPS, EXP3_PLAYS, CategoryBandits, config_codes, fixed_values
from pbx.strategies.bayes.gp import FALLBACK_NOISE, Posterior, Scale, fit_kernel, quiet, standardise
from pbx.strategies.bayes.observations import Intervals, intervals
from pbx.strategies.pbt import PBT, PBTSettings, perturb

logger = logging.getLogger(__name__)

MIN_ROWS = 3
"""Fewer usable intervals than this and the GP knows nothing: explore as PBT does."""
PENDING = ("running", "picks")
"""The values of :attr:`PB2Settings.pending`."""
PRIOR_MEANS = ("lowest", "mean")
"""The values of :attr:`PB2Settings.prior_mean`."""


@dataclass
class PB2Settings(PBTSettings):
    """PB2's settings; ``resample_prob`` applies when PB2 falls back to PBT's explore."""

    cat_exps: ClassVar[tuple[str, ...]] = CAT_EXPS

    window: int = 1000
    """Most recent intervals the GP keeps; older ones describe a different stage of training."""
    fit_rows: int = 150
    """Most recent intervals on which the kernel hyperparameters are fit by marginal likelihood.

    The posterior then conditions on the whole ``window``. The trade: a GPy fit on
    all 1000 rows factorises and inverts a 1000x1000 matrix at each of ~25 optimiser
    steps (2-3 s on 2 cores); on 150 rows a round's fit takes about 0.12 s (30 steps
    of 4 ms), most of it GPy's per-step overhead. The recent rows, which the
    time-decaying kernel weighs most anyway, pin the hyperparameters nearly as well:
    on 1000-row histories with a drifting peak, picks landed 0.038 from the peak (mean
    unit-cube distance over 6 seeds) against 0.031 with the full fit. Raise it when rounds are long.
    """
    restarts: int = 10
    """L-BFGS-B starts on the acquisition: the best points of a vectorised screen of random ones
    (the donor's config and the running members' configs are polished as well)."""
    pending: str = "running"
    """What the acquisition's variance is conditioned on besides the data: ``running`` (this round's
    earlier picks and the configs of the members that keep running) or ``picks`` (the earlier picks
    only, as Ray Tune does). Measured in ``benchmarks/bench_pending.py`` (10 seeds): on the toy
    ``running`` reached a best final Q of 1.19939 ± 0.00004 at population 2 against 1.19268 ± 0.01847
    (equal at population 4); on a drifting peak its picks were as close to the peak (+0.011 ± 0.015,
    and -0.016 ± 0.011 on 30 other seeds) and the population's final score higher (+349 ± 129)."""
    exp3_plays: str = "all"
    """Which of EXP3's plays (every member's round) are importance-weighted as drawn
    (:data:`pbx.strategies.bayes.categorical.EXP3_PLAYS`): ``all``, as the reference code, or ``drawn``,
    only those whose category the bandit drew. ``all`` learns the better category faster: in
    ``benchmarks/bench_exp3.py`` (population 4, 20 seeds) it put 0.68 / 0.79 / 0.81 on one better
    category of 4 at 15 / 30 / 60 rounds (``drawn`` 0.51 / 0.71 / 0.80, PB2-Rand 0.60 / 0.63 /
    0.63), in ``benchmarks/bench_picks.py`` (30 histories) PB2-Mult's and PB2-Mix's picks ran at a
    higher true rate in 14 of 16 mixed cells, and on toy-cat it ended higher (1.19995 against
    1.19991). Its cost: with 8 equal categories 50% of its picks repeated a category the population
    held, 29% by chance (``drawn``: 39%, 32%); among equal categories that costs no reward."""

    prior_mean: str = "lowest"
    """What the GP expects where it has no data: ``lowest`` (the lowest improvement rate of the window) or
    ``mean`` (the window's mean rate, as the PB2 authors' code and Ray Tune). With ``mean`` a config far from
    every observation is expected to do as well as the average one, so UCB's bonus alone carries the corners
    of the cube: on a drifting optimum (``benchmarks/bench_picks.py``, 30 histories per cell) half of PB2's
    picks at 2 dimensions and 1000 rows were corners of true rate below 0.05 while the donor's config ran
    above 0.5. With ``lowest`` a config must earn its pick from the data nearby or the uncertainty bonus
    over the worst rate seen, and a corner is picked where the rates rise towards it (docs/algorithms.md)."""

    signal_cap: float | None = 2.0
    """Upper bound on the GP's kernel variance, on improvement rates standardised to unit variance and clipped
    at ``±2``; ``null`` leaves it free (the PB2 authors' code and Ray Tune). A variance well above the rates' own
    says the fit found a long trend rather than a bump: with a long lengthscale it extrapolates that trend past
    the data, and the mean at a far corner of the cube rises above every rate observed. On
    ``benchmarks/bench_picks.py`` (30 histories per cell) free fits reached variances of 9 to 17 and sent
    PB2-Mult's picks to corners of true rate below 0.05 from donors running above 0.5 (2 picks in 30 at 4
    categories and 15 rounds, and at 8 and 30); capped at 2 none is left, and PB2's picks run higher (2
    dimensions, 1000 rows: 0.959 against 0.879; docs/algorithms.md)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.signal_cap is not None and (isinstance(self.signal_cap, bool)
                                            or not isinstance(self.signal_cap, (int, float))
                                            or not 1 <= self.signal_cap < math.inf):
            raise UsageError(f"signal_cap must be a number >= 1 (the standardised rates' own variance) or null, "
                             f"got {self.signal_cap!r}")
        check_choices(self, pending=PENDING, prior_mean=PRIOR_MEANS, exp3_plays=EXP3_PLAYS)
        for name in ("window", "fit_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < MIN_ROWS:
                raise UsageError(f"{name} must be an integer >= {MIN_ROWS}, got {value!r}")
        if not isinstance(self.restarts, int) or self.restarts < 1:
            raise UsageError(f"restarts must be an integer >= 1, got {self.restarts!r}")


@dataclass(frozen=True)
class RoundGP:
    """One GP of a round: the posterior and where each donor's pick is asked for."""

    posterior: Posterior
    queries: dict[int, tuple[float, float]]
    """Scaled ``(t, R)`` of each latest-round member with a finite score: a donor's query point."""
    kappa: float

    def info(self) -> dict[str, float]:
        """The fit behind the round's picks, for ``strategy.csv`` (``cocabo``: ``lambda`` among them)."""
        return {"gp": 1.0, "rows": float(len(self.posterior.X)), **self.posterior.kernel.summary(),
                "noise": float(self.posterior.noise), "kappa": self.kappa}


@dataclass(frozen=True)
class RoundPlan:
    """What :meth:`PB2.prepare` shares with every ``explore`` of one round."""

    gps: dict[tuple, RoundGP | None]
    """The round's GPs: under ``()`` the one GP, or (``exp3_dep``) one per category tuple EXP3 picked,
    in ``space.categorical`` order. None: explore the continuous values as PBT does."""
    categories: list[Config] = field(default_factory=list)
    """Each recipient's categorical values, in order (``fixed`` and the EXP3 values; empty for ``random``)."""
    info: dict[str, float] = field(default_factory=dict)
    """EXP3's chance of each arm per pick, for every decision of the round."""
    category_rows: dict[tuple, int] = field(default_factory=dict)
    """Intervals in the window per category tuple that ran (``space.categorical`` order)."""


PB2SettingsT = TypeVar("PB2SettingsT", bound=PB2Settings)


class PB2(PBT[PB2SettingsT]):
    """PBT's exploit, GP-bandit explore: one GP fit per round (per category for ``exp3_dep``), one UCB
    maximisation per recipient."""

    name = "PB2"
    settings_cls = PB2Settings

    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        """As :meth:`ExploitExplore.decide`, with BLAS held to one thread.

        The matrices here are at most window x window: a second BLAS thread costs
        more in hand-offs than it saves, and the thread count changes floating-point
        summation order. With one thread a resumed run, or the MPI coordinator on
        another machine, replays the same decisions bit for bit.
        """
        with threadpool_limits(limits=1, user_api="blas"):
            return super().decide(history, space, rng)

    def prepare(self, history: History, space: Space, recipients: int, rng: np.random.Generator) -> RoundPlan:
        """Draw the recipients' categories (EXP3: ``recipients`` distinct arms) and fit the round's GPs."""
        mode = self.settings.cat_exp
        data = self.observations(history, space)
        ran, counts = np.unique(data.cats, axis=0, return_counts=True)
        category_rows = {tuple(space.params[name].choices[int(i)] for name, i in zip(space.categorical, row)): int(n)
                         for row, n in zip(ran, counts)}
        categories: list[Config] = []
        info: dict[str, float] = {}
        if mode in BANDITS:
            bandits = CategoryBandits.replay(space, data.round, data.cats, data.rate, data.explored,
                                             *self._bandit_context(mode), self.settings.exp3_plays)
            categories, info = bandits.draw(recipients, rng), bandits.info()
        elif mode == "fixed":
            categories = [fixed_values(space, self.settings.fixed_cat_val)] * recipients
        plan = RoundPlan({}, categories, info, category_rows)
        points = self.query_points(history, data)
        if mode == "exp3_dep":
            for config in plan.categories:
                key = _key(space, config)
                if key not in plan.gps:
                    ran = np.all(data.cats == config_codes(space, config), axis=1)
                    plan.gps[key] = self._fit(space, data.where(ran), points)
        else:
            plan.gps[()] = self._fit(space, data, points, mixed=mode == "cocabo")
        return plan

    def query_points(self, history: History, data: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each latest-round member, as a donor, is asked for its pick: ``(members, t, R)``, a NaN ``R`` where
        it cannot be. PB2's: the member's latest steps and score, the start of the interval it would begin
        (``data``: the round's observations, which
        :class:`~pbx.strategies.generational.trust_region.TrustRegionBO` reads)."""
        latest = history.latest()
        return latest["member"].to_numpy(int), latest["steps"].to_numpy(float), latest["score"].to_numpy(float)

    def observations(self, history: History, space: Space) -> Intervals:
        """The intervals the GP learns from: the most recent ``window`` of the history."""
        return intervals(history, space, self.settings.window)

    def targets(self, rates: np.ndarray) -> np.ndarray | None:
        """The GP's targets from the improvement rates (None: nothing to learn, all equal)."""
        return standardise(rates)

    def kappa(self, rows: int) -> float:
        """UCB's exploration weight with ``rows`` intervals: the paper's schedule."""
        return kappa(rows)

    def region(self, donor_unit: np.ndarray, moved: bool, category_rows: int, history: History) -> Box:
        """Where a member's continuous values are searched (:func:`~pbx.strategies.bayes.acquisition.search_box`)."""
        return search_box(donor_unit, moved, category_rows)

    def pending_at(self, pending: Pending, donor: int) -> int:
        """The member at whose ``(t, R)`` a pending point sits while ``donor``'s pick is searched: PB2's, its own
        start's (a running member's own, an earlier pick's donor's)."""
        return pending.start

    def ucb_observed(self) -> bool:
        """Whether UCB's standard deviation is an observation's (the likelihood noise included): not PB2's."""
        return False

    def search(self, acquisition: Acquisition, box: Box, donor_unit: np.ndarray, seeds: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
        """The pick in ``box``: :func:`~pbx.strategies.bayes.acquisition.maximise` from screened points and ``seeds``
        (the donor's config, then the running members')."""
        return maximise(acquisition, box, self.settings.restarts, rng, seeds=seeds)

    def _bandit_context(self, mode: str) -> tuple[int, int]:
        """EXP3's ``(rounds, plays per round)`` from the run's context."""
        if self.context is None:
            raise ValueError(f"PB2 with cat_exp {mode} needs the run's RunContext (rounds, population) for EXP3's "
                             f"rates: build it with RunConfig.build_strategy() or pass context=")
        return self.context.rounds, self.selection.recipients(self.context.pop_size)

    def _fit(self, space: Space, data: Intervals, points: tuple[np.ndarray, np.ndarray, np.ndarray],
             mixed: bool = False) -> RoundGP | None:
        """Fit one GP on ``data`` (``mixed``: with the category columns and the CoCaBO kernel), asked at ``points``
        (:meth:`query_points`); None means explore as PBT (too little data, or a failure)."""
        if not space.continuous or len(data.rate) < MIN_ROWS:
            return None
        y = self.targets(data.rate)
        if y is None:
            logger.warning("PB2: all %d improvement rates are equal, the GP has nothing to learn; "
                           "exploring as PBT this round", len(data.rate))
            return None
        members, steps, scores = points
        t_scale = Scale.fit(np.concatenate([data.t, steps]))
        r_scale = Scale.fit(np.concatenate([data.reward, scores[np.isfinite(scores)]]))
        cats = data.cats if mixed else data.cats[:, :0]
        X = np.column_stack([t_scale(data.t), r_scale(data.reward), cats, data.unit])
        try:
            with quiet():
                posterior = self._posterior(X, y, cats.shape[1])
        except (linalg.LinAlgError, FloatingPointError, ValueError) as err:
            logger.warning("PB2: the GP failed even with jitter and fixed noise (%s); exploring as PBT this round", err)
            return None
        queries = {int(m): (float(t_scale(s)), float(r_scale(r)))
                   for m, s, r in zip(members, steps, scores) if math.isfinite(r)}
        return RoundGP(posterior, queries, self.kappa(len(y)))

    def _posterior(self, X: np.ndarray, y: np.ndarray, n_cat: int) -> Posterior:
        """Fit on the most recent ``fit_rows``, condition on all with the ``prior_mean`` setting's mean; on
        failure retry with fixed noise."""
        recent = slice(-self.settings.fit_rows, None)
        prior_mean = float(np.min(y)) if self.settings.prior_mean == "lowest" else 0.0  # y is standardised
        cap = None if self.settings.signal_cap is None else float(self.settings.signal_cap)
        try:
            return Posterior(*fit_kernel(X[recent], y[recent], n_cat=n_cat, signal_cap=cap), X, y, prior_mean)
        except (linalg.LinAlgError, FloatingPointError, ValueError):
            return Posterior(*fit_kernel(X[recent], y[recent], fixed_noise=FALLBACK_NOISE, n_cat=n_cat,
                                         signal_cap=cap), X, y, prior_mean)

    def explore(self, donor: int, donor_config: Config, round_: RoundContext, rng: np.random.Generator) -> Explored:
        """Categories by ``cat_exp``; continuous values maximise UCB at the donor's time and score (and, for
        ``cocabo``, at the category that will run)."""
        space, plan, mode = round_.space, round_.fitted, self.settings.cat_exp
        fallback = {"gp": 0.0} | plan.info
        if mode == "random":
            gp = plan.gps[()]
            if gp is None or donor not in gp.queries:
                return *perturb(donor_config, space, rng, self.settings.resample_prob), fallback
            new, ops = perturb(donor_config, space, rng, self.settings.resample_prob, names=space.categorical)
        else:
            chosen = plan.categories[round_.recipient]
            new, ops = {**donor_config, **chosen}, [f"{name} -> {value} ({mode})" for name, value in chosen.items()]
            gp = plan.gps[_key(space, chosen) if mode == "exp3_dep" else ()]
            if gp is None or donor not in gp.queries:
                rows = plan.category_rows.get(_key(space, chosen), 0)
                if _key(space, chosen) != _key(space, donor_config) and rows < MIN_ROWS <= sum(
                        plan.category_rows.values()):
                    # A move to a category that has hardly run while others have is exploration enough: PBT's
                    # perturbation on top sent 2 of bench_picks' 10 PB2-Mult picks to the cube's edge (true
                    # rate 0.000). Before any category has data (round 1) the perturbation stays.
                    return new, ops, fallback
                new, more = perturb(new, space, rng, self.settings.resample_prob, names=space.continuous)
                return new, ops + more, fallback
        pending = round_.picks + (round_.running if self.settings.pending == "running" else [])
        # A pending point from a member without a score has no (t, R) to sit at: it cannot be placed.
        pending = [p for p in pending if self.pending_at(p, donor) in gp.queries]
        if mode == "exp3_dep":  # the GP models this category alone: only its configs are pending in it
            pending = [p for p in pending if _key(space, p.config) == _key(space, new)]
        cats = mode == "cocabo"
        points = np.array([[*gp.queries[self.pending_at(p, donor)], *_cat_codes(space, p.config, cats),
                            *space.to_unit(p.config)] for p in pending])
        query = (*gp.queries[donor], *_cat_codes(space, new, cats))
        d = len(space.continuous)
        donor_unit = space.to_unit(donor_config)
        seeds = np.vstack([donor_unit[None, :], *(space.to_unit(p.config)[None, :] for p in round_.running)])
        try:
            with quiet():
                acquisition = Acquisition(gp.posterior, query, points.reshape(len(pending), len(query) + d), gp.kappa,
                                          observed=self.ucb_observed())
                box = self.region(donor_unit, _key(space, new) != _key(space, donor_config),
                                  plan.category_rows.get(_key(space, new), 0), round_.history)
                best = self.search(acquisition, box, donor_unit, seeds, rng)
                values, _ = acquisition(np.vstack([best, donor_unit]))
        except (linalg.LinAlgError, FloatingPointError, ValueError) as err:
            logger.warning("PB2: the acquisition failed (%s); exploring as PBT for this member", err)
            new, more = perturb(new, space, rng, self.settings.resample_prob, names=space.continuous)
            return new, ops + more, fallback
        new = space.from_unit(best, new)
        info = gp.info() | plan.info | {"pending": float(len(pending)), "ucb": float(values[0]),
                                        "ucb_donor": float(values[1])}
        return new, ops + [f"{name} -> {shown(new[name])} (PB2)" for name in space.continuous], info


def _key(space: Space, config: Config) -> tuple:
    """The categorical values of ``config``, in ``space.categorical`` order."""
    return tuple(config[name] for name in space.categorical)


def _cat_codes(space: Space, config: Config, include: bool) -> list[float]:
    """``config``'s category codes as GP input columns, when the GP has them (``include``)."""
    return list(config_codes(space, config)) if include else []
