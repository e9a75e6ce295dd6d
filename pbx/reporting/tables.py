"""Tables in the two forms a paper needs: Markdown and booktabs LaTeX, from one list of rows.

A :class:`Table` is data (a title, a header, rows of text cells, notes); the
writers only lay it out, so the Markdown and the LaTeX of a report cannot
disagree. The cell texts are made here too: an estimate with its interval and its
number of runs (:func:`estimate_cell`), and numbers with as many digits as tell
them apart (:func:`interval_text`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from pbx.reporting.stats import Estimate


@dataclass(frozen=True)
class Table:
    """One table: ``header`` over ``rows`` (text cells), ``groups`` spanning header columns in LaTeX."""

    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    """Paragraphs under the table (the first a caution, where there is one)."""
    groups: list[tuple[str, int]] = field(default_factory=list)
    """(label, columns) spanning the header after its first ``lead`` columns, for a two-level LaTeX header."""
    lead: int = 1


def markdown(table: Table, level: int = 1) -> str:
    """The table under a ``#`` heading of ``level``, its notes as paragraphs."""
    return "\n".join([f"{'#' * level} {table.title}", "", markdown_table(table.header, table.rows), "",
                      *(line for note in table.notes for line in (note, "")), ])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header)] + rows
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def latex(table: Table, label: str) -> str:
    """A booktabs ``table`` environment; the notes become its caption."""
    columns = "l" * table.lead + "c" * (len(table.header) - table.lead)
    head = []
    if table.groups:
        spans, rules, start = [], [], table.lead + 1
        for name, width in table.groups:
            spans.append(f"\\multicolumn{{{width}}}{{c}}{{{tex(name)}}}")
            rules.append(f"\\cmidrule(lr){{{start}-{start + width - 1}}}")
            start += width
        head = [" & " * table.lead + " & ".join(spans) + " \\\\", "".join(rules)]
    caption = " ".join([table.title + "."] + table.notes).replace("`", "")
    return "\n".join([
        "\\begin{table}[t]", "\\centering", f"\\begin{{tabular}}{{{columns}}}", "\\toprule", *head,
        " & ".join(map(tex, table.header)) + " \\\\", "\\midrule",
        *(" & ".join(map(tex, row)) + " \\\\" for row in table.rows),
        "\\bottomrule", "\\end{tabular}", f"\\caption{{{tex(caption)}}}",
        f"\\label{{tab:pbx-{re.sub('[^A-Za-z0-9]+', '-', label)}}}", "\\end{table}", "",
    ])


def latex_document(tables: list[tuple[Table, str]], subject: str) -> str:
    """Several :func:`latex` tables, one file, with a comment saying what made it."""
    return "\n".join([f"% python -m pbx.report: {subject}; needs \\usepackage{{booktabs}}",
                      *(latex(table, label) for table, label in tables)])


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": "$<$",
                ">": "$>$", "±": r"$\pm$", "×": r"$\times$"}


def tex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped."""
    return "".join(_TEX_ESCAPES.get(char, char) for char in text)


def estimate_cell(est: Estimate | None, runs: int | None = None) -> str:
    """``value [low, high] (n=R)``: the estimate, its 95% interval and the runs (per game, ``n=R×G`` over G
    games) it rests on; ``value (n=2, no CI)`` when the runs are too few for an interval; ``n/a`` for none;
    ``(n=m of R)`` where only m of the group's ``runs`` have the score."""
    if est is None:
        return "n/a"
    count = f"{est.runs} of {runs}" if runs is not None and est.runs < runs else str(est.runs)
    count += f"×{est.tasks}" if est.tasks > 1 else ""
    if not est.has_interval:
        return f"{fmt(est.value)} (n={count}, no CI)"
    return f"{interval_text(est.value, est.low, est.high)} (n={count})"


def interval_text(value: float, low: float, high: float) -> str:
    """``value [low, high]`` with 4 significant digits, more (up to 7) where 4 would print different numbers
    alike: near a ceiling (the toy's 1.2) strategies differ in the 4th digit and beyond."""
    for digits in range(4, 8):
        texts = [f"{v:.{digits}g}" for v in (value, low, high)]
        if len(set(texts)) == len({round(v, 12) for v in (value, low, high)}):
            break
    return f"{texts[0]} [{texts[1]}, {texts[2]}]"


def mean_std(values: np.ndarray) -> str:
    """``"mean ± std"`` over the finite values (sample std), noting how many of them there are if not all."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return "n/a"
    text = fmt(finite.mean()) + (f" ± {fmt(finite.std(ddof=1))}" if len(finite) > 1 else "")
    return text + (f" ({len(finite)} of {len(values)})" if len(finite) < len(values) else "")


def fmt(value: object) -> str:
    """A number with 4 significant digits (``n/a`` for NaN); anything else as text."""
    if isinstance(value, (float, np.floating)):
        return "n/a" if np.isnan(value) else f"{value:.4g}"
    return str(value)
