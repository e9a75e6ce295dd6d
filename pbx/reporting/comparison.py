"""The files of a comparison of strategies (one game, or several), written into ``--out``:

- ``comparison.png``: learning curves, IQM over runs (and games, on normalised
  scores) with its 95% bootstrap band (mean and min–max below enough runs);
- ``comparison.md``: every run's headline numbers, mean ± std per strategy (and game);
- ``statistics.md`` and ``statistics.tex`` (booktabs): rliable's aggregates of the
  run score ``--score`` picks with 95% stratified-bootstrap CIs, the probability of
  improvement over the baseline, and, for the default score (the best member), the
  same for the population mean beside it; over several games (or where a published
  baseline applies) each game's mean per strategy; a caution under any table whose
  intervals rest on runs too few for their nominal coverage;
- ``intervals.png`` (those estimates and CIs) and ``profile.png`` (performance
  profiles: the fraction of runs whose score exceeds each threshold).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from pbx.reporting import stats
from pbx.reporting.games import PUBLISHED_LABEL, PUBLISHED_NOTE, published_for
from pbx.reporting.plots import Profile, plot_comparison, plot_intervals, plot_profiles
from pbx.reporting.scores import BESIDE, FINAL_SCORE_NOTE, headline, score_title
from pbx.reporting.study import COLUMNS, Study, runs_of
from pbx.reporting.tables import Table, estimate_cell, latex_document, markdown, markdown_table, mean_std

Summaries = Mapping[str, stats.Summary]
"""Score key (``train``, ``test``) -> its statistics."""


def write_comparison(study: Study, out: Path, score: str) -> list[Path]:
    """Write the comparison files (module docstring) of ``study`` on the run score ``score`` into ``out``."""
    kinds = [score] + ([BESIDE[score]] if score in BESIDE else [])
    summaries = {kind: {key: study.summary(kind, i) for i, (key, _) in enumerate(COLUMNS)} for kind in kinds}
    tables = [_aggregate_table(study, kind, summaries[kind]) for kind in kinds]
    if len(study.games) > 1 or any(_published(study, game) for game in study.games):
        tables += [_game_table(study, score, i) for i in range(len(COLUMNS))]
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.md").write_text(_headline_table(study))
    (out / "statistics.md").write_text("\n".join([
        f"# {study.subject}: aggregate statistics (rliable)", "", f"Games: {', '.join(study.games)}.", "",
        *(markdown(table, level=2) for table in tables), _method_note(study, score), "", *_notes(study), "Runs:",
        *runs_of(study, study.labels), ""]))
    (out / "statistics.tex").write_text(latex_document([(t, f"{study.subject}-{n}") for n, t in enumerate(tables)],
                                                       f"{study.subject}, {score_title(score, study.k)}"))
    primary = summaries[score]
    return [_plot_curves(study, score, out / "comparison.png"), out / "comparison.md", out / "statistics.md",
            out / "statistics.tex", _plot_intervals(study, score, primary, out / "intervals.png"),
            plot_profiles([Profile(key, primary[key].taus, primary[key].profiles, primary[key].profile_cis)
                           for key, _ in COLUMNS], study.labels,
                          f"{study.subject}: performance profiles, {score_title(score, study.k)} (shaded: 95% CI)",
                          out / "profile.png")]


def _aggregate_table(study: Study, kind: str, summaries: Summaries) -> Table:
    """Strategies down; per score (train, test) the aggregates and P(> baseline) across."""
    per_score = [f"{name} [95% CI]" for name in study.aggregates]
    per_score += [f"P(> {study.baseline}) [95% CI]"] if study.baseline is not None else []
    rows = []
    for label in study.labels:
        row = [label, str(len(study.runs(label)))]
        for key, _ in COLUMNS:
            summary = summaries[key]
            row += [estimate_cell(summary.aggregates[name].get(label), study.per_game(label))
                    for name in study.aggregates]
            if study.baseline is not None:
                row.append("baseline" if label == study.baseline else estimate_cell(summary.improvement.get(label)))
        rows.append(row)
    shown = [(name, e) for s in summaries.values()
             for name, found in [*s.aggregates.items(), ("P", s.improvement)] for e in found.values()]
    scale = "normalised scores" if study.ranges is not None else "raw scores"
    return Table(f"{score_title(kind, study.k)}: aggregates over runs ({scale})",
                 ["strategy", "runs", *(f"{key}: {h}" for key, _ in COLUMNS for h in per_score)], rows,
                 _caution(shown), [(key, len(per_score)) for key, _ in COLUMNS], lead=2)


def _game_table(study: Study, kind: str, column: int) -> Table:
    """Games down, each strategy's mean raw score with its interval across (and the published baseline's,
    for the games whose runs follow its protocol)."""
    key = COLUMNS[column][0]
    published = {game: found for game in study.games if (found := _published(study, game))}
    rows, shown = [], []
    for game in study.games:
        means = study.game_means(game, kind, column)
        shown += [("mean", e) for e in means.values()]
        row = [game, *(estimate_cell(means.get(label), len(study.cells[label][game])) for label in study.labels)]
        if published:
            found = published.get(game)
            row.append(f"{found[2 * column]} ± {found[2 * column + 1]}" if found else "n/a")
        rows.append(row)
    notes = _caution(shown) + ([PUBLISHED_NOTE] if published else [])
    return Table(f"Per game: mean {key} score, {score_title(kind, study.k)} (raw scores)",
                 ["game", *study.labels, *([PUBLISHED_LABEL] if published else [])], rows, notes)


def _published(study: Study, game: str) -> tuple[float, float, float, float] | None:
    return published_for([run for label in study.labels for run in study.cells[label][game]])


def _notes(study: Study) -> list[str]:
    """The study's notes (:attr:`Study.notes`), each a paragraph, above the list of runs."""
    return [line for note in study.notes for line in (f"Note: {note}.", "")]


