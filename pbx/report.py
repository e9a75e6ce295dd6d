"""``python -m pbx.report RUN_DIR [RUN_DIR ...]``: plots and results tables from run folders.

Each run gets, in ``RUN_DIR/report/``:

- ``scores.png``: train and test score vs env steps, one line per member;
- ``schedules.png``: each hyperparameter's schedule per member, exploits marked
  (the lineage view of the PBT papers);
- ``summary.md``: each member's final scores, config and exploits.

Several runs (any mix of strategies and seeds on one env) also give, in
``--out``, ``comparison.png`` (per strategy, the mean over runs of the
population's best score per round, spread shaded) and ``comparison.md`` (final
scores, mean ± std per strategy, like a paper's results table).

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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

from pbx.errors import ArgumentParser, UsageError
from pbx.history import best_rows, complete_rounds, read_csv
from pbx.plots import Band, plot_comparison, plot_member_scores, plot_schedules
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


def load_run(path: Path) -> Run:
    """Read a run folder; anything that makes it unreadable is a :class:`UsageError` naming the file."""
    folder = RunDir(path)
    if not path.is_dir():
        raise UsageError(f"{path}: no such run folder")
    missing = [f.name for f in (folder.config, folder.history) if not f.is_file()]
    if missing:
        raise UsageError(f"{path}: not a pbx run folder (no {' or '.join(missing)})")
    config = _read_config(folder.config)
    space = Space.from_dict(config["space"], source=f"{folder.config}: space")
    frame = complete_rounds(read_csv(folder.history, space), config["run"].get("pop_size"), str(folder.history))
    _check_columns(frame, space, folder.history)
    if frame.empty:
        raise UsageError(f"{folder.history}: no finished round yet, nothing to report")
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
    subject = f"{run.env} · {run.search}"
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
        f"# {run.name}: {run.search} on {run.env}", "",
        f"Selection {run.selection}, {frame['member'].nunique()} members, {frame['round'].max() + 1} rounds, "
        f"{_fmt(frame['steps'].max())} env steps per member, {_fmt(frame['wall_s'].max())} s wall time, "
        f"seed {settings.get('seed', 'n/a')}.", "",
        f"**Final score: train {_fmt(train)}, test {_fmt(test)}** (member {best}). "
        f"Population mean in the last round: train {_fmt(head.population[0])}, test {_fmt(head.population[1])}. "
        f"Best member's mean over the last {head.k} rounds: train {_fmt(head.last_k[0])}, "
        f"test {_fmt(head.last_k[1])}.", "",
        _markdown_table(header, rows), "",
        "Scores and configs are the members' in the last round. " + FINAL_SCORE_NOTE, "",
    ])


def strategy_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's strategy label: its ``search``, plus its selection when the runs differ in selection."""
    with_selection = len({run.selection for run in runs}) > 1
    return [f"{run.search} ({run.selection})" if with_selection else run.search for run in runs]


def write_comparison(runs: Sequence[Run], out: Path, k: int = LAST_K) -> list[Path]:
    """Write ``comparison.png`` and ``comparison.md`` into ``out``, one group per strategy label."""
    env = comparison_env(runs)
    groups: dict[str, list[Run]] = {}
    for label, run in zip(strategy_labels(runs), runs):
        groups.setdefault(label, []).append(run)
    panels = [(title, [band for label, group in groups.items() if (band := _band(label, group, column))])
              for column, title in COMPARISON_PANELS]
    title = f"{env}: best member per round, mean over runs (shaded: ±1 std if n ≥ 3, else min–max)"
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.md").write_text(_comparison_table(env, groups, k))
    return [plot_comparison(panels, title, out / "comparison.png"), out / "comparison.md"]


def comparison_env(runs: Sequence[Run]) -> str:
    """The one env all ``runs`` are on; averaging scores across envs would mean nothing."""
    envs = {run.env: run.path for run in runs}
    if len(envs) > 1:
        listed = ", ".join(f"{env} ({path})" for env, path in envs.items())
        raise UsageError(f"the runs are on different envs: {listed}; compare runs of one env at a time")
    return runs[0].env


def _band(label: str, runs: Sequence[Run], column: str) -> Band | None:
    """Mean and spread over runs of the best member's ``column`` per round; ``None`` if no run has it.

    Runs are put on a common step grid (the union of their rounds' steps, over
    the range all runs cover) by linear interpolation, which is exact when the
    runs share ``t_ready``. The spread is ±1 sample std from 3 runs on, else min–max.
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
    if len(ys) < 3:
        return Band(label, f"n={len(ys)}, mean, min–max", steps, mean, ys.min(axis=0), ys.max(axis=0))
    std = ys.std(axis=0, ddof=1)
    return Band(label, f"n={len(ys)}, mean ± std", steps, mean, mean - std, mean + std)


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


def generate(run_dirs: Sequence[Path], out: Path | None, k: int = LAST_K) -> Iterator[Path]:
    """Check every run first (so bad input writes nothing), then yield each file as it is written.

    A comparison is written when there are several runs or ``out`` is given.
    Folders this command wrote (``comparison.md``, no ``config.yaml``) are skipped
    with a note, so ``python -m pbx.report runs/*`` works again after the first time.
    """
    if k < 1:
        raise UsageError(f"--last-k must be at least 1, got {k}")
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
    for run in runs:
        yield from write_run_report(run, k)
    if compare:
        yield from write_comparison(runs, out if out is not None else default_out(run_dirs), k)


def _is_report_folder(path: Path) -> bool:
    skip = (path / "comparison.md").is_file() and not RunDir(path).config.exists()
    if skip:
        print(f"note: skipping {path}: a pbx report folder, not a run", file=sys.stderr)
    return skip


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pbx.report",
        description="Plots and summary tables for pbx runs. Each run gets RUN_DIR/report/ (scores.png, "
                    "schedules.png, summary.md); several runs also get a comparison per strategy "
                    "(comparison.png, comparison.md). Prints the paths written.",
        epilog="Headline numbers of a run: the best member's train score in the last round and that "
               "member's test score; the population mean of the last round (like for like across "
               "strategies); the best member's mean over the last K rounds. Example: python -m pbx.report "
               "runs/toy-PB2-s0 runs/toy-PBT-s0 --out results/toy",
    )
    parser.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", type=Path,
                        help="a run folder holding config.yaml and history.csv")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for the comparison plot and table (default with several runs: report/ "
                             "in the runs' common parent folder, else ./report); with a single run, "
                             "--out writes its one-run comparison there too")
    parser.add_argument("--last-k", "--last_k", dest="last_k", type=int, default=LAST_K, metavar="K",
                        help=f"rounds averaged by the 'last k' headline numbers (default {LAST_K})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        for path in generate(args.run_dirs, args.out, args.last_k):
            print(path, flush=True)
    except (UsageError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
