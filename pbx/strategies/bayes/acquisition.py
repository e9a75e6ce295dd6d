"""PB2's acquisition: UCB at a donor's time and score, and the search for its maximum.

:class:`Acquisition` reads the posterior of :mod:`pbx.strategies.bayes.gp`: the mean of
the GP on the data plus ``kappa`` (:func:`kappa`, the paper's schedule) times the
standard deviation of the GP that also holds the round's pending points, so one
round's picks spread out. :func:`maximise` finds its maximum over the unit cube
of the continuous hyperparameters: random points screened in one vectorised
prediction, then every start (the best screened points, the donor's config, the
running members' configs) climbed on its own by L-BFGS-B with analytic gradients.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg
from scipy.optimize import minimize

from pbx.strategies.bayes.gp import Posterior, cholesky
from pbx.strategies.bayes.sqexp import se_gradient, sq_dist

SCREEN = 128
"""Random points screened in one vectorised prediction to seed the acquisition optimiser."""
ACQ_ITERS = 50
"""Cap on each climb's L-BFGS-B iterations. From the best screened points a climb converges in 5-15
on broad landscapes; on narrow ones (data converged around a peak, fitted lengthscale ~0.04) it
stops at the cap."""
KAPPA_MIN = 0.1
"""Floor on UCB's exploration weight, where ``0.2 log(0.4 n)`` is negative or tiny (n < 3)."""
TRUST_ROWS = 20
"""Fewer intervals than this of the category a member moves to (5 rounds of a population of 4) and its
continuous values are searched within :data:`TRUST_RADIUS` of the donor's (:func:`search_box`)."""
TRUST_RADIUS = 0.15
"""Half-width, in the unit cube, of the region around the donor's continuous values searched in a
category with fewer than :data:`TRUST_ROWS` intervals."""
VAR_FLOOR = 1e-12
"""Posterior variances below this count as zero (std floored, its gradient dropped)."""


