"""Figures for :mod:`pbx.reporting`: member curves with their exploit lineage, and strategy comparisons.

This module only draws; reading runs and choosing which member counts as the
best is the rest of :mod:`pbx.reporting`'s job. Figures are meant for papers: axes labelled in
env steps, titles naming env and strategy, legends outside the data, 150 dpi
PNG. Each figure is a bare :class:`~matplotlib.figure.Figure` on an Agg canvas,
so nothing needs a display and no pyplot state leaks between figures.

Lineage: after an exploit, a member's curve restarts from the point of the donor
it copied (the donor's value in the previous round), so the plot shows which
member each one descends from, as in the PBT and PB2 papers.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import BoundaryNorm, Colormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter

from pbx.space import Continuous, Param, Space, shown
from pbx.reporting.stats import Estimate

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # seaborn, imported by rliable's plots, warns about its own dependencies
    from rliable import plot_utils

DPI = 150
STEPS_LABEL = "env steps (per member)"
MAX_LEGEND_MEMBERS = 12
"""Above this many members a colour bar replaces the per-member legend, which would not fit."""
CATEGORY_SPREAD = 0.3
"""Members on a categorical axis are offset within this band so their lines do not hide each other."""
EXPLOIT_MARKER = {"marker": ">", "markersize": 6, "markeredgecolor": "black", "markeredgewidth": 0.6}


@dataclass(frozen=True)
class Band:
    """One strategy's mean curve over runs, with the shaded spread (``low`` to ``high``)."""

    strategy: str
    spread: str
    """How many runs and what the shading is, for the legend (``"n=3, mean ± std"``)."""
    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


@dataclass(frozen=True)
class _Palette:
    """One colour per member, the same in every panel of a figure."""

    members: list[int]
    cmap: Colormap

    @classmethod
    def of(cls, frame: pd.DataFrame) -> _Palette:
        members = sorted(int(m) for m in frame["member"].unique())
        name = "tab10" if len(members) <= 10 else "tab20" if len(members) <= 20 else "viridis"
        return cls(members, colormaps[name].resampled(len(members)))

    def colour(self, member: int) -> tuple[float, ...]:
        return self.cmap(self.members.index(member))


@dataclass
class _Segment:
    """A stretch of one member's curve between exploits; ``branched`` when it starts at a donor's point."""

    member: int
    steps: list[float]
    values: list[float]
    branched: bool


def plot_member_scores(frame: pd.DataFrame, title: str, path: Path, curves: pd.DataFrame | None = None) -> Path:
    """Train and test score of every member vs env steps; a test panel with no scores says so. Where members
    keep a running mean of their last 100 training episodes (``score100``), a third panel draws it: the number
    to set beside train-procgen's published curves.

    ``curves``: the scores taken within rounds (:mod:`pbx.curves`); where a round has some, the train panel
    draws them in place of the round's one score, so the curve shows how the member learned inside it.
    """
    panels = [("score", "train score"), ("test_score", "test score")]
    if "score100" in frame and frame["score100"].notna().any():
        panels.append(("score100", "train, mean of last 100 episodes"))
    fig, axes = _figure(ncols=len(panels), nrows=1, width=5.5 * len(panels), height=4)
    palette = _Palette.of(frame)
    within = {} if curves is None else {
        (int(m), int(r)): list(zip(group["steps"].astype(float), group["score"].astype(float)))
        for (m, r), group in curves.groupby(["member", "round"])}
    for ax, (column, label) in zip(axes, panels):
        if frame[column].isna().all() and not (column == "score" and within):
            _mark_empty(ax, f"not evaluated\n({column} is NaN throughout)")
        else:
            segments = _segments(frame, frame[column], from_zero=False, within=within if column == "score" else {})
            _draw_lineage(ax, segments, palette, drawstyle="default")
        _mark_restarts(ax, frame)
        _label_axes(ax, label, label)
    _member_legend(fig, axes, palette)
    fig.suptitle(title)
    return _save(fig, path)


