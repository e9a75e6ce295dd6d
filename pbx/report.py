"""``python -m pbx.report RUN_DIR [RUN_DIR ...]``: plots and results tables from run folders.

Each run gets, in ``RUN_DIR/report/``:

- ``scores.png``: train and test score vs env steps, one line per member;
- ``schedules.png``: each hyperparameter's schedule per member, exploits marked
  (the lineage view of the PBT papers);
- ``summary.md``: each member's final scores, config and exploits.

Several runs (any mix of strategies and seeds on one env) also give, in
``--out``, a comparison per strategy (:func:`write_comparison`):

- ``comparison.png``: learning curves, the population's best score per round,
  IQM over runs with its 95% bootstrap band (mean and min–max below 3 runs);
- ``comparison.md``: the headline numbers below, mean ± std per strategy;
- ``statistics.md`` and ``statistics.tex`` (booktabs): rliable's IQM and mean of
  the final scores with 95% stratified-bootstrap CIs, and the probability of
  improvement over the baseline (:mod:`pbx.stats`);
- ``intervals.png`` (those estimates and CIs) and ``profile.png`` (performance
  profiles: the fraction of runs whose final score exceeds each threshold).

A sweep folder (``SWEEP/sweep.yaml``, written by :mod:`pbx.sweep`) is reported
as a whole into ``SWEEP/report/``: its variants are the strategies, in the
sweep's order, its finished runs the seeds, its ``baseline`` the baseline.

The *best member* of a round is the one with the best train score (NaN ranks
last, ties go to the lowest member id: :func:`pbx.history.rank_best_first`).
Test curves and test scores are those of that member: the test set never
selects. Each run has three headline numbers, each as (train, test):

- *final score*: the best member's scores in the last round;
- *population mean*: the mean over all members in the last round;
- *last k*: the mean of the best member's scores over the last k rounds
  (``--last-k``, default :data:`LAST_K`).

The final score picks a maximum and reports it on the same noisy measurement,
so it overstates (for ``--search none`` it is the best of the seeds of one
config). The population mean is the number to compare with a baseline's seeds,
and last k smooths one lucky round (:data:`FINAL_SCORE_NOTE`).

Everything is read from ``config.yaml`` and ``history.csv``, so a report can be
made while a run is still going (a partly written last round is left out).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from pbx import stats
from pbx.config import RunSettings, build
from pbx.errors import ArgumentParser, UsageError
from pbx.history import best_rows, complete_rounds, read_csv
from pbx.plots import (Band, Profile, plot_comparison, plot_intervals, plot_member_scores, plot_profiles,
                       plot_schedules)
from pbx.run_dir import RunDir
from pbx.space import Categorical, Space
from pbx.yaml_files import read_yaml

COMPARISON_PANELS = (
    ("score", "train score of best member"),
    ("test_score", "test score of best-on-train member"),
)
FINAL_SCORE_NOTE = (
    "Best member (the final score): the train score of the member with the best train score in the last "
    "round, and that same member's test score (no selection on the test set); a maximum over noisy scores, "
    "so it overstates, and for a baseline it is the best of its seeds. Population mean: the mean over all "
    "members in the last round (for a baseline, the mean over its seeds): the like-for-like number between "
    "a baseline and a tuned population. Last k: the best-on-train member of each of the last k rounds "
    "(fewer if the run is shorter), its scores averaged over those rounds. NaN scores (no finished episode, "
    "a diverged member, a round without a test) are left out of the means."
)
LAST_K = 5
"""Rounds averaged by the "last k" headline number: 5 smooths a lucky round yet stays near the end."""
SWEEP_FILE = "sweep.yaml"
STATISTICS_PANELS = (("train", "final train score"), ("test", "final test score"))


@dataclass(frozen=True)
class Run:
    """One run folder: its resolved config, search space and complete rounds of history."""

    path: Path
    config: dict[str, Any]
    space: Space
    frame: pd.DataFrame

    @property
    def name(self) -> str:
        return str(self.config["run"].get("name", self.path.name))

    @property
    def env(self) -> str:
        return str(self.config["run"]["env"])

    @property
    def search(self) -> str:
        return str(self.config["run"]["search"])

    @property
    def selection(self) -> str:
        return str(self.config["run"].get("selection", "truncation"))

    @property
    def strategy(self) -> str:
        """``search``, with its ``cat_exp`` unless that is the default ``random`` (``PB2 exp3_dep``): PB2-Rand,
        PB2-Mult and PB2-Mix are different strategies in a comparison."""
        cat_exp = (self.config.get("strategy") or {}).get("cat_exp", "random")
        return self.search if cat_exp == "random" else f"{self.search} {cat_exp}"

    @property
    def finished(self) -> bool:
        """Whether the history holds every planned round."""
        planned = build(RunSettings, self.config["run"]).rounds
        return not self.frame.empty and int(self.frame["round"].max()) + 1 >= planned


def load_run(path: Path) -> Run:
    """Read a run folder; anything that makes it unreadable is a :class:`UsageError` naming the file."""
    run = _read_run(path)
    if run.frame.empty:
        raise UsageError(f"{RunDir(path).history}: no finished round yet, nothing to report")
    return run


def _read_run(path: Path) -> Run:
    """:func:`load_run`, but a run with no complete round yet is returned (with an empty frame)."""
    folder = RunDir(path)
    if not path.is_dir():
        raise UsageError(f"{path}: no such run folder")
    missing = [f.name for f in (folder.config, folder.history) if not f.is_file()]
    if missing:
        sweep = "" if folder.config.is_file() else f" nor a sweep folder (no {SWEEP_FILE})"
        raise UsageError(f"{path}: not a pbx run folder (no {' or '.join(missing)}){sweep}")
    config = _read_config(folder.config)
    space = Space.from_dict(config["space"], source=f"{folder.config}: space")
    frame = complete_rounds(read_csv(folder.history, space), config["run"].get("pop_size"), str(folder.history))
    _check_columns(frame, space, folder.history)
    return Run(path, config, space, frame)


def _read_config(path: Path) -> dict[str, Any]:
    config = read_yaml(path, "run config")
    if not isinstance(config, dict) or not isinstance(config.get("run"), dict) or "space" not in config:
        raise UsageError(f"{path}: not a pbx run config (needs a 'run' mapping and a 'space')")
    absent = [key for key in ("env", "search") if key not in config["run"]]
    if absent:
        raise UsageError(f"{path}: 'run' has no {' or '.join(absent)}")
    return config


def _check_columns(frame: pd.DataFrame, space: Space, path: Path) -> None:
    absent = [name for name in space.names if name not in frame.columns]
    if absent:
        raise UsageError(f"{path}: no column for hyperparameter(s) {absent} of the run's space")
    for name, param in space.params.items():
        if not isinstance(param, Categorical):
            continue
        choices = {str(c) for c in param.choices}
        unknown = sorted({str(v) for v in frame[name]} - choices)
        if unknown:
            raise UsageError(f"{path}: {name} takes values {unknown} outside its choices {sorted(choices)}")


def final_scores(run: Run) -> tuple[float, float]:
    """The run's final (train, test) score, as defined in the module docstring."""
    last = best_rows(run.frame).iloc[-1]
    return float(last["score"]), float(last["test_score"])


