"""GPy kernels for PB2, with analytic gradients.

:class:`TimeVaryingSE` is the time-varying squared exponential of PB2
(Parker-Holder et al., NeurIPS 2020; after Bogunovic et al., 2016): a squared
exponential over the inputs whose correlation decays with the time between two
observations, so that old improvement rates count less as training moves on.

:class:`MixedKernel` is PB2-Mix's kernel over categorical and continuous inputs
(Parker-Holder et al., NeurIPS 2021, after CoCaBO: Ru et al., ICML 2020):
``(1 - lambda)/2 (k_cat + k_cont) + lambda k_cat k_cont``, with ``k_cat`` the
:class:`Overlap` kernel and ``k_cont`` the time-varying SE, each with its own time
decay. The sum lets a category and a continuous value each explain the rate on
their own, the product only together; ``lambda`` weighs the two and is fit by
marginal likelihood with the rest.

All gradients are analytic (GPy's ``checkgrad`` passes). The reference
implementation left the kernel factor out of the lengthscale and epsilon
gradients and had no input gradients, so acquisition optimisers fell back to
finite differences. Its mixed kernel let ``lambda`` leave ``[0, 1]`` (no
constraint) and its ``lambda`` gradient lacked the 1/2 of the sum term; here
``lambda`` lives on ``(0, 1)`` through a logistic transform.

Both kernels split into what a PB2 acquisition holds fixed and what it optimises
(:meth:`TimeVaryingSE.fixed_parts`): with time, reward and category fixed, the
kernel against each data row is ``offset + factor * exp(-||u - u'||^2 / l)`` in
the continuous values ``u``.
"""

from __future__ import annotations

import numpy as np
from GPy.core import Param
from GPy.kern import Kern
from paramz.caching import Cache_this
from paramz.transformations import Logexp, Logistic

from pbx.strategies.bayes.sqexp import se_gradient, sq_dist

LENGTHSCALE_BOUNDS = (1e-5, 1.0)
EPSILON_BOUNDS = (0.0, 0.5)
"""PB2's bounds of the lengthscale and the time decay (BG-PBT and IPBT set the authors' through
:class:`pbx.strategies.bayes.gp.FitBounds`)."""
MIX_INIT = 0.5
"""Starting ``lambda`` of the mixed kernel: sum and product weighed alike (as CoCaBO and the reference)."""


def time_decay_rate(epsilon: float) -> float:
    """``c = log(1 - eps) / 2 <= 0``: the time factor ``(1 - eps)^(|t - t'|/2)`` is ``exp(c |t - t'|)``,
    finite for every ``eps < 1`` (``eps -> 0`` is no decay, with no NaN in values or gradients)."""
    return 0.5 * float(np.log1p(-epsilon))


def time_gradient(weighted: np.ndarray, t: np.ndarray, t2: np.ndarray, rate: float) -> np.ndarray:
    """``sum_j weighted[i, j] d/dt_i (rate |t_i - t2_j|)``, shape (n,); ``sign`` is 0 at the kink ``t = t'``."""
    return rate * np.sum(weighted * np.sign(t[:, None] - t2[None, :]), 1)