def plot_schedules(frame: pd.DataFrame, space: Space, title: str, path: Path) -> Path:
    """Each hyperparameter's value per member vs env steps (the config used during each round)."""
    fig, axes = _figure(ncols=1, nrows=len(space.names), width=10, height=1.2 + 2.2 * len(space.names))
    palette = _Palette.of(frame)
    for ax, name in zip(axes, space.names):
        values = _schedule_axis(ax, frame, name, space.params[name], palette.members)
        # A row's config holds from the previous round's end to this row's steps: a step drawn "pre".
        _draw_lineage(ax, _segments(frame, values, from_zero=True), palette, drawstyle="steps-pre")
        _mark_restarts(ax, frame)
    for ax in axes[:-1]:
        ax.set_xlabel("")
    _member_legend(fig, axes, palette)
    fig.suptitle(title)
    return _save(fig, path)


def plot_comparison(panels: Sequence[tuple[str, Sequence[Band]]], title: str, path: Path) -> Path:
    """One panel per ``(metric label, bands)``: each strategy's mean curve with its spread shaded."""
    fig, axes = _figure(ncols=len(panels), nrows=1, width=5.5 * len(panels), height=4.2)
    # One colour per strategy, the same in every panel even where a strategy has no scores.
    names = list(dict.fromkeys(band.strategy for _, bands in panels for band in bands))
    for ax, (metric, bands) in zip(axes, panels):
        for band in bands:
            colour = f"C{names.index(band.strategy) % 10}"
            label = f"{band.strategy} ({band.spread})"
            ax.plot(band.steps, band.mean, color=colour, linewidth=1.8, label=label)
            ax.fill_between(band.steps, band.low, band.high, color=colour, alpha=0.2, linewidth=0)
        if bands:
            ax.legend(fontsize="small", loc="best")
        else:
            _mark_empty(ax, "no runs with this score")
        _label_axes(ax, metric, metric)
    fig.suptitle(title)
    return _save(fig, path)


@dataclass(frozen=True)
class Profile:
    """One score's performance profiles: per strategy the fraction of runs above each threshold tau."""

    metric: str
    taus: np.ndarray
    profiles: Mapping[str, np.ndarray]
    cis: Mapping[str, np.ndarray]
    """(2, len(taus)) band per strategy; strategies with too few runs have none."""


def plot_profiles(panels: Sequence[Profile], strategies: Sequence[str], title: str, path: Path) -> Path:
    """Performance profiles (rliable's ``plot_performance_profiles``), one panel per score, CIs shaded."""
    fig, axes = _figure(ncols=len(panels), nrows=1, width=5.5 * len(panels), height=4.2, sharex=False)
    for ax, panel in zip(axes, panels):
        if not panel.profiles:
            _mark_empty(ax, "no runs with this score")
            ax.set_title(panel.metric)
            continue
        plot_utils.plot_performance_profiles(
            dict(panel.profiles), panel.taus, performance_profile_cis=dict(panel.cis),
            colors=_strategy_colours(strategies), ax=ax, xlabel=f"{panel.metric} (τ)",
            ylabel="fraction of runs with score > τ", labelsize="medium", ticklabelsize="small")
        ax.set_title(panel.metric)
        ax.legend(fontsize="small", loc="best")
    fig.suptitle(title)
    return _save(fig, path)


