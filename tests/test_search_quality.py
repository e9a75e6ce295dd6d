"""Search quality on the PBT paper's toy problem: PBT and PB2 must beat the baselines with the same compute."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_toy

SEEDS = range(5)
BEST_REACHABLE = 1.1995  # h = (1, 1) throughout 200 steps


@pytest.fixture(scope="module")
def best_q(tmp_path_factory) -> dict[str, float]:
    """Mean over seeds of the best member's final Q; population 4, 200 steps, t_ready 4."""
    out = {}
    for search in ("none", "random", "PBT", "PB2"):
        finals = []
        for seed in SEEDS:
            folder = tmp_path_factory.mktemp(f"{search}-{seed}")
            finals.append(run_toy(folder, search=search, seed=seed).latest()["score"].max())
        out[search] = float(np.mean(finals))
    return out


@pytest.mark.parametrize("search", ["PBT", "PB2"])
def test_population_strategies_reach_the_optimum(best_q: dict[str, float], search: str) -> None:
    assert best_q[search] >= 1.195, best_q
    assert best_q[search] <= BEST_REACHABLE + 1e-4


@pytest.mark.parametrize("search", ["PBT", "PB2"])
def test_population_strategies_beat_fixed_and_random(best_q: dict[str, float], search: str) -> None:
    assert best_q[search] > best_q["none"] and best_q[search] > best_q["random"], best_q
