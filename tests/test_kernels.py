"""TimeVaryingSE, Overlap and MixedKernel: values, GPy's gradient check, input gradients against finite
differences, positive semi-definiteness, lambda in [0, 1]."""

from __future__ import annotations

import GPy
import numpy as np
import pytest

from pbx.strategies.bayes.kernels import MixedKernel, Overlap, TimeVaryingSE

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


def _mixed_data(seed: int, n: int = 30, n_cat: int = 2, n_cont: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[t, R, category codes (3 and 2 choices), continuous]`` and targets."""
    rng = np.random.default_rng(seed)
    cats = np.column_stack([rng.integers(3 - c, size=n) for c in range(n_cat)])
    X = np.column_stack([rng.uniform(size=(n, 2)), cats, rng.uniform(size=(n, n_cont))]).astype(float)
    return X, rng.normal(size=(n, 1))


def test_overlap_matches_the_formula_and_passes_checkgrad() -> None:
    X, Y = _mixed_data(0)
    inputs = np.column_stack([X[:, 0], X[:, 2:4]])  # t and two categories (time first, as the kernel reads it)
    kernel = Overlap(3, variance=1.5, epsilon=0.3)
    same = np.mean(inputs[:, None, 1:] == inputs[None, :, 1:], axis=2)
    expected = 1.5 * same * 0.7 ** (np.abs(inputs[:, :1] - inputs[:, :1].T) / 2)
    np.testing.assert_allclose(kernel.K(inputs), expected, rtol=1e-12)
    assert GPy.models.GPRegression(inputs, Y, kernel, noise_var=0.2).checkgrad(tolerance=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_mixed_kernel_is_cocabos_mixture_and_passes_checkgrad(seed: int) -> None:
    X, Y = _mixed_data(seed)
    kernel = MixedKernel(2, 2)
    kernel.mix = 0.3
    a, lam = 0.35, 0.3
    kc, kh = kernel.cont.K(X), kernel.cat.K(X)
    np.testing.assert_allclose(kernel.K(X), a * (kc + kh) + lam * kc * kh, rtol=1e-12)
    np.testing.assert_allclose(kernel.Kdiag(X), np.diag(kernel.K(X)), rtol=1e-12)
    model = GPy.models.GPRegression(X, Y, kernel, noise_var=0.2)
    assert model.checkgrad(tolerance=1e-4)
    model.optimize("lbfgsb", max_iters=50)
    assert model.checkgrad(tolerance=1e-3) and np.all(np.isfinite(model.param_array))
    assert 0.0 <= float(kernel.mix.values[0]) <= 1.0


def test_mixed_kernel_is_psd_on_random_inputs_and_lambda_stays_in_0_1() -> None:
    rng = np.random.default_rng(3)
    for seed in range(20):
        X, _ = _mixed_data(seed, n=40)
        kernel = MixedKernel(2, 2)
        kernel.cont.variance, kernel.cat.variance = rng.uniform(0.1, 3.0, 2)
        kernel.cont.lengthscale, kernel.cont.epsilon, kernel.cat.epsilon = rng.uniform(0.01, 0.99), *rng.uniform(0, 0.5, 2)
        kernel.mix = rng.uniform()
        assert np.linalg.eigvalsh(kernel.K(X)).min() > -1e-10
    kernel = MixedKernel(1, 1)
    kernel.optimizer_array = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 50.0])  # the optimiser's space: mix far out
    assert 0.0 <= float(kernel.mix.values[0]) <= 1.0
    kernel.optimizer_array = np.array([0.0, 0.0, 0.0, 0.0, 0.0, -50.0])
    assert 0.0 <= float(kernel.mix.values[0]) <= 1.0


def test_mixed_kernel_input_gradients_and_fixed_parts() -> None:
    X, _ = _mixed_data(4, n=8)
    kernel = MixedKernel(2, 2)
    kernel.mix, kernel.cont.lengthscale, kernel.cont.epsilon = 0.6, 0.3, 0.2
    Z = _mixed_data(5, n=3)[0]
    dL_dK = np.random.default_rng(6).normal(size=(3, 8))
    numeric = _numeric_gradients_x(kernel, dL_dK, Z, X)
    numeric[:, 2:4] = 0.0  # category codes are not coordinates
    np.testing.assert_allclose(kernel.gradients_X(dL_dK, Z, X), numeric, atol=1e-7)
    fixed, free = Z[0, :4], Z[0, 4:]
    offset, factor = kernel.fixed_parts(fixed, X)
    expected = kernel.K(Z[:1], X)[0]
    np.testing.assert_allclose(offset + factor * np.exp(-np.sum((X[:, 4:] - free) ** 2, 1) / 0.3), expected,
                               rtol=1e-12)
