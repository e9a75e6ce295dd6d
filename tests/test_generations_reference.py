"""BG-PBT and IPBT decide as the IPBT authors' code does (``AwesomeLemon/IPBT``, ``algo/bgpbt.py``, ``algo/ipbt.py``,
``algo/bgpbt_utils.py``), point by point, on synthetic histories with real GP fits; pbx's own choices are named
settings, off by default."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from pbx.history import History, Row
from pbx.strategies.generations import copula
from conftest import toy_config


def _history(scores: list[list[float]], explored: list[list[bool]] | None = None,
             configs: list[list[dict[str, float]]] | None = None, steps: int = 10) -> History:
    """Rounds of the toy's members (``h0``, ``h1``), each member its own parent, with these scores."""
    rows = []
    for r, round_scores in enumerate(scores):
        for m, score in enumerate(round_scores):
            config = configs[r][m] if configs else {"h0": 0.5, "h1": 0.5}
            rows.append(Row(member=m, round=r, steps=(r + 1) * steps, wall_s=0.0, score=score, test_score=np.nan,
                            parent=m, explored=bool(explored[r][m]) if explored else False, config=config))
    return History(["h0", "h1"]).with_rows(rows)


def test_tied_improvement_rates_take_the_lowest_rank_as_the_reference_ranks_the_negated_rates() -> None:
    assert copula(np.array([3.0, 1.0, 1.0])) == pytest.approx(norm.ppf([3 / 4, 1 / 4, 1 / 4]))


def test_an_explored_member_tied_with_the_best_is_a_trust_region_success() -> None:
    """Member 0 (kept) and member 1 (explored) share the best score for 3 rounds: the references count a success
    each round (``np.max(bo_agents.Reward) == best_reward``), so the region grows from 0.4 to 0.6."""
    strategy = toy_config(search="BGPBT", pop_size=2).build_strategy()
    history = _history([[1.0, 0.0]] + [[float(r), float(r)] for r in range(1, 4)],
                       explored=[[False, False]] + [[False, True]] * 3)
    assert strategy.trust_length(history) == pytest.approx(0.6)