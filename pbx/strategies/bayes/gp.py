"""PB2's Gaussian process: the marginal-likelihood fit and the posterior it conditions on the window.

The targets are improvement rates, standardised and clipped (:func:`standardise`);
the inputs ``(t, R_before[, categories], continuous hyperparameters)``, ``t`` and
``R_before`` scaled by their observed range (:class:`Scale`). The kernel
(:mod:`pbx.strategies.bayes.kernels`) is fit on the most recent rows from a fixed start,
so a resumed run refits the same GP (:func:`fit_kernel`); the posterior then
conditions on the whole window with one Cholesky factorisation
(:class:`Posterior`), which the acquisition (:mod:`pbx.strategies.bayes.acquisition`)
reads at every step.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, NamedTuple

import numpy as np
from scipy import linalg
from scipy.linalg import blas

if TYPE_CHECKING:
    from pbx.strategies.bayes.kernels import MixedKernel, TimeVaryingSE

    Kernel = TimeVaryingSE | MixedKernel

Y_CLIP = 2.0
"""Standardised improvement rates are clipped to ``[-Y_CLIP, Y_CLIP]`` (the paper's outlier guard)."""
SIGNAL_INIT, NOISE_INIT, NOISE_BOUNDS = 0.5, 0.5, (1e-4, 10.0)
"""Kernel variance and likelihood noise on the standardised (unit-variance) targets: both start
at half, and the noise stays above a floor that keeps the window's kernel matrix well conditioned."""
SIGNAL_FLOOR = 1e-4
"""Lower bound of PB2's capped kernel variance (:func:`fit_kernel`'s ``signal_cap``)."""
SIGNAL_FREE = 1e6
"""A cap on the kernel variance at or above this leaves it free: no fit on unit-variance targets gets there, and
GPy's bounded transform between a floor and a cap of 1e300 sends the variance to 1e169 in its first step."""
FALLBACK_NOISE = 0.1
"""Fixed noise of the second fit attempt, after the free fit failed: large jitter, never singular."""
FIT_ITERS, FIT_FACTR = 30, 1e10
"""Marginal-likelihood optimiser: cap on evaluations, and L-BFGS-B's stopping factor (relative
change in the objective of about 2e-6; the hyperparameters barely move past it)."""
JITTERS = (0.0, 1e-8, 1e-6, 1e-4, 1e-2)
"""Jitter ladder for the posterior's Cholesky, relative to the mean of the diagonal."""
GPY_LOGGERS = ("GP", "paramz")
"""Loggers GPy and paramz write INFO lines to on every model built ("initializing Y", ...)."""


@dataclass(frozen=True)
class Scale:
    """Affine map of one input onto ``[0, 1]`` by its observed range."""

    low: float
    span: float

    @classmethod
    def fit(cls, values: np.ndarray) -> Scale:
        finite = values[np.isfinite(values)]
        low, high = float(finite.min()), float(finite.max())
        return cls(low, high - low if high > low else 1.0)

    def __call__(self, values: np.ndarray | float) -> np.ndarray | float:
        return (values - self.low) / self.span


def standardise(y: np.ndarray) -> np.ndarray | None:
    """Zero mean, unit spread, clipped to ``[-Y_CLIP, Y_CLIP]``; None when all values are equal."""
    spread = float(np.std(y))
    if not spread > 1e-12 * max(1.0, float(np.max(np.abs(y)))):
        return None
    return np.clip((y - np.mean(y)) / spread, -Y_CLIP, Y_CLIP)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Keep GPy's and paramz's prints, warnings, log lines and float alarms out of the user's terminal."""
    loggers = [logging.getLogger(name) for name in GPY_LOGGERS]
    levels = [log.level for log in loggers]
    try:
        for log in loggers:
            log.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            yield
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)


def make_kernel(X: np.ndarray, n_cat: int) -> Kernel:
    """A fresh kernel for inputs ``X``: the time-varying SE, or with ``n_cat`` category columns the
    mixed kernel (both parts' variances starting at 1, so ``k(x, x)`` starts at 1 as ``lambda = 1/2``).

    GPy is imported here, by the first fit, not when PB2 is: it costs about a second at every
    process start (each rank, each command), and runs that never fit a GP should not pay it."""
    from pbx.strategies.bayes.kernels import MixedKernel, TimeVaryingSE

    if n_cat:
        return MixedKernel(n_cat, X.shape[1] - 2 - n_cat)
    return TimeVaryingSE(X.shape[1], variance=SIGNAL_INIT)


@dataclass(frozen=True)
class FitBounds:
    """Where the marginal-likelihood fit keeps the kernel's variance and the likelihood noise, and where it starts
    them, on the standardised (unit-variance) targets."""

    signal: tuple[float, float] | None = None
    """Bounds of the kernel's variances (each part's, for the mixed kernel); None leaves them free, as GPy, the PB2
    authors' code and Ray Tune do."""
    noise: tuple[float, float] = NOISE_BOUNDS
    start: tuple[float, float] | None = None
    """The kernel variance and the noise the fit starts from; None: the kernel's own start (:func:`make_kernel`)
    and :data:`NOISE_INIT`."""
    lengthscale: tuple[float, float] | None = None
    """Bounds of the time-varying SE's lengthscale (the continuous part's, in the mixed kernel); None: PB2's
    (:data:`~pbx.strategies.bayes.kernels.LENGTHSCALE_BOUNDS`)."""
    decay: tuple[float, float] | None = None
    """Bounds of its time decay ``epsilon``; None: PB2's (:data:`~pbx.strategies.bayes.kernels.EPSILON_BOUNDS`)."""
    time_start: tuple[float, float] | None = None
    """The lengthscale and time decay the fit starts from, inside their bounds; None: the kernel's own."""
    hold_decay: bool = False
    """Hold the time decay where :attr:`time_start` puts it (0: no decay) instead of fitting it."""


