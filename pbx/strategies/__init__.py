"""Search strategies: pure ``decide(history, space, rng)`` functions over a population.

``STRATEGIES`` maps the ``--search`` name to the class. The package lists the
strategies, each a module (``pbt``, ``pb2``, ``bgpbt``, ``ipbt``, ...) or a package
of its parts (``fire``); parts that several share sit beside them in packages of
their own (``generational``: BG-PBT's and IPBT's round, restart and stagnation
rule; ``bayes``: the GPs, kernels and bandits of the Bayesian ones), and the
exploit rules of :class:`ExploitExplore` in ``selection``. A new strategy is one
module here with a :class:`Strategy` subclass, added to ``STRATEGIES``; one
written elsewhere joins with :func:`register` (``docs/add-a-strategy.md``).
"""

from pbx.errors import UsageError
from pbx.strategies.base import (Decision, ExploitExplore, Explored, Pending, RoundContext, RunContext, Strategy,
                                 StrategySettings)
from pbx.strategies.bgpbt import BGPBT, BGPBTSettings
from pbx.strategies.bayes.categorical import CAT_EXPS
from pbx.strategies.fire import FIRE, FIRESettings
from pbx.strategies.fixed import Fixed
from pbx.strategies.ipbt import IPBT, IPBTSettings
from pbx.strategies.pb2 import PB2, PB2Settings
from pbx.strategies.pbt import PBT, PBTSettings
from pbx.strategies.random_search import RandomSearch
from pbx.strategies.schedule import Schedule, ScheduleSettings
from pbx.strategies.selection import (SELECTIONS, ExploitRules, Selection, Sigma, Truncation, WinnerTakesAll,
                                     make_selection)

__all__ = [
    "BGPBT", "BGPBTSettings", "CAT_EXPS", "Decision", "ExploitExplore", "ExploitRules", "Explored", "FIRE", "FIRESettings", "IPBT", "IPBTSettings", "Pending", "Fixed",
    "PB2", "PB2Settings", "PBT", "PBTSettings", "RandomSearch", "RoundContext", "RunContext",
    "SELECTIONS", "STRATEGIES", "Schedule", "ScheduleSettings", "Selection", "Sigma", "Strategy", "StrategySettings",
    "Truncation", "WinnerTakesAll",
    "canonical_search", "make_selection", "register", "strategy_class",
]

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (Fixed, RandomSearch, PBT, PB2, FIRE, BGPBT, IPBT,
                                                                    Schedule)}
ALIASES = {"fixed": "none"}
"""The PB2 authors' code spells the baseline ``Fixed``."""


def register(cls: type[Strategy]) -> type[Strategy]:
    """Make ``cls`` a ``--search`` choice under ``cls.name``; returns ``cls`` (usable as a decorator)."""
    taken = next((STRATEGIES[n] for n in STRATEGIES if n.lower() == cls.name.lower()), cls)
    if taken is not cls or cls.name.lower() in ALIASES:
        raise ValueError(f"--search {cls.name!r} is taken by {taken.__name__}")
    STRATEGIES[cls.name] = cls
    return cls


def canonical_search(name: str) -> str:
    """The registry's spelling of a ``--search`` value: any case, and the reference code's ``Fixed``."""
    key = ALIASES.get(str(name).lower(), str(name).lower())
    for registered in STRATEGIES:
        if registered.lower() == key:
            return registered
    raise UsageError(f"unknown --search {name!r}; choose from {', '.join(STRATEGIES)} (any case; Fixed = none)")


def strategy_class(name: str) -> type[Strategy]:
    return STRATEGIES[canonical_search(name)]