@dataclass(frozen=True)
class Headline:
    """A run's headline numbers (see :data:`FINAL_SCORE_NOTE`), each as (train, test)."""

    best: tuple[float, float]
    population: tuple[float, float]
    last_k: tuple[float, float]
    k: int


def headline(run: Run, k: int = LAST_K) -> Headline:
    """The run's final score, last-round population mean and last-``k`` mean of the best member."""
    frame = run.frame
    last = frame[frame["round"] == frame["round"].max()]
    best = best_rows(frame).tail(k)
    return Headline(final_scores(run), (_nanmean(last["score"]), _nanmean(last["test_score"])),
                    (_nanmean(best["score"]), _nanmean(best["test_score"])), len(best))


def _nanmean(values: pd.Series) -> float:
    finite = values.to_numpy(float)
    finite = finite[np.isfinite(finite)]
    return float(finite.mean()) if len(finite) else float("nan")


def write_run_report(run: Run, k: int = LAST_K) -> list[Path]:
    """Write ``RUN_DIR/report/``: score and schedule plots and ``summary.md``."""
    out = RunDir(run.path).report
    subject = f"{run.env} · {run.strategy}"
    paths = [
        plot_member_scores(run.frame, f"{subject}: score per member ({run.name})", out / "scores.png"),
        plot_schedules(run.frame, run.space, f"{subject}: hyperparameter schedules ({run.name})",
                       out / "schedules.png"),
    ]
    (out / "summary.md").write_text(_run_summary(run, k))
    return paths + [out / "summary.md"]


