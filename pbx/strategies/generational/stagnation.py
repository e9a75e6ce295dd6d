"""IPBT's stagnation rule: does the best score of a generation's rounds still rise?

The reference (``AwesomeLemon/IPBT`` ``algo/ipbt.py``, ``previous-smoothed-or-slow``) z-scores the rounds' bests
over the generation (``std`` with ``ddof=1``), and a round *fails* when either

- the generation has ``slow_rounds`` (15) rounds and its last ``slow_rounds - 1`` raised the best z-score by
  less than 1 (the slow rule: the restart follows at once), or
- the smoothed z-score of the last round is not above the round before's.

Its smoother (``algo/ipbt_utils.py`` ``train_approximate_gp``) is a GPyTorch sparse variational GP whose
inducing points start at the inputs (``torch.linspace(0, 1, n)``, learned): constant mean, scaled Matern-5/2,
Gaussian likelihood (noise above 1e-4), Cholesky variational distribution, whitened strategy, fitted by 50 Adam
steps (lr 0.2, cosine-annealed to 0) on the predictive log likelihood, GPyTorch's initial values (raw
parameters 0: lengthscale, outputscale and noise softplus(0) = 0.69; variational mean N(0, 1e-3), covariance
the identity); the smoothed values are the posterior mean of f at the inputs.
:mod:`pbx.strategies.generational.svgp` computes
the same in plain torch (pbx does not depend on GPyTorch), with GPyTorch's jitters (1e-3 on the inducing
covariance, 1e-4 on the predictive one); the fit stops after 50 steps as the reference's, short of the
optimum, so the steps are mimicked, not replaced by a converged fit. The variational mean's initial draw is
fixed (seed 0): the verdicts replay exactly, and are those of one seed of the reference's fit.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg

SMOOTHERS = ("reference", "grid")
"""The values of ``IPBTSettings.smoother``: ``reference``, the authors' sparse GP
(:func:`pbx.strategies.generational.svgp.svgp_mean`); ``grid``, pbx's earlier exact GP on a grid (:func:`grid_mean`)."""
LENGTHSCALES = (0.2, 0.4, 0.8, 1.6)
NOISES = (1e-2, 0.1, 0.3, 1.0)
"""The grid the ``grid`` smoother's lengthscale and noise are chosen on by marginal likelihood (the z-scores have
unit variance, so the kernel's is 1). Its shortest lengthscale is a fifth of the generation, so the GP smooths
round-to-round noise instead of passing through every point."""


def stagnated(bests: np.ndarray, slow_rounds: int, smoother: str = "reference") -> tuple[bool, bool]:
    """Whether the generation's round bests ``bests`` (oldest first) failed to rise in the last round, and
    whether that is the slow rule's (which restarts at once)."""
    finite = bests[np.isfinite(bests)]
    if len(finite) <= 1:
        return False, False
    spread = float(np.std(finite, ddof=1))
    if not spread > 0:
        return True, False  # flat: nothing rose (the reference's z-scores are NaN, its comparison False)
    z = (finite - finite.mean()) / spread
    if len(z) >= slow_rounds and z.max() - z[:-(slow_rounds - 1)].max() < 1:
        return True, True
    if smoother == "reference":
        # torch: a run that never asks the sparse GP does not load it
        from pbx.strategies.generational.svgp import svgp_mean

        smooth = svgp_mean(tuple(z.tolist()))
    else:
        smooth = grid_mean(z)
    return not smooth[-1] > smooth[-2], False


def grid_mean(z: np.ndarray) -> np.ndarray:
    """The posterior mean at each point of an exact GP on ``z`` over evenly spaced inputs in [0, 1] (Matern-5/2
    of unit variance plus noise, lengthscale and noise the grid's (:data:`LENGTHSCALES`, :data:`NOISES`) best by
    marginal likelihood): pbx's earlier smoother, without torch, fixed and cheap."""
    x = np.linspace(0.0, 1.0, len(z))
    best = None
    for lengthscale in LENGTHSCALES:
        r = np.abs(x[:, None] - x[None, :]) * math.sqrt(5) / lengthscale
        K = (1 + r + r * r / 3) * np.exp(-r)
        for noise in NOISES:
            L = linalg.cholesky(K + noise * np.eye(len(z)), lower=True)
            alpha = linalg.cho_solve((L, True), z)
            fit = -0.5 * float(z @ alpha) - float(np.log(np.diag(L)).sum())
            if best is None or fit > best[0]:
                best = (fit, K, alpha)
    assert best is not None
    return best[1] @ best[2]
