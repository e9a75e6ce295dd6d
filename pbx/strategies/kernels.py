"""GPy kernels for PB2, with analytic gradients.

:class:`TimeVaryingSE` is the time-varying squared exponential of PB2
(Parker-Holder et al., NeurIPS 2020; after Bogunovic et al., 2016): a squared
exponential over the inputs whose correlation decays with the time between two
observations, so that old improvement rates count less as training moves on.

All gradients are analytic (GPy's ``checkgrad`` passes). The reference
implementation left the kernel factor out of the lengthscale and epsilon
gradients and had no input gradients, so acquisition optimisers fell back to
finite differences.
"""

from __future__ import annotations

import numpy as np
from GPy.core import Param
from GPy.kern import Kern
from paramz.caching import Cache_this
from paramz.transformations import Logexp, Logistic

LENGTHSCALE_BOUNDS = (1e-5, 1.0)
EPSILON_BOUNDS = (0.0, 0.5)


def sq_dist(x: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances (n, m) between the rows of ``x`` (n, q) and ``x2`` (m, q)."""
    sq = x @ x2.T
    sq *= -2.0
    sq += np.sum(x * x, 1)[:, None]
    sq += np.sum(x2 * x2, 1)[None, :]
    return np.maximum(sq, 0.0, out=sq)  # cancellation can leave tiny negatives


def se_gradient(weighted: np.ndarray, x: np.ndarray, x2: np.ndarray, lengthscale: float) -> np.ndarray:
    """``sum_j weighted[i, j] * d/dx_i (-||x_i - x2_j||^2 / lengthscale)``, shape (n, q).

    With ``weighted = dL_dK * K`` this is the input gradient of any kernel with the
    factor ``exp(-||x - x'||^2 / lengthscale)``, since that factor's derivative is
    itself times ``-2 (x - x') / lengthscale``.
    """
    # sum_j w_ij (x_i - x2_j) = x_i * rowsum(w) - w @ x2
    return -2.0 / lengthscale * (x * np.sum(weighted, 1)[:, None] - weighted @ x2)


class TimeVaryingSE(Kern):
    """``k = (1 - eps)^(|t - t'| / 2) * variance * exp(-||x - x'||^2 / lengthscale)``.

    Input column 0 is the time ``t``; the remaining columns are ``x``. The
    lengthscale divides the *squared* distance (as in the PB2 paper), so it plays
    the part of ``2 l^2`` in GPy's RBF. The decay is computed as ``exp(c |t - t'|)``
    with ``c = log(1 - eps) / 2``, finite on the whole of ``[0, 0.5]``: ``eps -> 0``
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
        return 0.5 * float(np.log1p(-float(self.epsilon.values[0])))

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
        grad[:, 0] = self.decay_rate * np.sum(weighted * np.sign(X[:, :1] - X2[:, :1].T), 1)
        grad[:, 1:] = se_gradient(weighted, X[:, 1:], X2[:, 1:], self.lengthscale.values[0])
        return grad

    def gradients_X_diag(self, dL_dKdiag: np.ndarray, X: np.ndarray) -> np.ndarray:
        return np.zeros(X.shape)