class Acquisition:
    """UCB at fixed ``(t, R_before[, categories])``: mean of the data GP plus ``kappa`` times the std of the
    pending GP.

    The standard deviation, not the variance the PB2 authors' code and Ray Tune add:
    with a fitted kernel variance above 1 on the standardised rates the variance far
    from the data outgrows the standard deviation, and on a drifting optimum
    (``benchmarks/bench_picks.py``, 2 dimensions, 200 rows) 7 picks in 10 went to a
    corner of true rate below 0.05 where the donor's config ran above 0.5.

    The pending GP is the data GP with the pending points added as observations,
    each at its own ``(t, R_before[, categories])`` (its first ``q`` columns, ``q`` the
    query's length). Its variance is computed exactly by conditioning the data GP's
    posterior on those points, ``var - c (C + noise I)^-1 c'``, so the window is
    never refactorised. Points are rows of the unit cube over the continuous
    hyperparameters; with the first ``q`` columns fixed the kernel against a window
    row is an offset plus a factor times a squared exponential in the rest
    (:meth:`TimeVaryingSE.fixed_parts`), so one evaluation costs two triangular
    solves with the window's Cholesky factor.
    """

    def __init__(self, posterior: Posterior, query: tuple[float, ...], pending: np.ndarray, kappa: float,
                 observed: bool = False) -> None:
        """``pending``: (k, q + d) rows of (scaled t, scaled R_before[, category codes], unit hyperparameters).
        ``observed``: the standard deviation of an observation, the likelihood noise added to the latent
        variance (the IPBT authors' LCB on ``likelihood(gp(x))``), rather than of the latent ``f``."""
        kernel, X = posterior.kernel, posterior.X
        self.extra_var = posterior.noise if observed else 0.0
        fixed = np.asarray(query, dtype=float)
        q = len(fixed)
        P = np.asarray(pending, dtype=float).reshape(len(pending), X.shape[1])  # (k, D)
        self.post, self.kappa, self.pending = posterior, kappa, P[:, q:]
        self.lengthscale = kernel.free_lengthscale
        self.prior_var = float(kernel.Kdiag(X[:1])[0])  # k(z, z), the same for every z
        self.H = X[:, q:]  # (n, d)
        self.offset, self.factor = kernel.fixed_parts(fixed, X)  # (n,), (n,)
        self.offset_p, self.factor_p = kernel.fixed_parts(fixed, P)  # each pending point's own columns
        self.v_xp = posterior.whiten(kernel.K(P, X)).T  # (n, k)
        cov = kernel.K(P) - self.v_xp.T @ self.v_xp + posterior.noise * np.eye(len(P))
        self.cov_inv = linalg.cho_solve((cholesky(cov), True), np.eye(len(P))) if len(P) else cov

    def __call__(self, unit: np.ndarray, gradient: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """UCB at the rows of ``unit`` (m, d), and its gradient (m, d) if asked."""
        post = self.post
        se_zx = self.factor * np.exp(-sq_dist(unit, self.H) / self.lengthscale)  # (m, n): the part that moves
        k_zx = self.offset + se_zx
        v_zx = post.whiten(k_zx)  # (m, n)
        se_zp = self.factor_p * np.exp(-sq_dist(unit, self.pending) / self.lengthscale)  # (m, k)
        k_zp = self.offset_p + se_zp
        c = k_zp - v_zx @ self.v_xp  # data-posterior covariance with the pending points
        b = c @ self.cov_inv
        var = self.prior_var + self.extra_var - np.sum(v_zx * v_zx, 1) - np.sum(b * c, 1)
        std = np.sqrt(np.maximum(var, VAR_FLOOR))
        ucb = post.prior_mean + k_zx @ post.alpha + self.kappa * std
        if not gradient:
            return ucb, None
        # d std = d var / (2 std); d var = -2 (K + noise I)^-1 (k_zx - k_xp b) . dk_zx - 2 b . dk_zp
        # (through c), and (K + noise I)^-1 = L^-T L^-1.
        coef = np.where(var > VAR_FLOOR, self.kappa / std, 0.0)[:, None]
        weights_x = (post.alpha[None, :] - coef * post.whiten(v_zx - b @ self.v_xp.T, transpose=True)) * se_zx
        grad = se_gradient(weights_x, unit, self.H, self.lengthscale)
        grad += se_gradient(-coef * b * se_zp, unit, self.pending, self.lengthscale)
        return ucb, grad


def kappa(n: int) -> float:
    """UCB weight ``sqrt(0.2 log(0.4 n))`` (the paper's schedule), floored at :data:`KAPPA_MIN`."""
    return math.sqrt(max(0.2 * math.log(0.4 * max(n, 1)), KAPPA_MIN**2))


Box = tuple[np.ndarray, np.ndarray]
"""(d,) lower and (d,) upper corners of the region searched, inside ``[0, 1]^d``."""


def unit_box(d: int) -> Box:
    """The whole unit cube."""
    return np.zeros(d), np.ones(d)


def search_box(donor_unit: np.ndarray, moved: bool, category_rows: int) -> Box:
    """Where a member's continuous values are searched: the unit cube, or within :data:`TRUST_RADIUS` of
    the donor's (``donor_unit``) when the member ``moved`` to another category than the donor's and that
    category has fewer than :data:`TRUST_ROWS` intervals in the window (``category_rows``).

    A GP fit on a handful of a category's intervals (PB2-Mult's, or PB2-Mix's rows of a category EXP3
    rarely drew) knows little of that category's own surface: every config far from those rows scores
    the prior mean plus about the same bonus, and the climbs end on the faces, where the bonus is
    largest. On ``benchmarks/bench_picks.py`` (4 categories, 15 and 30 rounds) 3 and 2 of PB2-Mult's 10
    picks had a true rate below 0.05 where the donor's config ran above 0.5, each a move to another
    category, most on a face. The donor's values are the one point known to work somewhere, and near
    them the category is searched until it has data. A member that stays in its donor's category is
    searched over the whole cube: the donor's intervals are that category's data, and the GP's prior
    mean keeps the picks off empty corners (boxing those too cost the toy-cat benchmark, whose optimum
    is a corner, 0.0004 to 0.0017 of best final Q).
    """
    if not moved or category_rows >= TRUST_ROWS:
        return unit_box(len(donor_unit))
    return np.clip(donor_unit - TRUST_RADIUS, 0.0, 1.0), np.clip(donor_unit + TRUST_RADIUS, 0.0, 1.0)


def starts(acquisition: Acquisition, box: Box, restarts: int, rng: np.random.Generator,
           seeds: np.ndarray | None = None) -> np.ndarray:
    """Where the climbs begin: the best ``restarts`` of :data:`SCREEN` random points of ``box``, then
    ``seeds`` (the donor's config, the running members'), clipped into the box.

    Random starts alone miss a narrow high region: in 4 dimensions few of them land
    near the data, and they climb to a corner where only the variance is high. On
    1000-row histories that had converged around a peak, 3 picks in 4 were such
    corners, below the acquisition at the donor's own config.
    """
    lower, upper = box
    candidates = lower + (upper - lower) * rng.uniform(size=(SCREEN, len(lower)))
    values, _ = acquisition(candidates)
    best = candidates[np.argsort(-values, kind="stable")[:restarts]]
    return best if seeds is None or not len(seeds) else np.vstack([best, np.clip(seeds, lower, upper)])


def climb(acquisition: Acquisition, start: np.ndarray, box: Box) -> np.ndarray:
    """The local maximum L-BFGS-B reaches from ``start`` alone, inside ``box``."""

    def negative(unit: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = acquisition(unit[None, :], gradient=True)
        return -float(value[0]), -grad[0]

    lower, upper = box
    result = minimize(negative, start, jac=True, method="L-BFGS-B", bounds=list(zip(lower, upper)),
                      options={"maxiter": ACQ_ITERS})
    return np.clip(result.x, lower, upper)


def maximise(acquisition: Acquisition, box: Box, restarts: int, rng: np.random.Generator,
             seeds: np.ndarray | None = None) -> np.ndarray:
    """Best point of ``box``: every start of :func:`starts` climbed on its own, the best finalist.

    Each start's climb is a finalist, and so is the start itself, so the pick's
    acquisition is never below any start's own local maximum. Climbing all starts
    in one L-BFGS-B run on the sum of their values, as pbx did before, is cheaper
    per step but shares one line search and one stopping test among them: on a
    4-dimensional 1000-row history that run stopped after 3 iterations with all 14
    starts on faces, and returned a corner of true rate 0.000 whose acquisition
    (0.927) was below that of the climb from the donor's config alone (0.999, true
    rate 0.974).
    """
    points = starts(acquisition, box, restarts, rng, seeds)
    finalists = np.vstack([points, *(climb(acquisition, p, box)[None, :] for p in points)])
    values, _ = acquisition(finalists)
    return finalists[int(np.argmax(np.where(np.isfinite(values), values, -np.inf)))]


PERTURB_STARTS = 3
"""Points :func:`perturbed` tries (CASMO's ``n_restart``, as BG-PBT's and IPBT's reference code sets it)."""
PERTURB_FACTORS = (0.8, 1.2)
"""Each point's values are the centre's times a factor drawn uniformly between these (CASMO's
``get_start_point``, "taken from PB2")."""
STEPS = 40
"""Steps the reference's search takes from each start (``interleaved_search``'s ``step``)."""
STEP_SIZE = 3e-4
"""The learning rate of the reference's Adam. It builds a new Adam for each step, so every step is Adam's first:
``STEP_SIZE * g / (|g| + 1e-8)`` per value, the gradient's sign at this size (:data:`ADAM_EPS` aside)."""
ADAM_EPS = 1e-8
"""Adam's default ``eps``, in the first step's denominator."""


def perturbed(acquisition: Acquisition, box: Box, centre: np.ndarray, rng: np.random.Generator,
              steps: int = STEPS) -> np.ndarray:
    """The reference's search in the trust region (CASMO's ``interleaved_search`` over continuous values): from
    each of :data:`PERTURB_STARTS` points ``centre * U(0.8, 1.2)`` (each value its own factor, in the unit cube)
    ``steps`` steps up the acquisition, each moving a value by :data:`STEP_SIZE` in its gradient's direction and
    clipping into ``box``; the best by the acquisition of where they end.

    The steps move a value by at most ``steps * STEP_SIZE`` (0.012), but always the acquisition's way: on
    ToyPlain, whose best ``lr`` is the lower bound, the reference's picks reach it in about 20 rounds, where
    perturbations alone (``steps`` 0: each start clipped into ``box``, pbx's earlier search) approach it by
    factors of 0.8 and end a 300-step run about 0.07 further from the optimum in log distance (docs/algorithms.md).
    """
    lower, upper = box
    factors = rng.uniform(*PERTURB_FACTORS, size=(PERTURB_STARTS, len(centre)))
    points = np.clip(centre * factors, 0.0, 1.0)
    if not steps:
        points = np.clip(points, lower, upper)
    for _ in range(steps):
        _, grad = acquisition(points, gradient=True)
        points = np.clip(points + STEP_SIZE * grad / (np.abs(grad) + ADAM_EPS), lower, upper)
    values, _ = acquisition(points)
    return points[int(np.argmax(np.where(np.isfinite(values), values, -np.inf)))]
