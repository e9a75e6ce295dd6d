"""Search quality on the PBT paper's toy problem: PBT and PB2 must beat the baselines with the same compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pbx.history import read_csv

from conftest import built_once, run_toy

SEEDS = range(5)
SEARCHES = ("none", "random", "PBT", "PB2")
BEST_REACHABLE = 1.1995  # h = (1, 1) throughout 200 steps


def _build(root: Path) -> None:
    for search in SEARCHES:
        for seed in SEEDS:
            run_toy(root / f"{search}-{seed}", search=search, seed=seed)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Toy run folders per strategy and seed; population 4, 200 steps, t_ready 4 (built once a session)."""
    root = built_once(tmp_path_factory, "search-quality", _build)
    return {search: [root / f"{search}-{seed}" for seed in SEEDS] for search in SEARCHES}


@pytest.fixture(scope="module")
def best_q(runs: dict[str, list[Path]]) -> dict[str, float]:
    """Mean over seeds of the best member's final Q."""
    return {search: float(np.mean([read_csv(f / "history.csv").groupby("round")["score"].max().iloc[-1]
                                   for f in folders])) for search, folders in runs.items()}


def test_pb2_explores_with_its_gp_not_its_pbt_fallback(runs: dict[str, list[Path]]) -> None:
    """PBT alone reaches the optimum too: without this a PB2 whose GP always failed would pass."""
    for folder in runs["PB2"]:
        decisions = pd.read_csv(folder / "strategy.csv")
        later = decisions[decisions["round"] >= 1]
        assert len(later) and later["ops"].str.contains("(PB2)", regex=False).mean() >= 0.8, later["ops"].tolist()


@pytest.mark.parametrize("search", ["PBT", "PB2"])
def test_population_strategies_reach_the_optimum(best_q: dict[str, float], search: str) -> None:
    assert best_q[search] >= 1.195, best_q
    assert best_q[search] <= BEST_REACHABLE + 1e-4


@pytest.mark.parametrize("search", ["PBT", "PB2"])
def test_population_strategies_beat_fixed_and_random(best_q: dict[str, float], search: str) -> None:
    assert best_q[search] > best_q["none"] and best_q[search] > best_q["random"], best_q
