"""Search strategies: pure ``decide(history, space, rng)`` functions over a population.

``STRATEGIES`` maps the ``--search`` name to the class. A new strategy is one
file in this package with a :class:`Strategy` subclass, added here.
"""

from pbx.errors import UsageError
from pbx.strategies.base import (Decision, ExploitExplore, Explored, Pending, RoundContext, RunContext, Strategy,
                                 StrategySettings)
from pbx.strategies.categorical import CAT_EXPS
from pbx.strategies.fixed import Fixed
from pbx.strategies.pb2 import PB2, PB2Settings
from pbx.strategies.pbt import PBT, PBTSettings
from pbx.strategies.random_search import RandomSearch
from pbx.strategies.selection import SELECTIONS, Selection, Truncation, WinnerTakesAll, make_selection

__all__ = [
    "CAT_EXPS", "Decision", "ExploitExplore", "Explored", "Pending", "Fixed", "PB2", "PB2Settings", "PBT", "PBTSettings", "RandomSearch", "RoundContext",
    "RunContext",
    "SELECTIONS", "STRATEGIES", "Selection", "Strategy", "StrategySettings", "Truncation", "WinnerTakesAll",
    "canonical_search", "make_selection", "strategy_class",
]

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (Fixed, RandomSearch, PBT, PB2)}
ALIASES = {"fixed": "none"}
"""The PB2 authors' code spells the baseline ``Fixed``."""


def canonical_search(name: str) -> str:
    """The registry's spelling of a ``--search`` value: any case, and the reference code's ``Fixed``."""
    key = ALIASES.get(str(name).lower(), str(name).lower())
    for registered in STRATEGIES:
        if registered.lower() == key:
            return registered
    raise UsageError(f"unknown --search {name!r}; choose from {', '.join(STRATEGIES)} (any case; Fixed = none)")


def strategy_class(name: str) -> type[Strategy]:
    return STRATEGIES[canonical_search(name)]
