"""``python -m pbx.report`` statistics over a sweep of real toy runs: rliable's numbers, tables, figures, bad input."""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import yaml
from rliable import library as rly
from rliable import metrics

from pbx.report import main
from pbx.reporting import stats
from pbx.reporting.tables import interval_text

from conftest import run_toy

VARIANTS = ("none", "PBT", "PB2")
SEEDS = (0, 1, 2)
REPS = 500


def final_score(folder: Path) -> tuple[float, float]:
    """(train, test) of the last round's best member on train score, read straight off history.csv."""
    with open(folder / "history.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    last = max(int(row["round"]) for row in rows)
    best = max((row for row in rows if int(row["round"]) == last),
               key=lambda row: (float(row["score"]), -int(row["member"])))
    return float(best["score"]), float(best["test_score"])


def rliable_aggregates(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQM and mean with CIs, as rliable's README computes them, seeded as the report seeds the bootstrap."""
    np.random.seed(stats.SEED)
    point, interval = rly.get_interval_estimates(
        {"x": scores}, lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)]), reps=REPS)
    return point["x"], interval["x"]


def rliable_improvement(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    np.random.seed(stats.SEED)
    point, interval = rly.get_interval_estimates({"x": (x, y)}, metrics.probability_of_improvement, reps=REPS)
    return point["x"], np.ravel(interval["x"])


def table_row(markdown: str, label: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def cell(point: float, low: float, high: float, runs: int = len(SEEDS)) -> str:
    """A table cell: the estimate, its interval and the runs it rests on."""
    return f"{interval_text(point, low, high)} (n={runs})"


def test_interval_text_shows_the_digits_that_tell_the_numbers_apart() -> None:
    assert interval_text(1.5, 1.25, 1.75) == "1.5 [1.25, 1.75]"
    assert interval_text(1.19962, 1.19951, 1.19973) == "1.1996 [1.1995, 1.1997]"
    assert interval_text(1.2, 1.2, 1.2) == "1.2 [1.2, 1.2]"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SWEEP/<variant>/seed<k>/ toy runs (4 members, 10 rounds) and sweep.yaml listing seed 3 as well, which
    PBT has only half done and the others have not started: it is left out."""
    root = tmp_path_factory.mktemp("sweep")
    for variant in VARIANTS:
        for seed in SEEDS:
            run_toy(root / variant / f"seed{seed}", search=variant, seed=seed, max_budget=40)
    shutil.copytree(root / "PBT" / "seed0", root / "PBT" / "seed3")
    history = root / "PBT" / "seed3" / "history.csv"
    history.write_text("".join(history.read_text().splitlines(keepends=True)[:1 + 4 * 5]))
    (root / "sweep.yaml").write_text(yaml.safe_dump({
        "experiment": {"run": {"env": "toy", "t_ready": 4, "max_budget": 40}}, "seeds": [*SEEDS, 3],
        "variants": [{"name": v, "settings": {"search": v}} for v in VARIANTS], "baseline": "none"}))
    return root


@pytest.fixture(scope="module")
def reported(sweep: Path) -> tuple[list[str], str]:
    """The report over the sweep, run once: the paths it printed and its notes."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        assert main([str(sweep), "--reps", str(REPS)]) == 0
    return stdout.getvalue().splitlines(), stderr.getvalue()


def scores_of(sweep: Path, variant: str, column: int) -> np.ndarray:
    return np.array([[final_score(sweep / variant / f"seed{seed}")[column]] for seed in SEEDS])


def test_iqm_and_cis_match_rliable_called_directly(sweep: Path, reported: tuple[list[str], str]) -> None:
    table = (sweep / "report" / "statistics.md").read_text()
    summaries = [stats.summarize({v: scores_of(sweep, v, column) for v in VARIANTS}, "none", reps=REPS)
                 for column in (0, 1)]
    for variant in VARIANTS:
        cells = table_row(table, variant)
        assert cells[1] == "3"  # the half-done seed 3 is left out
        for column, first in ((0, 2), (1, 5)):
            point, interval = rliable_aggregates(scores_of(sweep, variant, column))
            iqm, mean = (summaries[column].aggregates[name][variant] for name in ("IQM", "mean"))
            assert [iqm.value, iqm.low, iqm.high] == pytest.approx([point[0], *interval[:, 0]], rel=1e-12)
            assert [mean.value, mean.low, mean.high] == pytest.approx([point[1], *interval[:, 1]], rel=1e-12)
            assert cells[first:first + 2] == [cell(point[0], *interval[:, 0]), cell(point[1], *interval[:, 1])]
    # the CIs are real intervals: PBT's seeds differ, so its IQM interval has width
    assert summaries[0].aggregates["IQM"]["PBT"].high > summaries[0].aggregates["IQM"]["PBT"].low
    assert table_row(table, "none")[4] == "baseline"


def test_probability_of_improvement_matches_rliable(sweep: Path, reported: tuple[list[str], str]) -> None:
    table = (sweep / "report" / "statistics.md").read_text()
    summary = stats.summarize({v: scores_of(sweep, v, 0) for v in VARIANTS}, "none", reps=REPS)
    for variant in ("PBT", "PB2"):
        point, interval = rliable_improvement(scores_of(sweep, variant, 0), scores_of(sweep, "none", 0))
        est = summary.improvement[variant]
        assert 0 <= est.low <= est.value <= est.high <= 1
        assert [est.value, est.low, est.high] == pytest.approx([point, *interval], rel=1e-12)
        assert table_row(table, variant)[4] == cell(point, *interval)


def test_statistics_on_overlapping_scores_equal_rliables_own() -> None:
    """Where the strategies overlap (the toy sweep's PoI is 1), and for the three statistics pbx computes in
    one array operation: probability of improvement, performance profile, IQM learning curve."""
    rng = np.random.default_rng(0)
    scores = {"a": rng.normal(0, 1, (6, 1)), "b": rng.normal(0.5, 1, (5, 1)), "c": rng.normal(0, 1, (2, 1))}
    summary = stats.summarize(scores, "a", reps=REPS)
    point, interval = rliable_improvement(scores["b"], scores["a"])
    est = summary.improvement["b"]
    assert 0 < point < 1 and [est.value, est.low, est.high] == pytest.approx([point, *interval], rel=1e-12)
    assert not summary.improvement["c"].has_interval and not summary.aggregates["IQM"]["c"].has_interval  # 2 runs
    np.random.seed(stats.SEED)
    profile, cis = rly.create_performance_profile({"b": scores["b"]}, summary.taus, reps=REPS)
    assert summary.profiles["b"] == pytest.approx(profile["b"]) and summary.profile_cis["b"] == pytest.approx(cis["b"])
    assert "c" not in summary.profile_cis and summary.profiles["c"][0] == 1 and summary.profiles["c"][-1] == 0
    curves = rng.normal(size=(5, 7))
    np.random.seed(stats.SEED)
    frames = range(curves.shape[-1])
    point, interval = rly.get_interval_estimates(
        {"x": curves[:, None, :]}, lambda s: np.array([metrics.aggregate_iqm(s[..., f]) for f in frames]), reps=REPS)
    assert np.concatenate(stats.curve(curves[:, None, :], REPS)) == pytest.approx(np.concatenate([point["x"], *interval["x"]]))


def test_tables_and_figures_are_written(sweep: Path, reported: tuple[list[str], str]) -> None:
    printed, notes = reported
    out = sweep / "report"
    names = ("comparison.png", "comparison.md", "statistics.md", "statistics.tex", "intervals.png", "profile.png")
    assert printed == [str(out / name) for name in names]
    assert notes.splitlines() == [f"note: leaving out {sweep / 'none' / 'seed3'}: not started",
                                  f"note: leaving out {sweep / 'PBT' / 'seed3'}: not finished",
                                  f"note: leaving out {sweep / 'PB2' / 'seed3'}: not started"]
    for name in ("comparison.png", "intervals.png", "profile.png"):
        image = matplotlib.image.imread(out / name)
        assert image.shape[1] > 800 and image[..., :3].std() > 0.05
    tex = (out / "statistics.tex").read_text()
    for command in ("\\begin{tabular}{llcccccc}", "\\toprule", "\\midrule", "\\bottomrule", "P($>$ none)"):
        assert command in tex
    md = (out / "statistics.md").read_text()
    pbt = table_row(md, "PBT")
    assert tex.count(" \\\\\n") == 2 * (2 + len(VARIANTS)) and f"PBT & 3 & {pbt[2]} & {pbt[3]} & {pbt[4]}" in tex
    assert "interquartile mean" in md and "stratified bootstrap" in md and f"{REPS} resamples" in md
    assert not (sweep / "PBT" / "seed0" / "report").exists()  # a sweep's runs get no report of their own


def test_few_runs_get_no_ci_and_missing_test_scores_say_na(sweep: Path, tmp_path: Path) -> None:
    """Loose run folders: grouped by strategy, baseline the `none` strategy; PBT with 2 runs has no interval;
    runs without test scores give n/a, not NaN."""
    for seed in SEEDS:
        shutil.copytree(sweep / "none" / f"seed{seed}", tmp_path / f"none{seed}")
        with open(tmp_path / f"none{seed}" / "history.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        with open(tmp_path / f"none{seed}" / "history.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows({**row, "test_score": "nan"} for row in rows)
    runs = [tmp_path / f"none{seed}" for seed in SEEDS] + [sweep / "PBT" / f"seed{seed}" for seed in (0, 1)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*map(str, runs), "--out", str(tmp_path / "out"), "--reps", "50"]) == 0
    table = (tmp_path / "out" / "statistics.md").read_text()
    assert table_row(table, "strategy")[4] == "train: P(> none) [95% CI]"
    pbt, none = table_row(table, "PBT"), table_row(table, "none")
    assert pbt[2].endswith("(n=2, no CI)") and pbt[4].endswith("(n=2, no CI)")
    assert none[5:] == ["n/a", "n/a", "baseline"] and pbt[7] == "n/a"  # no baseline test score to compare with
    assert "nan" not in "".join(line for line in table.splitlines() if line.startswith("|")).lower()


def test_bad_input_is_one_line_error(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    lacking = tmp_path / "lacking"
    shutil.copytree(sweep / "none", lacking / "none")
    (lacking / "sweep.yaml").write_text(yaml.safe_dump({"seeds": [0], "baseline": "none", "variants": [
        {"name": "none", "settings": {}}, {"name": "PB2", "settings": {}}]}))
    cases = {
        (str(tmp_path / "empty"),): f"{tmp_path / 'empty'}: not a pbx run folder",
        (str(lacking),): f"{lacking / 'PB2'}: no finished run of variant 'PB2'",
        (str(sweep), "--baseline", "PBX"): "--baseline 'PBX' is not among the strategies (none, PBT, PB2)",
        (str(sweep), "--reps", "0"): "--reps must be at least 1, got 0",
        (str(sweep), str(sweep / "PBT" / "seed0")): "sweep folders are reported together, not beside run folders",
    }
    for args, message in cases.items():
        assert main([*args, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[-1].startswith("error: ") and message in err[-1], err
        assert all(line.startswith("note: ") for line in err[:-1])
    assert not (tmp_path / "out").exists()