def _run_summary(run: Run, k: int) -> str:
    frame = run.frame
    last = frame[frame["round"] == frame["round"].max()].sort_values("member")
    best = int(best_rows(frame).iloc[-1]["member"])
    copied = frame[frame["parent"] != frame["member"]]
    received = copied["member"].value_counts()
    given = copied["parent"].value_counts()
    rows = []
    for _, row in last.iterrows():
        m = int(row["member"])
        rows.append([f"**{m}** (best)" if m == best else str(m), _fmt(row["score"]), _fmt(row["test_score"]),
                     str(received.get(m, 0)), str(given.get(m, 0)), *(_fmt(row[n]) for n in run.space.names)])
    header = ["member", "train score", "test score", "exploits (copied a donor)", "times donor",
              *run.space.names]
    head = headline(run, k)
    train, test = head.best
    settings = run.config["run"]
    return "\n".join([
        f"# {run.name}: {run.strategy} on {run.env}", "",
        f"Selection {run.selection}, {frame['member'].nunique()} members, {frame['round'].max() + 1} rounds, "
        f"{_fmt(frame['steps'].max())} env steps per member, {_fmt(frame['wall_s'].max())} s wall time, "
        f"seed {settings.get('seed', 'n/a')}.", "",
        f"**Final score: train {_fmt(train)}, test {_fmt(test)}** (member {best}). "
        f"Population mean in the last round: train {_fmt(head.population[0])}, test {_fmt(head.population[1])}. "
        f"Best member's mean over the last {head.k} rounds: train {_fmt(head.last_k[0])}, "
        f"test {_fmt(head.last_k[1])}.", "",
        _markdown_table(header, rows), "",
        "Scores and configs are the members' in the last round. " + FINAL_SCORE_NOTE, "",
        *_category_shares(run),
    ])


def _category_shares(run: Run) -> list[str]:
    """For each categorical hyperparameter, each choice's share of member-rounds, over the run and in the
    last round (what a categorical strategy such as EXP3 settled on); no lines for a space without one."""
    frame = run.frame
    last = frame[frame["round"] == frame["round"].max()]
    rows = []
    for name, param in run.space.params.items():
        if isinstance(param, Categorical):
            whole, final = (part[name].map(str).value_counts(normalize=True) for part in (frame, last))
            rows += [[name, str(c), f"{whole.get(str(c), 0.0):.0%}", f"{final.get(str(c), 0.0):.0%}"]
                     for c in param.choices]
    if not rows:
        return []
    return [_markdown_table(["hyperparameter", "choice", "share of member-rounds", "share in the last round"],
                            rows), ""]


