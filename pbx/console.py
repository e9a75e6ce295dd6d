"""What the user sees while a run trains: one progress bar and one line per round.

The bar counts env steps of the whole population (pop_size x max_budget) and
shows the current best score: on a terminal tqdm's text bar, in a Jupyter
notebook its widget (``tqdm.auto`` picks; without ``ipywidgets`` the text one).
Where it cannot show (CI logs, pipes, a notebook without widgets, whose stderr is no
terminal) it turns itself off, and the round lines are printed alone, with one more
as a round begins that is expected to take over :data:`LONG_ROUND_S`: as long as the
round before it took (a resumed run's too, from the history), so that a long round is
not silent. A new run's first round has no measure; the run's start line, printed
just before it, says what it trains.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Mapping, Sequence

import pandas as pd
from tqdm.auto import tqdm

from pbx.standings import best_rows
from pbx.strategies import Decision


LONG_ROUND_S = 60.0
"""A round expected to take longer than this gets a line as it begins where no bar shows."""


def counted(n: int, noun: str) -> str:
    """``1 member``, ``4 members``: a count with its noun in the number it takes."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def format_score(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4g}"


def round_line(round_: int, rounds: int, rows: pd.DataFrame, decisions: Sequence[Decision],
               notes: Mapping[int, str] | None = None) -> str:
    """``round 3/50 | steps 16 | best 0.71 (m2) | mean 0.55 | test 0.70 | m0<-m2 h0 * 1.2``.

    ``test`` is the test score of the best member on *train* score (the test set never
    selects). ``notes`` say why a member's score is NaN; a round with no finite score
    says that nothing could be exploited.
    """
    scores = rows["score"]
    best = best_rows(rows).iloc[0]
    parts = [
        f"round {round_ + 1}/{rounds}",
        f"steps {int(rows['steps'].max()):,}",
        f"best {format_score(float(best['score']))} (m{int(best['member'])})",
        f"mean {format_score(float(scores.mean()))}",
    ]
    if rows["test_score"].notna().any():
        parts.append(f"test {format_score(float(best['test_score']))}")
    for member, note in sorted((notes or {}).items()):
        parts.append(f"m{member} no score: {note}")
    if any(d.restart for d in decisions):
        parts.append("restart: a new generation")
    copies = [f"m{d.member}<-m{d.donor} {', '.join(d.ops)}".rstrip() for d in decisions if d.changes]
    if copies:
        parts.append("; ".join(copies))
    elif decisions and not scores.notna().any():
        parts.append("no exploit: no member has a score")
    else:
        parts.append("no copies")
    return " | ".join(parts)


class Console:
    def __init__(self, total_steps: int, done_steps: int, desc: str) -> None:
        self._bar = tqdm(total=total_steps, initial=done_steps, desc=desc, unit="step", unit_scale=True,
                         dynamic_ncols=True, disable=None, file=sys.stderr, leave=True)

    def advance(self, steps: int) -> None:
        self._bar.update(steps)

    def best(self, score: float) -> None:
        self._bar.set_postfix_str(f"best {format_score(score)}", refresh=False)

    def round_starts(self, round_: int, rounds: int, expected_s: float | None) -> None:
        """Round ``round_`` (0-based) of ``rounds`` begins, expected to take ``expected_s`` seconds (None: no
        measure): where the bar is off and that is over :data:`LONG_ROUND_S`, a line says when its own line is due.
        """
        if self._bar.disable and expected_s is not None and expected_s > LONG_ROUND_S:
            due = time.strftime("%H:%M", time.localtime(time.time() + expected_s))
            self.line(f"round {round_ + 1}/{rounds} begins at {time.strftime('%H:%M')}; round {round_} took "
                      f"{tqdm.format_interval(expected_s)}, so its line is due near {due}")

    def line(self, text: str) -> None:
        """Print above the bar (or plainly when the bar is off)."""
        self._bar.write(text, file=sys.stdout)

    def close(self) -> None:
        self._bar.close()
