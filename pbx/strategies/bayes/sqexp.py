"""The squared exponential's distances and input gradient, in numpy.

Shared by PB2's GPy kernels (:mod:`pbx.strategies.bayes.kernels`) and its acquisition
(:mod:`pbx.strategies.bayes.acquisition`), and kept apart from the kernels so that
importing the acquisition does not import GPy: GPy (with the matplotlib it pulls
in) costs about a second at every start, and only a run that fits a GP needs it.
"""

from __future__ import annotations

import numpy as np


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