def strategy_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's strategy label: its ``search`` (and ``cat_exp``), plus its selection when the runs differ in
    selection."""
    with_selection = len({run.selection for run in runs}) > 1
    return [f"{run.strategy} ({run.selection})" if with_selection else run.strategy for run in runs]


def write_comparison(runs: Sequence[Run], out: Path, k: int = LAST_K, labels: Sequence[str] | None = None,
                     baseline: str | None = None, reps: int = stats.REPS) -> list[Path]:
    """Write the comparison files (module docstring) into ``out``, one group per strategy label.

    Args:
        runs: runs of one env.
        labels: each run's strategy (default :func:`strategy_labels`), groups in order of first appearance.
        baseline: the label the probability of improvement is measured against (None: not given).
        reps: bootstrap resamples of every confidence interval.
    """
    env = comparison_env(runs)
    groups: dict[str, list[Run]] = {}
    for label, run in zip(labels or strategy_labels(runs), runs):
        groups.setdefault(label, []).append(run)
    panels = [(title, [band for label, group in groups.items() if (band := _band(label, group, column, reps))])
              for column, title in COMPARISON_PANELS]
    title = (f"{env}: best member per round, IQM over runs (shaded: 95% bootstrap CI; "
             f"below {stats.MIN_RUNS} runs mean, min–max)")
    summaries = statistics(groups, baseline, reps)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.md").write_text(_comparison_table(env, groups, k))
    (out / "statistics.md").write_text(_statistics_markdown(env, groups, summaries, baseline, reps))
    (out / "statistics.tex").write_text(_statistics_latex(env, groups, summaries, baseline, reps))
    intervals = []
    for key, label in STATISTICS_PANELS:
        intervals += [(f"{label}: IQM", summaries[key].iqm, None), (f"{label}: mean", summaries[key].mean, None)]
        if baseline is not None:
            intervals.append((f"{label}: P(> {baseline})", summaries[key].improvement, (-0.02, 1.02)))
    profiles = [Profile(label, summaries[key].taus, summaries[key].profiles, summaries[key].profile_cis)
                for key, label in STATISTICS_PANELS]
    return [plot_comparison(panels, title, out / "comparison.png"), out / "comparison.md",
            out / "statistics.md", out / "statistics.tex",
            plot_intervals(intervals, list(groups), len(intervals) // 2, f"{env}: final scores, estimate and 95% CI "
                                                    f"(hollow: fewer than {stats.MIN_RUNS} runs, no CI)",
                           out / "intervals.png"),
            plot_profiles(profiles, list(groups), f"{env}: performance profiles of the final scores "
                                                  f"(shaded: 95% CI)", out / "profile.png")]


def statistics(groups: Mapping[str, Sequence[Run]], baseline: str | None,
               reps: int = stats.REPS) -> dict[str, stats.Summary]:
    """rliable's statistics of the final ``train`` and ``test`` scores (:func:`final_scores`) per strategy.

    Each strategy's score matrix is (runs with a finite score, 1 env); a strategy
    with no such run is left out of that score's summary.
    """
    summaries = {}
    for i, (key, _) in enumerate(STATISTICS_PANELS):
        scores = {}
        for label, group in groups.items():
            values = np.array([final_scores(run)[i] for run in group])
            if np.isfinite(values).any():
                scores[label] = values[np.isfinite(values)][:, None]
        summaries[key] = stats.summarize(scores, baseline, reps)
    return summaries


def comparison_env(runs: Sequence[Run]) -> str:
    """The one env all ``runs`` are on; averaging scores across envs would mean nothing."""
    envs = {run.env: run.path for run in runs}
    if len(envs) > 1:
        listed = ", ".join(f"{env} ({path})" for env, path in envs.items())
        raise UsageError(f"the runs are on different envs: {listed}; compare runs of one env at a time")
    return runs[0].env


def _band(label: str, runs: Sequence[Run], column: str, reps: int) -> Band | None:
    """IQM over runs of the best member's ``column`` per round with its 95% bootstrap band
    (:func:`pbx.stats.curve`); ``None`` if no run has it.

    Runs are put on a common step grid (the union of their rounds' steps, over
    the range all runs cover) by linear interpolation, which is exact when the
    runs share ``t_ready``. Below :data:`pbx.stats.MIN_RUNS` runs: the mean, and min–max.
    """
    curves = [curve for run in runs if len((curve := _best_curve(run, column))[0])]
    if not curves:
        return None
    steps = np.unique(np.concatenate([x for x, _ in curves]))
    steps = steps[(steps >= max(x[0] for x, _ in curves)) & (steps <= min(x[-1] for x, _ in curves))]
    ys = np.array([np.interp(steps, x, y) for x, y in curves])
    mean = ys.mean(axis=0)
    if len(ys) == 1:
        return Band(label, "n=1", steps, mean, mean, mean)
    if len(ys) < stats.MIN_RUNS:
        return Band(label, f"n={len(ys)}, mean, min–max", steps, mean, ys.min(axis=0), ys.max(axis=0))
    return Band(label, f"n={len(ys)}, IQM, 95% CI", steps, *stats.curve(ys, reps))


def _best_curve(run: Run, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, value) of the best member per round, rounds where the value is NaN left out."""
    best = best_rows(run.frame)
    best = best[best[column].notna()]
    return best["steps"].to_numpy(float), best[column].to_numpy(float)


