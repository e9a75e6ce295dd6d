"""pbx: population-based hyperparameter schedules (PBT, PB2) for reinforcement learning.

``pbx.run(env=..., search=..., **settings)`` trains a population and ``pbx.resume(path)`` continues one
(:mod:`pbx.api`); they are imported on first use, so ``python -m pbx.X`` pays nothing for them.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["Result", "RunStopped", "resume", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pbx import api

        return getattr(api, name)
    raise AttributeError(f"module 'pbx' has no attribute {name!r}")
