"""PB2's observations: the history's training intervals, each a fixed config's round, before scaling.

Every finished round of a member from round 1 on is one interval: it started from
its parent's state at the end of the round before (that row gives the start time
and score) and ran the member's own config. A round whose state was scored before
it trained (the row's ``start_score``: a generation's first round under BG-PBT and
IPBT, round 0 included) starts at that score instead: a restart may have re-made
the weights since the parent's score was taken. :func:`intervals` turns the history
into these rows; :class:`Intervals` holds them for the GP fit and EXP3's replay
(:mod:`pbx.strategies.pb2`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from pbx.history import History, skipped
from pbx.space import Continuous, Space
from pbx.strategies.bayes.categorical import codes


@dataclass(frozen=True)
class Intervals:
    """Training intervals with a fixed config, oldest first: the GP's data before scaling."""

    t: np.ndarray
    """(n,) the interval's time stamp: the cumulative steps at its start (:func:`intervals`; BG-PBT and IPBT may
    stamp it at its end instead, :attr:`end`)."""
    reward: np.ndarray
    """(n,) score at the interval's start (``R_before``)."""
    unit: np.ndarray
    """(n, d) the interval's continuous hyperparameters in the unit cube."""
    rate: np.ndarray
    """(n,) improvement rate ``(R_after - R_before) / steps``."""
    round: np.ndarray
    """(n,) the round the interval was trained in."""
    cats: np.ndarray
    """(n, m) the interval's categorical hyperparameters as choice indices (:func:`categorical.codes`)."""
    explored: np.ndarray
    """(n,) whether the interval's config was chosen by an explore at its start (EXP3's ``drawn`` plays)."""
    start_scored: np.ndarray
    """(n,) whether the interval starts at its own row's ``start_score`` (a score taken before the round trained)
    rather than at its parent's score of the round before."""
    end: np.ndarray
    """(n,) cumulative steps at the interval's end (its row's ``steps``)."""
    member: np.ndarray
    """(n,) the member whose row the interval is."""

    def where(self, keep: np.ndarray) -> Intervals:
        """The intervals ``keep`` (a boolean mask) selects."""
        return Intervals(*(getattr(self, f.name)[keep] for f in fields(self)))


def intervals(history: History, space: Space, window: int) -> Intervals:
    """The most recent ``window`` intervals with a finite improvement rate (none to or from a carried score).

    Row ``(m, r)``, ``r >= 1``, ran with its own config from the end-of-round state
    of ``(parent, r - 1)``, so that row gives the start time and score; its own ``start_score``, when it has
    one, is the start score instead (round 0's rows have no other, and start at 0 steps).
    """
    # A carried score (no episode ended in the round, or the member skipped it: pbx.history) says nothing of the
    # round's improvement: no rate ends at one (a skipped round, no steps, would divide by zero). A skipped
    # round's score is the score of exactly the state the next round starts from, so a rate may start at it (a
    # rollout of twice t_ready skips every other round: each round it trains follows a skipped one); a score
    # carried after training (no episode ended) is stale, and starts none.
    frame, carried = history.frame, history.frame["carried"]
    frame = frame.assign(start=frame["score"].where(~carried | skipped(frame)), score=frame["score"].where(~carried))
    start = frame[["member", "round", "steps", "start"]].rename(
        columns={"member": "parent", "steps": "t", "start": "before"})
    start["round"] += 1
    rows = frame.drop(columns="start").merge(start, on=["parent", "round"], how="left")
    rows = rows.sort_values(["round", "member"], kind="stable")
    scored = rows["start_score"].notna().to_numpy(bool)
    rows["before"] = rows["before"].where(~scored, rows["start_score"])
    rows["t"] = rows["t"].where(rows["round"] > 0, 0)
    rate = ((rows["score"] - rows["before"]) / (rows["steps"] - rows["t"])).to_numpy(float)
    unit = unit_columns(rows, space)
    usable = np.flatnonzero(np.isfinite(rate) & np.isfinite(rows["before"].to_numpy(float))
                            & np.all(np.isfinite(unit), 1))[-window:]
    return Intervals(rows["t"].to_numpy(float)[usable], rows["before"].to_numpy(float)[usable],
                     unit[usable], rate[usable], rows["round"].to_numpy(int)[usable],
                     codes(space, rows, len(rows))[usable], rows["explored"].to_numpy(bool)[usable],
                     scored[usable], rows["steps"].to_numpy(float)[usable], rows["member"].to_numpy(int)[usable])


def unit_columns(rows: pd.DataFrame, space: Space) -> np.ndarray:
    """(n, d) the continuous hyperparameters of ``rows`` in the unit cube, in ``space.to_unit`` order.

    Each distinct value is mapped once: a config lasts many rounds, so values repeat.
    """
    columns = []
    for name in space.continuous:
        param = space.params[name]
        assert isinstance(param, Continuous)  # space.continuous lists only those
        values, index = np.unique(rows[name].to_numpy(float), return_inverse=True)
        columns.append(np.array([param.to_unit(v) if np.isfinite(v) else np.nan for v in values])[index])
    return np.column_stack(columns) if columns else np.zeros((len(rows), 0))