class TimeVaryingSE(Kern):
    """``k = (1 - eps)^(|t - t'| / 2) * variance * exp(-||x - x'||^2 / lengthscale)``.

    Input column 0 is the time ``t``; the remaining columns are ``x``. The
    lengthscale divides the *squared* distance (as in the PB2 paper), so it plays
    the part of ``2 l^2`` in GPy's RBF. The decay is computed as ``exp(c |t - t'|)``
    with ``c = log(1 - eps) / 2``, finite for every ``eps < 1``: ``eps -> 0``
    is a plain squared exponential, with no NaN in values or gradients.
    """

    def __init__(
        self,
        input_dim: int,
        variance: float = 1.0,
        lengthscale: float = 0.5,
        epsilon: float = 0.1,
        active_dims: np.ndarray | list[int] | None = None,
        name: str = "time_se",
    ) -> None:
        if input_dim < 2:
            raise ValueError(f"TimeVaryingSE needs a time column and at least one input, got input_dim={input_dim}")
        super().__init__(input_dim, active_dims, name)
        self.variance = Param("variance", variance, Logexp())
        self.lengthscale = Param("lengthscale", lengthscale, Logistic(*LENGTHSCALE_BOUNDS))
        self.epsilon = Param("epsilon", epsilon, Logistic(*EPSILON_BOUNDS))
        self.link_parameters(self.variance, self.lengthscale, self.epsilon)

    # Parameters are read as ``param.values[0]``: ``float(param)`` of a one-element array is an
    # error from NumPy 2.5 on.

    @property
    def decay_rate(self) -> float:
        """``c = log(1 - eps) / 2 <= 0``: the time factor is ``exp(c |t - t'|)``."""
        return time_decay_rate(float(self.epsilon.values[0]))

    @property
    def free_lengthscale(self) -> float:
        """The lengthscale of the continuous inputs an acquisition optimises (see :meth:`fixed_parts`)."""
        return float(self.lengthscale.values[0])

    @property
    def signal_variances(self) -> list[Param]:
        """The parameters that scale ``k(x, x)``, which :func:`pbx.strategies.bayes.gp.fit_kernel` may cap."""
        return [self.variance]

    @property
    def time_kernel(self) -> TimeVaryingSE:
        """The kernel whose lengthscale and time decay :class:`pbx.strategies.bayes.gp.FitBounds` may bound."""
        return self

    def summary(self) -> dict[str, float]:
        """The fitted parameters, for a decision's reasons."""
        return {"lengthscale": self.free_lengthscale, "epsilon": float(self.epsilon.values[0]),
                "variance": float(self.variance.values[0])}

    # Cached per inputs and parameters, so K and its gradients share one evaluation in each
    # step of a marginal-likelihood fit (GPy re-slices X whenever a parameter changes).
    @Cache_this(limit=3, ignore_args=())
    def _distances(self, X: np.ndarray, X2: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``|t - t'|`` and ``||x - x'||^2``, each (n, m)."""
        X2 = X if X2 is None else X2
        return np.abs(X[:, :1] - X2[:, :1].T), sq_dist(X[:, 1:], X2[:, 1:])

    @Cache_this(limit=3, ignore_args=())
    def _exponential(self, X: np.ndarray, X2: np.ndarray | None) -> np.ndarray:
        """``exp(c |t - t'| - ||x - x'||^2 / lengthscale)`` = K / variance, (n, m)."""
        dt, sq = self._distances(X, X2)
        out = sq * (-1.0 / self.lengthscale.values[0])
        out += self.decay_rate * dt
        return np.exp(out, out=out)

    def K(self, X: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        return self.variance.values[0] * self._exponential(X, X2)

    def Kdiag(self, X: np.ndarray) -> np.ndarray:
        return np.full(X.shape[0], self.variance.values[0])

    def fixed_factor(self, fixed: np.ndarray, X: np.ndarray) -> np.ndarray:
        """The part of ``k((fixed, u), X[j])`` that does not depend on ``u``, shape (n,).

        ``fixed`` holds the first ``len(fixed)`` of the kernel's input columns (time
        first; ``X`` has all of them), ``u`` the rest, so ``k((fixed, u), X[j]) = factor[j] * exp(-||u - X[j, len(fixed):]||^2 / lengthscale)``.
        An optimiser over ``u`` (PB2's acquisition, with time and reward fixed) then
        evaluates the kernel in O(n) per point instead of through the full inputs.
        """
        q = len(fixed)
        dt = np.abs(fixed[0] - X[:, 0])
        sq = np.sum((X[:, 1:q] - fixed[1:]) ** 2, 1)
        return self.variance.values[0] * np.exp(self.decay_rate * dt - sq / self.lengthscale.values[0])

    def fixed_parts(self, fixed: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(offset, factor)``, each (n,): ``k((fixed, u), X[j]) = offset[j] + factor[j] exp(-||u - u_j||^2 / l)``
        (here ``offset`` is 0 and ``factor`` is :meth:`fixed_factor`)."""
        return np.zeros(len(X)), self.fixed_factor(fixed, X)

    def update_gradients_full(self, dL_dK: np.ndarray, X: np.ndarray, X2: np.ndarray | None = None) -> None:
        dt, sq = self._distances(X, X2)
        exponential = self._exponential(X, X2)
        weighted = dL_dK * exponential * self.variance.values[0]
        lengthscale, eps = self.lengthscale.values[0], self.epsilon.values[0]
        self.variance.gradient = np.sum(dL_dK * exponential)
        self.lengthscale.gradient = np.sum(weighted * sq) / lengthscale**2
        self.epsilon.gradient = -0.5 / (1.0 - eps) * np.sum(weighted * dt)

    def update_gradients_diag(self, dL_dKdiag: np.ndarray, X: np.ndarray) -> None:
        self.variance.gradient = np.sum(dL_dKdiag)
        self.lengthscale.gradient = 0.0
        self.epsilon.gradient = 0.0

    def gradients_X(self, dL_dK: np.ndarray, X: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        """``dL/dX[i] = sum_j dL_dK[i, j] dk(X[i], X2[j]) / dX[i]``; both sides of K when ``X2`` is None.

        The time gradient uses ``sign(t - t')``: zero at ``t = t'``, where ``|t - t'|`` has its kink.
        """
        if X2 is None:
            dL_dK = dL_dK + dL_dK.T
            X2 = X
        weighted = dL_dK * self.K(X, X2)  # (n, m)
        grad = np.empty(X.shape)
        grad[:, 0] = time_gradient(weighted, X[:, 0], X2[:, 0], self.decay_rate)
        grad[:, 1:] = se_gradient(weighted, X[:, 1:], X2[:, 1:], self.lengthscale.values[0])
        return grad

    def gradients_X_diag(self, dL_dKdiag: np.ndarray, X: np.ndarray) -> np.ndarray:
        return np.zeros(X.shape)


class Overlap(Kern):
    """``k = variance * mean_d 1[h_d = h'_d] * (1 - eps)^(|t - t'| / 2)``: the overlap kernel with a time decay.

    Input column 0 is the time; the others hold categorical values as codes (any
    numbers: only equality counts). Positive semi-definite as a sum of indicator
    products (each ``1[h_d = h'_d]`` is a Gram matrix of one-hot vectors) times a
    PSD time factor.
    """

    def __init__(self, input_dim: int, variance: float = 1.0, epsilon: float = 0.1,
                 active_dims: np.ndarray | list[int] | None = None, name: str = "overlap") -> None:
        if input_dim < 2:
            raise ValueError(f"Overlap needs a time column and at least one category, got input_dim={input_dim}")
        super().__init__(input_dim, active_dims, name)
        self.variance = Param("variance", variance, Logexp())
        self.epsilon = Param("epsilon", epsilon, Logistic(*EPSILON_BOUNDS))
        self.link_parameters(self.variance, self.epsilon)

    @property
    def decay_rate(self) -> float:
        return time_decay_rate(float(self.epsilon.values[0]))

    @Cache_this(limit=3, ignore_args=())
    def _parts(self, X: np.ndarray, X2: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``|t - t'|`` and the share of equal categories, each (n, m)."""
        X2 = X if X2 is None else X2
        same = np.mean(X[:, None, 1:] == X2[None, :, 1:], axis=2)
        return np.abs(X[:, :1] - X2[:, :1].T), same

    def _unscaled(self, X: np.ndarray, X2: np.ndarray | None) -> np.ndarray:
        dt, same = self._parts(X, X2)
        return same * np.exp(self.decay_rate * dt)

    def K(self, X: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        return self.variance.values[0] * self._unscaled(X, X2)

    def Kdiag(self, X: np.ndarray) -> np.ndarray:
        return np.full(X.shape[0], self.variance.values[0])

    def update_gradients_full(self, dL_dK: np.ndarray, X: np.ndarray, X2: np.ndarray | None = None) -> None:
        dt, _ = self._parts(X, X2)
        unscaled = self._unscaled(X, X2)
        self.variance.gradient = np.sum(dL_dK * unscaled)
        self.epsilon.gradient = (-0.5 / (1.0 - self.epsilon.values[0]) * self.variance.values[0]
                                 * np.sum(dL_dK * unscaled * dt))

    def update_gradients_diag(self, dL_dKdiag: np.ndarray, X: np.ndarray) -> None:
        self.variance.gradient = np.sum(dL_dKdiag)
        self.epsilon.gradient = 0.0

    def gradients_X(self, dL_dK: np.ndarray, X: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        """Only the time column has a gradient: categories are codes, not coordinates."""
        if X2 is None:
            dL_dK = dL_dK + dL_dK.T
            X2 = X
        grad = np.zeros(X.shape)
        grad[:, 0] = time_gradient(dL_dK * self.K(X, X2), X[:, 0], X2[:, 0], self.decay_rate)
        return grad

    def gradients_X_diag(self, dL_dKdiag: np.ndarray, X: np.ndarray) -> np.ndarray:
        return np.zeros(X.shape)


class MixedKernel(Kern):
    """PB2-Mix's kernel ``(1 - lambda)/2 (k_cat + k_cont) + lambda k_cat k_cont`` over mixed inputs.

    Input columns: ``[t, R_before, c_1..c_m, u_1..u_d]``, the time, the score at the
    interval's start, ``m`` category codes and ``d`` continuous values. ``k_cont``
    (:class:`TimeVaryingSE`) sees ``[t, R_before, u]``, ``k_cat`` (:class:`Overlap`)
    ``[t, c]``. ``lambda`` in ``(0, 1)`` through a logistic transform. Sums and
    products of PSD kernels with non-negative weights are PSD.
    """

    def __init__(self, n_cat: int, n_cont: int, variance: float = 1.0, name: str = "mixed") -> None:
        if n_cat < 1 or n_cont < 1:
            raise ValueError(f"MixedKernel needs categorical and continuous inputs, got n_cat={n_cat}, n_cont={n_cont}")
        super().__init__(2 + n_cat + n_cont, None, name)
        self.n_cat = n_cat
        self.cont = TimeVaryingSE(2 + n_cont, variance=variance, active_dims=[0, 1, *range(2 + n_cat, 2 + n_cat + n_cont)],
                                  name="cont")
        self.cat = Overlap(1 + n_cat, variance=variance, active_dims=[0, *range(2, 2 + n_cat)], name="cat")
        self.mix = Param("mix", MIX_INIT, Logistic(0.0, 1.0))
        self.link_parameters(self.cont, self.cat, self.mix)

    @property
    def free_lengthscale(self) -> float:
        return self.cont.free_lengthscale

    @property
    def signal_variances(self) -> list[Param]:
        """Both parts' variances (each capped alike)."""
        return [self.cont.variance, self.cat.variance]

    @property
    def time_kernel(self) -> TimeVaryingSE:
        """The continuous part, whose lengthscale and time decay a fit's bounds may set."""
        return self.cont

    def summary(self) -> dict[str, float]:
        return {**self.cont.summary(), "cat_variance": float(self.cat.variance.values[0]),
                "cat_epsilon": float(self.cat.epsilon.values[0]), "lambda": float(self.mix.values[0])}

    def _weights(self) -> tuple[float, float]:
        """``((1 - lambda)/2, lambda)``: the sum's and the product's weight."""
        lam = float(self.mix.values[0])
        return 0.5 * (1.0 - lam), lam

    def K(self, X: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        a, lam = self._weights()
        kc, kh = self.cont.K(X, X2), self.cat.K(X, X2)
        return a * (kc + kh) + lam * kc * kh

    def Kdiag(self, X: np.ndarray) -> np.ndarray:
        a, lam = self._weights()
        kc, kh = self.cont.Kdiag(X), self.cat.Kdiag(X)
        return a * (kc + kh) + lam * kc * kh

    def update_gradients_full(self, dL_dK: np.ndarray, X: np.ndarray, X2: np.ndarray | None = None) -> None:
        # dK/dk_cont = a + lambda k_cat, and likewise: each part's gradients with dL_dK weighted by it
        a, lam = self._weights()
        kc, kh = self.cont.K(X, X2), self.cat.K(X, X2)
        self.cont.update_gradients_full(dL_dK * (a + lam * kh), X, X2)
        self.cat.update_gradients_full(dL_dK * (a + lam * kc), X, X2)
        self.mix.gradient = np.sum(dL_dK * (kc * kh - 0.5 * (kc + kh)))

    def update_gradients_diag(self, dL_dKdiag: np.ndarray, X: np.ndarray) -> None:
        a, lam = self._weights()
        kc, kh = self.cont.Kdiag(X), self.cat.Kdiag(X)
        self.cont.update_gradients_diag(dL_dKdiag * (a + lam * kh), X)
        self.cat.update_gradients_diag(dL_dKdiag * (a + lam * kc), X)
        self.mix.gradient = np.sum(dL_dKdiag * (kc * kh - 0.5 * (kc + kh)))

    def gradients_X(self, dL_dK: np.ndarray, X: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        a, lam = self._weights()
        kc, kh = self.cont.K(X, X2), self.cat.K(X, X2)
        return (self.cont.gradients_X(dL_dK * (a + lam * kh), X, X2)
                + self.cat.gradients_X(dL_dK * (a + lam * kc), X, X2))

    def gradients_X_diag(self, dL_dKdiag: np.ndarray, X: np.ndarray) -> np.ndarray:
        return np.zeros(X.shape)

    def fixed_parts(self, fixed: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`TimeVaryingSE.fixed_parts`, ``fixed = [t, R_before, c_1..c_m]``: ``k_cat`` is then a
        number per row, so ``k = a k_cat + (a + lambda k_cat) k_cont`` splits into an offset and a factor."""
        a, lam = self._weights()
        m = self.n_cat
        cont_rows = X[:, [0, 1, *range(2 + m, X.shape[1])]]
        factor_cont = self.cont.fixed_factor(np.asarray(fixed[:2], dtype=float), cont_rows)
        same = np.mean(X[:, 2:2 + m] == np.asarray(fixed[2:2 + m])[None, :], axis=1)
        k_cat = self.cat.variance.values[0] * same * np.exp(self.cat.decay_rate * np.abs(fixed[0] - X[:, 0]))
        return a * k_cat, (a + lam * k_cat) * factor_cont
