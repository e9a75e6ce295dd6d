"""BG-PBT: Bayesian generational PBT (Wan et al., AutoML-Conf 2022), in the form the IPBT paper ran it.

The form of ``AwesomeLemon/IPBT``'s ``algo/bgpbt.py`` with ``reinit_weights_strategy:
copy`` (its default; the architecture search and distillation of ``xingchenwan/bgpbt``
are not built):

- the first population is ``init_factor`` (3) times ``pop_size``, trained one round,
  its best ``pop_size`` kept;
- each round, PBT's truncation exploit (quantile 0.125: the reference's default, one
  member of 8; :mod:`pbx.strategies.generational.base`) and BO explore in a trust region
  around the donor's config (:mod:`pbx.strategies.generational.trust_region`);
- a generation that went ``patience`` (15) rounds in a row without a round best
  equal to its best so far restarts: every member keeps its weights and takes a new
  config, the best of many random ones by an auxiliary GP on each finished
  generation's best (the reference's global restart,
  :meth:`~pbx.strategies.generational.restart.RestartBO.global_configs`; ``restart_search:
  local`` is pbx's earlier search near the best member,
  :meth:`~pbx.strategies.generational.restart.RestartBO.across_generations`); the trust
  region and the BO's data start again with the new generation.

Departures from the reference are listed in docs/algorithms.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbx.history import History
from pbx.settings import check_choices
from pbx.space import Space
from pbx.strategies.base import Decision
from pbx.strategies.generational.base import GenerationalSettings, generation_start
from pbx.strategies.generational.restart import RestartBO

RESTART_SEARCHES = ("global", "local")
"""The values of :attr:`BGPBTSettings.restart_search`."""


@dataclass
class BGPBTSettings(GenerationalSettings):
    """BG-PBT's settings; their defaults are the reference's (``config/algo/bgpbt.yaml``)."""

    init_factor: int = 3
    patience: int = 15
    """Rounds in a row without the generation's best score before a restart."""
    tr_collapse: str = "restart"
    tr_success: str = "explored"
    """The original BG-PBT's (``xingchenwan/bgpbt`` tags a kept member's row ``'previous'``), whose collapse rule
    (``tr_collapse``) needs a region that can shrink; ``every`` is the IPBT authors' BG-PBT, where ``L`` only
    grows (docs/algorithms.md)."""
    lengthscale_cap: float = 1.69
    lengthscale_per_input: bool = True
    """BG-PBT's GP has one lengthscale (no ARD), which the authors cap at ``sqrt(inputs)``: ``(1.299 x
    sqrt(n))^2`` is 1.69 n as pbx's squared exponential's."""
    last_rounds: str = "extend"
    """How the plan meets the budget's end: ``extend``, the reference's (``algo/base.py`` ``adjust_step_size``),
    the round after which less than a round would be left takes the rest; ``cut``, pbx's, a short last round."""
    restart_search: str = "global"
    """Where a restart's configs come from: ``global``, the reference's, the best ``pop_size`` of 10 x the first
    population's size random configs by UCB (1.96) on an auxiliary GP fit on each finished generation's predicted
    best (:meth:`~pbx.strategies.generational.restart.RestartBO.global_configs`), or ``local``, pbx's, UCB on the GP
    across generations in a box of side ``tr_init`` around the best member's config (IPBT's search,
    :meth:`~pbx.strategies.generational.restart.RestartBO.across_generations`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choices(self, last_rounds=("extend", "cut"), restart_search=RESTART_SEARCHES)


class BGPBT(RestartBO[BGPBTSettings]):
    name = "BGPBT"
    settings_cls = BGPBTSettings

    @classmethod
    def run_defaults(cls) -> dict[str, object]:
        return {"quantile": 0.125}

    @classmethod
    def last_rounds(cls, settings: BGPBTSettings) -> str:
        return settings.last_rounds

    def restart_due(self, history: History) -> bool:
        frame = history.frame
        start = generation_start(history)
        collapses = set(self.trust_region(frame, start)[1])
        bests = frame[frame["round"] >= start].groupby("round", sort=True)["score"].max()
        record, fails = -np.inf, 0
        for r, best in bests.items():
            if r in collapses:
                # the reference's collapse moves its data on (n_distills) before this round's test, which then
                # finds none (a fail); the new record starts at the scores its explores carry over (their donors')
                after = frame[(frame["round"] == r + 1) & frame["explored"]]["parent"]
                now = frame[frame["round"] == r].set_index("member")["score"]
                carried = now.reindex(after.unique()).to_numpy(float)
                record, fails = (np.nanmax(carried) if np.isfinite(carried).any() else -np.inf), fails + 1
                continue
            record = max(record, best) if np.isfinite(best) else record
            fails = 0 if np.isfinite(best) and best >= record else fails + 1
        return fails >= self.settings.patience

    def restart(self, history: History, space: Space, kept: dict[int, int],
                rng: np.random.Generator) -> list[Decision]:
        if self.settings.restart_search == "global":
            configs, op = self.global_configs(history, space, len(kept), rng), "hps by the global restart's GP"
        else:
            configs, op = self.across_generations(history, space, len(kept), self.latest_centre(history), [], rng), \
                "hps by the GP across generations"
        return [Decision(member, source, config, ("restart", op), explored=True, restart=True)
                for (member, source), config in zip(kept.items(), configs)]