def _comparison_table(env: str, groups: dict[str, list[Run]], k: int) -> str:
    rows = []
    for label, group in groups.items():
        heads = [headline(run, k) for run in group]
        numbers = np.array([[*h.best, *h.population, *h.last_k] for h in heads])
        rows.append([label, str(len(group)), *(mean_std(numbers[:, i]) for i in range(6))])
    runs = [f"- {label}: " + ", ".join(f"`{run.path}`" for run in group) for label, group in groups.items()]
    return "\n".join([
        f"# Final scores on {env}", "",
        _markdown_table(["strategy", "n runs", "best member: train", "best member: test",
                         "population mean: train", "population mean: test",
                         f"best member, mean of last {k} rounds: train",
                         f"best member, mean of last {k} rounds: test"], rows), "",
        FINAL_SCORE_NOTE + " Mean ± sample standard deviation (ddof=1) over runs; "
        "n/a where no run has a score; `(m of n)` where only m runs have one.", "",
        "Runs:", *runs, "",
    ])


def _statistics_rows(groups: Mapping[str, Sequence[Run]], summaries: Mapping[str, stats.Summary],
                     baseline: str | None) -> list[list[str]]:
    """One row per strategy: runs, then per score IQM, mean and (with a baseline) P(improvement)."""
    rows = []
    for name, group in groups.items():
        row = [name, str(len(group))]
        for key, _ in STATISTICS_PANELS:
            summary = summaries[key]
            row += [_estimate_cell(summary.iqm.get(name), len(group)),
                    _estimate_cell(summary.mean.get(name), len(group))]
            if baseline is not None:
                row.append("baseline" if name == baseline else _estimate_cell(summary.improvement.get(name)))
        rows.append(row)
    return rows


def _estimate_cell(est: stats.Estimate | None, runs: int | None = None) -> str:
    """``value [low, high]``, or ``value (n=2, no CI)`` below :data:`pbx.stats.MIN_RUNS` runs; ``n/a`` for none;
    ``(m of n runs)`` where only m of the strategy's ``runs`` have the score."""
    if est is None:
        return "n/a"
    text = interval_text(est.value, est.low, est.high) if est.has_interval else f"{_fmt(est.value)} (n={est.runs}, no CI)"
    return text + (f" ({est.runs} of {runs} runs)" if runs is not None and est.runs < runs else "")


def interval_text(value: float, low: float, high: float) -> str:
    """``value [low, high]`` with 4 significant digits, more (up to 7) where 4 would print different numbers
    alike: near a ceiling (the toy's 1.2) strategies differ in the 4th digit and beyond."""
    for digits in range(4, 8):
        texts = [f"{v:.{digits}g}" for v in (value, low, high)]
        if len(set(texts)) == len({round(v, 12) for v in (value, low, high)}):
            break
    return f"{texts[0]} [{texts[1]}, {texts[2]}]"


