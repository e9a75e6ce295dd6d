"""pbx: population-based hyperparameter schedules (PBT, PB2) for reinforcement learning.

``pbx.run(env=..., search=..., **settings)`` trains a population, ``pbx.resume(path)`` continues one and
``pbx.load(path)`` reads one back, finished, stopped or still training (:mod:`pbx.api`); they are imported on
first use, so ``python -m pbx.X`` pays nothing for them. Their errors are here too: ``pbx.UsageError`` for bad
input (the commands' one ``error:`` line and exit code 2) and ``pbx.RunFailed`` for a run that failed on one of
its processes, ``pbx.RunStopped`` for one stopped inside a round by its time limit or a signal with everything
saved (``pbx.resume`` goes on); ``except pbx.UsageError:`` costs no import of the API.
"""

import importlib
from typing import Any

__version__ = "0.1.0"
_PUBLIC = {"Result": "pbx.api", "load": "pbx.api", "resume": "pbx.api", "run": "pbx.api",
           "UsageError": "pbx.errors", "RunFailed": "pbx.runners.loop", "RunStopped": "pbx.runners.stopping"}
"""Each public name and the module it lives in, imported when the name is first asked for."""
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'pbx' has no attribute {name!r}")