def plot_intervals(panels: Sequence[tuple[str, Mapping[str, Estimate], tuple[float, float] | None]],
                   strategies: Sequence[str], ncols: int, title: str, path: Path) -> Path:
    """Point estimates with their 95% CIs (rliable's interval plot), one panel per ``(metric, strategy ->
    estimate, x range or None)``, ``ncols`` to a row; an estimate without an interval is a hollow marker."""
    nrows = -(-len(panels) // ncols)
    fig, axes = _figure(ncols=ncols, nrows=nrows, width=3.4 * ncols, height=0.6 + nrows * (0.9 + 0.4 * len(strategies)),
                        sharex=False)
    colours = _strategy_colours(strategies)
    for ax, (metric, estimates, xlim) in zip(axes, panels):
        for y, name in enumerate(strategies):
            if name not in estimates:
                continue
            est = estimates[name]
            if est.has_interval:
                ax.barh(y, est.high - est.low, left=est.low, height=0.6, color=colours[name], alpha=0.75)
            ax.plot(est.value, y, marker="|" if est.has_interval else "o", markersize=14 if est.has_interval else 6,
                    color="black" if est.has_interval else colours[name], markerfacecolor="none", linestyle="none")
        ax.set_yticks(range(len(strategies)), strategies)
        ax.set_ylim(len(strategies) - 0.5, -0.5)
        ax.use_sticky_edges = False  # a zero-width interval at the data's edge would sit on the frame
        ax.margins(x=0.08)
        if xlim is not None:
            ax.set_xlim(*xlim)
        ax.set_title(metric, fontsize="medium")
        ax.grid(axis="x", alpha=0.3)
        if not estimates:
            _mark_empty(ax, "no runs with this score")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    return _save(fig, path)


def _strategy_colours(strategies: Sequence[str]) -> dict[str, str]:
    """The colour of each strategy, as :func:`plot_comparison` gives them when every strategy has a curve."""
    return {name: f"C{i % 10}" for i, name in enumerate(strategies)}


def _figure(ncols: int, nrows: int, width: float, height: float,
            sharex: bool = True) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, sharex=sharex, squeeze=False)
    return fig, list(axes.ravel())