def _statistics_note(baseline: str | None, reps: int) -> str:
    improvement = (
        f" P(> {baseline}): the probability of improvement, the chance that a run of the strategy ends with a "
        f"higher final score than a run of {baseline} (Mann-Whitney U / (n m), ties count half; 0.5: no "
        "difference), its CI from bootstrapping both sets of runs independently." if baseline is not None else
        " No baseline: give --baseline NAME for the probability of improvement.")
    return (
        "Final score of a run: the train score of its best member (best train score) in the last round, and "
        "that member's test score (see comparison.md). IQM: the interquartile mean over runs, the mean of the "
        "middle 50% of final scores (rliable's aggregate_iqm; one outlying seed cannot move it much); mean: the "
        f"plain mean. [95% CI]: the percentile interval of rliable's stratified bootstrap over runs ({reps} "
        f"resamples, seed {stats.SEED}, so the same runs give the same interval).{improvement} With fewer than "
        f"{stats.MIN_RUNS} runs with a score a strategy gets its point estimate and no interval (`n=2, no CI`): "
        "a bootstrap over one or two seeds says nothing about the spread. n/a: no run has that score (no "
        "held-out test, as on the toy); `(m of n runs)`: only m runs have it, the others are left out. One env, "
        "so each score matrix is runs x 1 task.")


def _statistics_markdown(env: str, groups: Mapping[str, Sequence[Run]], summaries: Mapping[str, stats.Summary],
                         baseline: str | None, reps: int) -> str:
    header = ["strategy", "runs"]
    for _, label in STATISTICS_PANELS:
        header += [f"{label}: IQM [95% CI]", f"{label}: mean [95% CI]"]
        header += [f"{label}: P(> {baseline}) [95% CI]"] if baseline is not None else []
    runs = [f"- {label}: " + ", ".join(f"`{run.path}`" for run in group) for label, group in groups.items()]
    return "\n".join([
        f"# Final scores on {env}: aggregate statistics (rliable)", "",
        _markdown_table(header, _statistics_rows(groups, summaries, baseline)), "",
        _statistics_note(baseline, reps), "", "Runs:", *runs, "",
    ])


def _statistics_latex(env: str, groups: Mapping[str, Sequence[Run]], summaries: Mapping[str, stats.Summary],
                      baseline: str | None, reps: int) -> str:
    """A booktabs table: strategies down, IQM, mean and P(improvement) of the train and test scores across."""
    per_score = ["IQM", "mean"] + ([f"P(> {baseline})"] if baseline is not None else [])
    width = len(per_score)
    spans = " & ".join(f"\\multicolumn{{{width}}}{{c}}{{{_tex(label)}}}" for _, label in STATISTICS_PANELS)
    rules = "".join(f"\\cmidrule(lr){{{3 + i * width}-{2 + (i + 1) * width}}}" for i in range(2))
    lines = [
        f"% python -m pbx.report: final scores on {env}; needs \\usepackage{{booktabs}}",
        "\\begin{table}[t]", "\\centering",
        f"\\begin{{tabular}}{{lr{'c' * 2 * width}}}", "\\toprule",
        f" & & {spans} \\\\", rules,
        " & ".join(["strategy", "runs", *(_tex(h) for h in per_score * 2)]) + " \\\\", "\\midrule",
        *(" & ".join(map(_tex, row)) + " \\\\" for row in _statistics_rows(groups, summaries, baseline)),
        "\\bottomrule", "\\end{tabular}",
        f"\\caption{{{_tex(_statistics_note(baseline, reps).replace('`', ''))}}}",
        f"\\label{{tab:pbx-{re.sub('[^A-Za-z0-9]+', '-', env)}}}", "\\end{table}", "",
    ]
    return "\n".join(lines)


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": "$<$",
                ">": "$>$"}