def _caution(cells: list[tuple[str, stats.Estimate]]) -> list[str]:
    line = stats.coverage_caution(cells)
    return [line] if line else []


def _method_note(study: Study, score: str) -> str:
    scale = ("Scores are min-max normalised per game, (R - min) / (max - min), with "
             + "; ".join(f"{game} [{low:g}, {high:g}]" for game, (low, high) in study.ranges.items())
             + "; the optimality gap is the mean shortfall below 1, the median that of the per-game means. "
             if study.ranges is not None else "")
    improvement = (
        f" P(> {study.baseline}): the probability of improvement, the chance that a run of the strategy ends "
        f"with a higher score than a run of {study.baseline} (Mann-Whitney U / (n m) per game, ties count "
        "half, averaged over games; 0.5: no difference), its CI from bootstrapping both sets of runs "
        "independently." if study.baseline is not None else
        " No baseline: give --baseline NAME for the probability of improvement.")
    return (
        f"Score of a run: the {score_title(score, study.k)}. {FINAL_SCORE_NOTE} {scale}IQM: the interquartile "
        "mean over runs and games, the mean of the middle 50% of scores (rliable's aggregate_iqm; one outlying "
        "seed cannot move it much); mean: the plain mean. [95% CI]: the percentile interval of rliable's "
        f"stratified bootstrap, runs resampled within each game ({study.reps} resamples, seed {stats.SEED}, "
        f"so the same runs give the same interval).{improvement} (n=R): the cell rests on R runs (R×G: R runs "
        f"on each of G games); with fewer than {stats.MIN_RUNS} runs per game a cell gets "
        "its point estimate and no interval (`no CI`): a bootstrap over one or two seeds says nothing about "
        "the spread. n/a: no run has that score (no held-out test, as on the toy); `n=m of R`: only m of R "
        "runs have it, the others are left out.")


def _headline_table(study: Study) -> str:
    """Every headline number per strategy (and game): mean ± std over its runs."""
    several = len(study.games) > 1
    rows = []
    for game in study.games:
        for label in study.labels:
            heads = [headline(run, study.k) for run in study.cells[label][game]]
            numbers = np.array([[*h.best, *h.population, *h.last_k, *h.area, *h.population_area, *h.kept]
                                for h in heads])
            steps = np.array([float(run.frame["steps"].max()) for run in study.cells[label][game]])
            rows.append([*([game] if several else []), label, str(len(heads)),
                         *(mean_std(column) for column in numbers.T), mean_std(steps)])
    k = study.k
    return "\n".join([
        f"# Final scores on {', '.join(study.games)}", "",
        markdown_table([*(["game"] if several else []), "strategy", "n runs", "best member: train",
                        "best member: test", "population mean: train", "population mean: test",
                        f"best member, mean of last {k} rounds: train",
                        f"best member, mean of last {k} rounds: test", "best member, area: train",
                        "best member, area: test", "population mean, area: train", "population mean, area: test",
                        "kept answer: train", "kept answer: test", "steps per member"], rows), "",
        FINAL_SCORE_NOTE + " Steps per member: the most env steps a member of the run trained. Raw scores, mean "
        "± sample standard deviation (ddof=1) over runs; "
        "n/a where no run has a score; `(m of n)` where only m runs have one.", "", *_notes(study),
        "Runs:", *runs_of(study, study.labels), "",
    ])


def _plot_curves(study: Study, score: str, path: Path) -> Path:
    per_round = "population mean per round" if score in BESIDE.values() else "best member per round"
    panels = [(f"{key} score, {per_round}", [band for label in study.labels
                                             if (band := study.band(label, score, column))])
              for key, column in COLUMNS]
    # The running mean of 100 training episodes, where runs kept it: the curve train-procgen publishes.
    recent = [band for label in study.labels if (band := study.band(label, score, "score100"))]
    if recent:
        panels.append((f"train, mean of last 100 episodes, {per_round}", recent))
    return plot_comparison(panels, f"{study.subject}: IQM over runs (shaded: 95% bootstrap CI; too few runs: "
                                   f"mean, min–max)", path)


def _plot_intervals(study: Study, score: str, summaries: Summaries, path: Path) -> Path:
    panels = []
    for key, _ in COLUMNS:
        panels += [(f"{key}: {name}", summaries[key].aggregates[name], None) for name in study.aggregates]
        if study.baseline is not None:
            panels.append((f"{key}: P(> {study.baseline})", summaries[key].improvement, (-0.02, 1.02)))
    return plot_intervals(panels, study.labels, len(panels) // len(COLUMNS),
                          f"{study.subject}: {score_title(score, study.k)}, estimate and 95% CI (hollow: too few "
                          f"runs, no CI)", path)