class Fitted(NamedTuple):
    """A fitted kernel, its likelihood noise variance and the constant mean the fit learned (0 when none was)."""

    kernel: Kernel
    noise: float
    mean: float


def fit_kernel(X: np.ndarray, y: np.ndarray, fixed_noise: float | None = None, n_cat: int = 0,
               signal_cap: float | None = None) -> tuple[Kernel, float]:
    """PB2's marginal-likelihood fit (:func:`fit` in PB2's bounds): the kernel and the noise variance.

    ``signal_cap``: upper bound on the kernel's variances (above :data:`SIGNAL_FLOOR`); None leaves them free.
    """
    bounds = FitBounds(signal=None if signal_cap is None else (SIGNAL_FLOOR, signal_cap))
    fitted = fit(X, y, fixed_noise, n_cat, bounds)
    return fitted.kernel, fitted.noise


def fit(X: np.ndarray, y: np.ndarray, fixed_noise: float | None = None, n_cat: int = 0,
        bounds: FitBounds = FitBounds(), learn_mean: bool = False) -> Fitted:
    """Marginal-likelihood fit from a fixed start (no random restarts: decisions must replay).

    ``n_cat``: category columns after ``(t, R_before)`` (the mixed kernel), 0 for none.
    ``fixed_noise``: the noise variance, held (the retry after a failed free fit).
    ``learn_mean``: fit a constant mean with the kernel (GPy's ``Constant`` mapping, as GPyTorch's
    ``ConstantMean``); otherwise the targets' prior mean is 0. Raises ``LinAlgError`` or
    ``FloatingPointError`` when the fit fails or ends non-finite.
    """
    import GPy

    kernel = make_kernel(X, n_cat)
    noise_start = NOISE_INIT
    if bounds.start is not None:
        signal_start, noise_start = bounds.start
        for variance in kernel.signal_variances:
            variance[:] = signal_start
    mean = GPy.mappings.Constant(X.shape[1], 1, 0.0) if learn_mean else None
    model = GPy.models.GPRegression(X, y[:, None], kernel, noise_var=fixed_noise or noise_start, mean_function=mean)
    if fixed_noise is None:
        model.Gaussian_noise.variance.constrain_bounded(*bounds.noise, warning=False)
    else:
        model.Gaussian_noise.variance.fix(warning=False)
    if bounds.signal is not None and bounds.signal[1] < SIGNAL_FREE:
        for variance in kernel.signal_variances:
            variance.constrain_bounded(*bounds.signal, warning=False)
    time_kernel = kernel.time_kernel
    if bounds.lengthscale is not None:
        time_kernel.lengthscale.constrain_bounded(*bounds.lengthscale, warning=False)
    if bounds.decay is not None:
        time_kernel.epsilon.constrain_bounded(*bounds.decay, warning=False)
    if bounds.time_start is not None:  # after the bounds: a start outside the old ones would be moved
        time_kernel.lengthscale[:], time_kernel.epsilon[:] = bounds.time_start
    if bounds.hold_decay:
        time_kernel.epsilon.fix(warning=False)
    model.optimize("lbfgsb", max_iters=FIT_ITERS, bfgs_factor=FIT_FACTR)
    noise = float(model.Gaussian_noise.variance.values[0])
    constant = float(mean.C.values[0]) if mean is not None else 0.0
    if not (np.all(np.isfinite(kernel.param_array)) and math.isfinite(noise) and math.isfinite(constant)
            and math.isfinite(model.log_likelihood())):
        raise FloatingPointError(f"GP fit ended at non-finite values {kernel.param_array}, noise {noise}")
    return Fitted(kernel, noise, constant)


def cholesky(A: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of ``A``, adding jitter from :data:`JITTERS` until it is positive definite."""
    scale = float(np.mean(np.diag(A)))
    for jitter in JITTERS:
        try:
            return linalg.cholesky(A + jitter * scale * np.eye(len(A)) if jitter else A, lower=True)
        except (linalg.LinAlgError, ValueError):
            continue
    raise linalg.LinAlgError(f"matrix not positive definite even with jitter {JITTERS[-1]} x mean diagonal")


class Posterior:
    """The GP conditioned on every window row, with the fitted kernel; predicts the latent ``f``.

    ``prior_mean`` is the constant the posterior mean returns to far from the data
    (``mean(x) = prior_mean + k(x, X) alpha``); the kernel is fit on the centred
    targets either way.
    """

    def __init__(self, kernel: Kernel, noise: float, X: np.ndarray, y: np.ndarray, prior_mean: float = 0.0) -> None:
        self.kernel, self.noise, self.X, self.prior_mean = kernel, noise, X, prior_mean
        A = kernel.K(X)  # a fresh array (K scales a cached one), so ours to modify
        A[np.diag_indices_from(A)] += noise
        self.L = cholesky(A)  # Fortran order, as BLAS wants it
        self.alpha = linalg.cho_solve((self.L, True), y - prior_mean, check_finite=False)

    def whiten(self, rows: np.ndarray, transpose: bool = False) -> np.ndarray:
        """Each row solved against ``L`` (``L^-1 row``), or against ``L'`` with ``transpose``; (m, n) -> (m, n).

        One row (an optimiser step) goes through BLAS ``trsv``, many through ``trsm``:
        no explicit inverse, and each about as fast as a matrix-vector product.
        """
        if len(rows) == 1:
            return blas.dtrsv(self.L, rows[0], lower=1, trans=int(transpose))[None, :]
        return blas.dtrsm(1.0, self.L, rows.T, lower=1, trans_a=int(transpose)).T