def _tex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped."""
    return "".join(_TEX_ESCAPES.get(char, char) for char in text)


def mean_std(values: np.ndarray) -> str:
    """``"mean ± std"`` over the finite values (sample std), noting how many of them there are if not all."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return "n/a"
    text = _fmt(finite.mean()) + (f" ± {_fmt(finite.std(ddof=1))}" if len(finite) > 1 else "")
    return text + (f" ({len(finite)} of {len(values)})" if len(finite) < len(values) else "")


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header)] + rows
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def _fmt(value: object) -> str:
    if isinstance(value, (float, np.floating)):
        return "n/a" if np.isnan(value) else f"{value:.4g}"
    return str(value)


def default_out(paths: Sequence[Path]) -> Path:
    """``report/`` in the runs' common parent folder, or ``./report`` when they share none but the root."""
    common = Path(os.path.commonpath([path.parent.resolve() for path in paths]))
    if common == Path(common.anchor):
        return Path("report")
    cwd = Path.cwd().resolve()
    return (common.relative_to(cwd) if common.is_relative_to(cwd) else common) / "report"


@dataclass(frozen=True)
class SweepRuns:
    """A sweep folder's finished runs, grouped by variant in the sweep's order, and its baseline variant."""

    groups: dict[str, list[Run]]
    baseline: str | None


def load_sweep(path: Path) -> SweepRuns:
    """Read ``SWEEP/sweep.yaml`` and the finished runs ``SWEEP/<variant>/seed<k>/`` of its variants and seeds.

    Runs not started or not finished are left out with a note (a report made while
    the sweep goes on compares the seeds done); a variant with no finished run is an
    error, since the sweep names it and the comparison would silently lack it.
    """
    file = path / SWEEP_FILE
    record = read_yaml(file, "sweep file")
    if not isinstance(record, dict) or not isinstance(record.get("variants"), list) \
            or not isinstance(record.get("seeds"), list):
        raise UsageError(f"{file}: not a pbx sweep (needs 'variants' and 'seeds' lists)")
    names = [variant.get("name") if isinstance(variant, dict) else None for variant in record["variants"]]
    if not names or not all(isinstance(name, str) and name for name in names):
        raise UsageError(f"{file}: 'variants' must be a non-empty list of mappings with a 'name'")
    baseline = record.get("baseline")
    if baseline is not None and baseline not in names:
        raise UsageError(f"{file}: baseline {baseline!r} is not one of its variants ({', '.join(names)})")
    groups: dict[str, list[Run]] = {}
    for name in names:
        groups[name] = []
        for seed in record["seeds"]:
            folder = path / name / f"seed{seed}"
            run = _read_run(folder) if RunDir(folder).config.is_file() else None
            if run is not None and run.finished:
                groups[name].append(run)
            else:
                print(f"note: leaving out {folder}: {'not finished' if run else 'not started'}", file=sys.stderr)
        if not groups[name]:
            raise UsageError(f"{path / name}: no finished run of variant {name!r} (seeds {record['seeds']})")
    return SweepRuns(groups, baseline)


