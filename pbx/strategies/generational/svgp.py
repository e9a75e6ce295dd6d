"""The authors' stagnation smoother in plain torch: the sparse variational GP that IPBT's restart rule fits to a
generation's z-scored round bests (the model and its steps: :mod:`pbx.strategies.generational.stagnation`'s docstring).

A module of its own so that torch loads only when IPBT asks it (at its first stagnation test): a toy or GP-free
run starts without it, about 3.5 s of import on a busy 2-core machine.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

STEPS = 50
LEARNING_RATE = 0.2
INIT_STD = 1e-3
"""The reference's fit: Adam steps, their learning rate (cosine-annealed to 0 over the steps), and the spread of
the variational mean's initial draw (GPyTorch's ``mean_init_std``)."""


@lru_cache(maxsize=4096)
def svgp_mean(z: tuple[float, ...]) -> np.ndarray:
    """The reference's smoothed values of ``z`` over evenly spaced inputs in [0, 1] (the model:
    :mod:`pbx.strategies.generational.stagnation`). Cached:
    IPBT's restart test replays every round of the generation each round."""
    n = len(z)
    y = torch.tensor(z, dtype=torch.float64)
    x = torch.linspace(0, 1, n, dtype=torch.float64)
    noise = torch.Generator().manual_seed(0)
    raw = {name: torch.zeros((), dtype=torch.float64, requires_grad=True)
           for name in ("mean", "outputscale", "lengthscale", "noise")}
    inducing = x.clone().requires_grad_(True)
    v_mean = (INIT_STD * torch.randn(n, generator=noise, dtype=torch.float64)).requires_grad_(True)
    v_chol = torch.eye(n, dtype=torch.float64).requires_grad_(True)
    params = [*raw.values(), inducing, v_mean, v_chol]
    optimizer = torch.optim.Adam(params, lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS)
    for _ in range(STEPS):
        mean, var = _predict(raw, inducing, v_mean, v_chol, x)
        chol = torch.tril(v_chol)
        kl = 0.5 * ((chol**2).sum() + v_mean @ v_mean - n - torch.log(torch.diagonal(chol) ** 2).sum())
        var = var + torch.nn.functional.softplus(raw["noise"]) + 1e-4
        fit = torch.distributions.Normal(mean, var.clamp_min(1e-8).sqrt()).log_prob(y).mean() - kl / n
        optimizer.zero_grad()
        (-fit).backward()
        optimizer.step()
        schedule.step()
    with torch.no_grad():
        return _predict(raw, inducing, v_mean, v_chol, x)[0].numpy()


def _predict(raw: dict[str, torch.Tensor], inducing: torch.Tensor, v_mean: torch.Tensor, v_chol: torch.Tensor,
             x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The whitened variational posterior of f at ``x``: its mean and variance (GPyTorch's
    ``VariationalStrategy.forward``, jitters included)."""
    scale = torch.nn.functional.softplus(raw["outputscale"])
    lengthscale = torch.nn.functional.softplus(raw["lengthscale"])
    k_uu = _matern52(inducing, inducing, scale, lengthscale) + 1e-3 * torch.eye(len(inducing), dtype=x.dtype)
    interp = torch.linalg.solve_triangular(torch.linalg.cholesky(k_uu),
                                           _matern52(inducing, x, scale, lengthscale), upper=False)
    mean = interp.T @ v_mean + raw["mean"]
    chol = torch.tril(v_chol)
    var = scale + 1e-4 + ((chol.T @ interp) ** 2).sum(0) - (interp**2).sum(0)
    return mean, var


def _matern52(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
    d = (((a[:, None] - b[None, :]) / lengthscale) ** 2).clamp_min(1e-30).sqrt()
    return scale * (1 + math.sqrt(5) * d + 5.0 / 3.0 * d**2) * torch.exp(-math.sqrt(5) * d)
