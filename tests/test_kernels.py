"""TimeVaryingSE: values, GPy's gradient check, input gradients against finite differences."""

from __future__ import annotations

import GPy
import numpy as np
import pytest

from pbx.strategies.kernels import TimeVaryingSE

STEP = 1e-6


def _data(seed: int, n: int = 25, dim: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(n, dim)), rng.normal(size=(n, 1))


def _numeric_gradients_x(kernel: TimeVaryingSE, dL_dK: np.ndarray, X: np.ndarray, X2: np.ndarray | None) -> np.ndarray:
    """Central differences of ``sum(dL_dK * K(X, X2))`` in each entry of X (X2 moves with X when None)."""
    grad = np.zeros_like(X)
    for i, j in np.ndindex(*X.shape):
        shifted = []
        for sign in (1.0, -1.0):
            Xs = X.copy()
            Xs[i, j] += sign * STEP
            shifted.append(np.sum(dL_dK * kernel.K(Xs, None if X2 is None else X2)))
        grad[i, j] = (shifted[0] - shifted[1]) / (2 * STEP)
    return grad


def test_matches_the_formula() -> None:
    X, _ = _data(0, n=6)
    kernel = TimeVaryingSE(4, variance=1.7, lengthscale=0.3, epsilon=0.2)
    dt = np.abs(X[:, :1] - X[:, :1].T)
    sq = np.sum((X[:, None, 1:] - X[None, :, 1:]) ** 2, -1)
    expected = 0.8 ** (dt / 2) * 1.7 * np.exp(-sq / 0.3)
    np.testing.assert_allclose(kernel.K(X), expected, rtol=1e-12)
    np.testing.assert_allclose(kernel.Kdiag(X), np.diag(expected))
    np.testing.assert_allclose(kernel.K(X[:2], X[2:]), expected[:2, 2:], rtol=1e-12)


@pytest.mark.parametrize("epsilon", [0.2, 1e-9, 0.4999])
@pytest.mark.parametrize("seed", [0, 1])
def test_gpy_checkgrad_on_a_regression_model(epsilon: float, seed: int) -> None:
    X, Y = _data(seed)
    kernel = TimeVaryingSE(4, variance=1.3, lengthscale=0.4, epsilon=epsilon)
    model = GPy.models.GPRegression(X, Y, kernel, noise_var=0.2)
    assert model.checkgrad(tolerance=1e-4)


def test_checkgrad_holds_after_a_fit() -> None:
    X, Y = _data(2)
    model = GPy.models.GPRegression(X, Y, TimeVaryingSE(4), noise_var=0.1)
    model.optimize("lbfgsb", max_iters=50)
    assert model.checkgrad(tolerance=1e-3)
    assert np.all(np.isfinite(model.param_array))


def test_gradients_x_match_finite_differences() -> None:
    X, _ = _data(3, n=6)
    Z = np.random.default_rng(4).uniform(size=(3, 4))
    kernel = TimeVaryingSE(4, variance=0.9, lengthscale=0.25, epsilon=0.3)
    dL_dK = np.random.default_rng(5).normal(size=(3, 6))
    np.testing.assert_allclose(kernel.gradients_X(dL_dK, Z, X), _numeric_gradients_x(kernel, dL_dK, Z, X), atol=1e-7)


def test_gradients_x_of_k_x_x_count_both_sides() -> None:
    X, _ = _data(6, n=5)
    kernel = TimeVaryingSE(4, variance=1.1, lengthscale=0.5, epsilon=0.1)
    dL_dK = np.random.default_rng(7).normal(size=(5, 5))
    np.testing.assert_allclose(kernel.gradients_X(dL_dK, X), _numeric_gradients_x(kernel, dL_dK, X, None), atol=1e-7)
    assert np.all(kernel.gradients_X_diag(np.ones(5), X) == 0)


def test_no_nan_at_the_epsilon_boundary_and_decay_with_time() -> None:
    kernel = TimeVaryingSE(2, epsilon=1e-12)
    X = np.array([[0.0, 0.5], [1.0, 0.5], [3.0, 0.5]])
    K = kernel.K(X)
    assert np.all(np.isfinite(K))
    np.testing.assert_allclose(K, float(kernel.variance))  # no decay at eps -> 0
    kernel.epsilon = 0.5
    row = kernel.K(X)[0]
    assert row[0] > row[1] > row[2]
    kernel.update_gradients_full(np.ones((3, 3)), X)
    assert np.all(np.isfinite(kernel.gradient))


def test_fixed_factor_splits_the_kernel() -> None:
    X, _ = _data(8, n=7)
    kernel = TimeVaryingSE(4, variance=1.4, lengthscale=0.35, epsilon=0.25)
    fixed, free = np.array([0.3, 0.8]), np.array([0.1, 0.6])
    factor = kernel.fixed_factor(fixed, X)
    expected = kernel.K(np.concatenate([fixed, free])[None, :], X)[0]
    np.testing.assert_allclose(factor * np.exp(-np.sum((X[:, 2:] - free) ** 2, 1) / 0.35), expected, rtol=1e-12)


def test_rejects_a_kernel_without_inputs_beside_time() -> None:
    with pytest.raises(ValueError, match="input_dim"):
        TimeVaryingSE(1)