def generate(run_dirs: Sequence[Path], out: Path | None, k: int = LAST_K, baseline: str | None = None,
             reps: int = stats.REPS) -> Iterator[Path]:
    """Check every run first (so bad input writes nothing), then yield each file as it is written.

    A comparison is written when there are several runs or ``out`` is given, or
    for a sweep folder (into ``SWEEP/report/`` unless ``out`` is given; its runs
    get no report of their own). Folders this command wrote (``comparison.md``,
    no ``config.yaml``) are skipped with a note, so ``python -m pbx.report runs/*``
    works again after the first time. ``baseline`` overrides the sweep's, or the
    ``none`` strategy among loose runs.
    """
    if k < 1:
        raise UsageError(f"--last-k must be at least 1, got {k}")
    if reps < 1:
        raise UsageError(f"--reps must be at least 1, got {reps}")
    sweeps = [path for path in run_dirs if (path / SWEEP_FILE).is_file()]
    if sweeps:
        if len(run_dirs) > 1:
            raise UsageError(f"{sweeps[0]}: a sweep folder is reported on its own, not beside other folders")
        sweep = load_sweep(sweeps[0])
        runs = [run for group in sweep.groups.values() for run in group]
        labels = [name for name, group in sweep.groups.items() for _ in group]
        baseline = _check_baseline(baseline if baseline is not None else sweep.baseline, labels)
        comparison_env(runs)
        yield from write_comparison(runs, out if out is not None else sweeps[0] / "report", k, labels, baseline,
                                    reps)
        return
    run_dirs = [path for path in run_dirs if not _is_report_folder(path)]
    if not run_dirs:
        raise UsageError("no run folders left after skipping report folders")
    seen: dict[Path, Path] = {}
    for path in run_dirs:
        if seen.setdefault(path.resolve(), path) is not path:
            raise UsageError(f"{path}: given more than once (it would count twice in the comparison)")
    runs = [load_run(path) for path in run_dirs]
    compare = out is not None or len(runs) > 1
    if compare:
        comparison_env(runs)
        labels = strategy_labels(runs)
        baseline = _check_baseline(baseline if baseline is not None else "none" if "none" in labels else None,
                                   labels)
    for run in runs:
        yield from write_run_report(run, k)
    if compare:
        yield from write_comparison(runs, out if out is not None else default_out(run_dirs), k, labels, baseline,
                                    reps)


def _check_baseline(baseline: str | None, labels: Sequence[str]) -> str | None:
    if baseline is not None and baseline not in labels:
        raise UsageError(f"--baseline {baseline!r} is not among the strategies ({', '.join(dict.fromkeys(labels))})")
    return baseline


def _is_report_folder(path: Path) -> bool:
    skip = (path / "comparison.md").is_file() and not RunDir(path).config.exists()
    if skip:
        print(f"note: skipping {path}: a pbx report folder, not a run", file=sys.stderr)
    return skip


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pbx.report",
        description="Plots and summary tables for pbx runs. Each run gets RUN_DIR/report/ (scores.png, "
                    "schedules.png, summary.md); several runs, or one sweep folder (SWEEP/sweep.yaml, "
                    "from python -m pbx.sweep; into SWEEP/report/), get a comparison per strategy: learning "
                    "curves (comparison.png), headline numbers (comparison.md), and rliable's IQM and mean of "
                    "the final scores with 95% stratified-bootstrap CIs, probability of improvement over the "
                    "baseline and performance profiles (statistics.md, statistics.tex, intervals.png, "
                    "profile.png). Prints the paths written.",
        epilog="Headline numbers of a run: the best member's train score in the last round and that "
               "member's test score; the population mean of the last round (like for like across "
               "strategies); the best member's mean over the last K rounds. Example: python -m pbx.report "
               "runs/toy-PB2-s0 runs/toy-PBT-s0 --out results/toy",
    )
    parser.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", type=Path,
                        help="a run folder holding config.yaml and history.csv, or one sweep folder")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for the comparison plot and table (default with several runs: report/ "
                             "in the runs' common parent folder, else ./report); with a single run, "
                             "--out writes its one-run comparison there too")
    parser.add_argument("--last-k", "--last_k", dest="last_k", type=int, default=LAST_K, metavar="K",
                        help=f"rounds averaged by the 'last k' headline numbers (default {LAST_K})")
    parser.add_argument("--baseline", default=None, metavar="NAME",
                        help="strategy (or sweep variant) the probability of improvement is measured against "
                             "(default: the sweep's baseline, or the 'none' strategy among run folders)")
    parser.add_argument("--reps", type=int, default=stats.REPS, metavar="N",
                        help=f"bootstrap resamples per confidence interval (default {stats.REPS}; seeded, so "
                             f"reports are reproducible)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        for path in generate(args.run_dirs, args.out, args.last_k, args.baseline, args.reps):
            print(path, flush=True)
    except (UsageError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
