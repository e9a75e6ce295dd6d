"""FIRE PBT (Dalibard & Jaderberg, 2021, arXiv:2109.13800): :mod:`~pbx.strategies.fire.strategy` holds the
strategy, :mod:`~pbx.strategies.fire.curves` the history as it reads it (curves, evaluations, how two compare)."""

from pbx.strategies.fire.strategy import FIRE, FIRESettings

__all__ = ["FIRE", "FIRESettings"]