def _save(fig: Figure, path: Path) -> Path:
    """Write the figure; matplotlib's note that long labels left constrained layout no room is dropped
    (the figure is still written, with its default layout), so the terminal keeps only pbx's lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="constrained_layout not applied", category=UserWarning)
        fig.savefig(path, dpi=DPI)
    return path


def _label_axes(ax: Axes, ylabel: str, title: str) -> None:
    ax.set_xlabel(STEPS_LABEL)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(alpha=0.3)


def _mark_restarts(ax: Axes, frame: pd.DataFrame) -> None:
    """A dashed line where each restart round began (BG-PBT, IPBT: the round before's end), labelled once."""
    if "restart" not in frame:
        return
    rounds = sorted(frame.loc[frame["restart"], "round"].unique())
    for k, r in enumerate(rounds):
        ax.axvline(float(frame.loc[frame["round"] == r - 1, "steps"].max()), color="0.4", linestyle="--",
                   linewidth=0.8, label="restart" if k == 0 else None)


def _mark_empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.set_yticks([])


def _schedule_axis(ax: Axes, frame: pd.DataFrame, name: str, param: Param, members: list[int]) -> pd.Series:
    """Set up ``ax`` for one hyperparameter and return the y position of each row on it."""
    scale = "log" if isinstance(param, Continuous) and param.log else \
        "horizon" if isinstance(param, Continuous) and param.horizon else ""
    _label_axes(ax, f"{name} ({scale} scale)" if scale else name, "")
    if isinstance(param, Continuous):
        for bound in (param.low, param.high):
            ax.axhline(bound, color="0.6", linestyle=":", linewidth=0.8)
        if param.horizon:  # the scale PBT and PB2 move it on: 0.99 and 0.999 a decade apart
            # (matplotlib also maps its default limits, 0 to 1, through it: 1 is held just below)
            ax.set_yscale("function", functions=(lambda x: -np.log1p(-np.minimum(x, 1 - 1e-12)),
                                                 lambda s: -np.expm1(-s)))
            ticks = sorted({param.low, param.high} | {1 - 10.0 ** -k for k in range(1, 7)
                                                       if param.low < 1 - 10.0 ** -k < param.high})
            ax.set_yticks(ticks, [shown(tick) for tick in ticks])
        else:
            ax.set_yscale("log" if param.log else "linear")
        return frame[name].astype(float)
    ax.set_yticks(range(len(param.choices)), [str(c) for c in param.choices])
    ax.set_ylim(-0.5, len(param.choices) - 0.5)
    index = {str(c): i for i, c in enumerate(param.choices)}
    n = len(members)
    offset = dict(zip(members, (np.arange(n) - (n - 1) / 2) * CATEGORY_SPREAD / max(n - 1, 1)))
    positions = [index[str(v)] + offset[int(m)] for v, m in zip(frame[name], frame["member"])]
    return pd.Series(positions, index=frame.index, dtype=float)


def _segments(frame: pd.DataFrame, values: pd.Series, from_zero: bool,
              within: Mapping[tuple[int, int], list[tuple[float, float]]] | None = None) -> list[_Segment]:
    """Split each member's curve at its exploits; a new piece starts at the donor's previous point.

    Args:
        frame: history rows (see :mod:`pbx.history`).
        values: the y value of each row, aligned with ``frame``'s index; NaN rows are left out, so
            scores evaluated only every few rounds still draw as lines.
        from_zero: start each member's first piece at 0 env steps (configs hold from the start).
        within: ``(member, round)``: the points ``(steps, value)`` taken within that round, drawn in place of
            the row's one value.
    """
    within = within or {}
    points = {(int(m), int(r)): within.get((int(m), int(r))) or ([(float(s), float(v))] if np.isfinite(v) else [])
              for m, r, s, v in zip(frame["member"], frame["round"], frame["steps"], values)}
    segments: list[_Segment] = []
    for member, rows in frame.sort_values("round").groupby("member"):
        first = float(values[rows.index[0]])
        piece = _Segment(int(member), [0.0] if from_zero else [], [first] if from_zero else [], False)
        for r, parent in zip(rows["round"], rows["parent"]):
            if parent != member:
                segments.append(piece)
                donor = points.get((int(parent), int(r) - 1))
                piece = _Segment(int(member), [donor[-1][0]] if donor else [], [donor[-1][1]] if donor else [],
                                 bool(donor))
            for s, v in points[(int(member), int(r))]:
                piece.steps.append(s)
                piece.values.append(v)
        segments.append(piece)
    return [piece for piece in segments if piece.steps]


def _draw_lineage(ax: Axes, segments: list[_Segment], palette: _Palette, drawstyle: str) -> None:
    width = 1.4 if len(palette.members) <= MAX_LEGEND_MEMBERS else 0.8
    # Long runs exploit hundreds of times: smaller markers keep the curves visible under them.
    marker = {**EXPLOIT_MARKER, "markersize": 6 if sum(s.branched for s in segments) <= 60 else 3}
    for seg in segments:
        colour = palette.colour(seg.member)
        lone = len(seg.steps) == 1  # a lone point draws no line: show it as a dot
        ax.plot(seg.steps, seg.values, color=colour, linewidth=width, drawstyle=drawstyle,
                marker="o" if lone else None, markersize=3)
        if seg.branched:
            ax.plot(seg.steps[0], seg.values[0], color=colour, linestyle="none", **marker)


def _member_legend(fig: Figure, axes: list[Axes], palette: _Palette) -> None:
    """A legend outside the axes, at mid-height (at the top a long title runs into it): one entry per member,
    or a colour bar when there are too many."""
    exploit = Line2D([], [], color="0.5", linestyle="none", label="exploit (copies donor)", **EXPLOIT_MARKER)
    members = palette.members
    if len(members) > MAX_LEGEND_MEMBERS:
        norm = BoundaryNorm(np.arange(len(members) + 1) - 0.5, palette.cmap.N)
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=palette.cmap), ax=axes, label="member", shrink=0.8)
        ticks = range(0, len(members), max(1, len(members) // 8))
        bar.set_ticks(ticks, labels=[str(members[i]) for i in ticks])
        axes[0].legend(handles=[exploit], fontsize="small", loc="best")
        return
    handles = [Line2D([], [], color=palette.colour(m), label=f"member {m}") for m in members]
    fig.legend(handles=handles + [exploit], loc="outside right center", fontsize="small")
