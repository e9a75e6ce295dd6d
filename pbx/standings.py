"""Who stands where in a history: the ranking every strategy and report shares (its NaN and tie policy), the
result members, each round's best row, the generations' ends, and the row ``--member`` names.

Read-only questions over a history table (:mod:`pbx.history` holds the table itself, its file and its rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pbx.errors import UsageError
from pbx.history import RESULT_ROLE, restart_marks


def rank_best_first(scores: np.ndarray) -> np.ndarray:
    """Positions from best to worst score.

    NaN policy: a NaN score (diverged, or no finished episode to score) ranks
    below every finite score, so it is the first replaced and never a donor
    while a finite score exists. Ties keep their order (lowest member first),
    so rankings are deterministic.
    """
    keyed = np.where(np.isnan(scores), -np.inf, scores)
    return np.argsort(-keyed, kind="stable")


def results(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of members whose scores are results (:data:`RESULT_ROLE`): not FIRE's evaluators and
    parent sub-populations, which train for the results' sake. A table without roles is all results."""
    return frame[frame["role"] == RESULT_ROLE] if "role" in frame else frame


def best_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per round: the best result member's (by train score, with :func:`rank_best_first`'s policy). A tie
    goes to a row whose own round earned its score (not ``carried``), then to the lowest id: a member that skipped
    the round after an exploit carries its donor's score beside a config that never earned it."""
    order = ["round", "carried", "member"] if "carried" in frame else ["round", "member"]
    ordered = results(frame).sort_values(order, kind="stable")
    picks = [group.index[rank_best_first(group["score"].to_numpy(dtype=float))[0]]
             for _, group in ordered.groupby("round", sort=True)]
    return frame.loc[picks].reset_index(drop=True)


def generation_ends(frame: pd.DataFrame) -> list[int]:
    """The rounds that ended a generation: each round after which a restart round began (BG-PBT, IPBT)."""
    return [r - 1 for r, restart in enumerate(restart_marks(frame)) if restart and r > 0]


def member_row(frame: pd.DataFrame, member: str | int) -> pd.Series:
    """The row of ``member`` (``--member``): a member id, or ``best``, the best member on train score, in the
    last round; or ``kept``, the best on train score among each generation's best member (kept at the restart
    that ended it: :meth:`pbx.run_dir.RunDir.keep`) and the last round's, the newest on a tie (a run that never
    restarted: ``best``). The test set never selects. A :class:`UsageError` names a member the run does not
    have."""
    last = frame[frame["round"] == frame["round"].max()]
    if str(member) == "best":
        return best_rows(last).iloc[0]
    if str(member) == "kept":
        newest_first = best_rows(frame[frame["round"].isin([*generation_ends(frame), last["round"].iloc[0]])]).iloc[::-1]
        return newest_first.iloc[rank_best_first(newest_first["score"].to_numpy(dtype=float))[0]]
    ids = last["member"].astype(int).tolist()
    # ASCII digits only: str.isdigit() passes "²" (which int() refuses) and "٣" (which int() reads as 3)
    if not (str(member).isascii() and str(member).isdigit()) or int(member) not in ids:
        raise UsageError(f"--member must be best, kept or a member of the run ({min(ids)} to {max(ids)}), "
                         f"got {member!r}")
    return last[last["member"] == int(member)].iloc[0]
