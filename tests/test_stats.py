"""``python -m pbx.report`` statistics over a sweep of real toy runs: rliable's numbers, tables, figures, bad input."""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import yaml
from rliable import library as rly
from rliable import metrics

from pbx.config import resolve
from pbx.history import HistoryLog, Row
from pbx.report import main
from pbx.reporting import stats
from pbx.reporting.tables import interval_text
from pbx.space import Space

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


def cell(point: float, low: float, high: float, runs: int | str = len(SEEDS)) -> str:
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


def test_named_variants_keep_their_names_and_variants_picks_some(sweep: Path, tmp_path: Path) -> None:
    """A variant named in the sweep file (``name: zoo`` over held settings) is labelled by its name, not by
    its values; --variants reports some of the variants while another has no finished run (without it, that
    is an error), and the sweep's baseline counts only when picked."""
    picked = tmp_path / "picked"
    for source, name in (("none", "zoo"), ("PBT", "PBT"), ("PB2", "PB2")):
        shutil.copytree(sweep / source, picked / name, ignore=shutil.ignore_patterns("report"))
    (picked / "sweep.yaml").write_text(yaml.safe_dump({"seeds": list(SEEDS), "baseline": "zoo", "variants": [
        {"name": "zoo", "settings": {"search": "none", "t_ready": 4}}, {"name": "PBT", "settings": {"search": "PBT"}},
        {"name": "PB2", "settings": {"search": "PB2"}}, {"name": "random", "settings": {"search": "random"}}]}))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([str(picked), "--out", str(tmp_path / "all"), "--reps", "50"]) == 2
        assert main([str(picked), "--variants", "zoo", "PBT", "--out", str(tmp_path / "two"), "--reps", "50"]) == 0
        assert main([str(picked), "--variants", "PBT", "PB2", "--out", str(tmp_path / "no_zoo"), "--reps", "50"]) == 0
    assert not (tmp_path / "all").exists()
    table = (tmp_path / "two" / "statistics.md").read_text()
    assert table_row(table, "strategy")[4] == "train: P(> zoo) [95% CI]"
    assert table_row(table, "zoo")[4] == "baseline" and table_row(table, "PBT")[1] == str(len(SEEDS))
    assert "| PB2 |" not in table and "| random |" not in table
    table = (tmp_path / "no_zoo" / "statistics.md").read_text()
    assert "P(>" not in table_row(table, "strategy")[4] and "| zoo |" not in table


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
        (str(sweep), "--variants", "PBT", "PBX"): f"--variants 'PBX' is not a variant of {sweep} (none, PBT, PB2)",
        (str(sweep / "PBT" / "seed0"), "--variants", "PBT"): "--variants picks variants of sweep folders",
        (str(sweep), str(sweep / "PBT" / "seed0")): "sweep folders are reported together, not beside run folders",
    }
    for args, message in cases.items():
        assert main([*args, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[-1].startswith("error: ") and message in err[-1], err
        assert all(line.startswith("note: ") for line in err[:-1])
    assert not (tmp_path / "out").exists()


GAMES = ("bigfish", "coinrun", "jumper")
EASY = {"bigfish": (1, 40), "coinrun": (5, 10), "jumper": (1, 10)}  # train-procgen's EASY_GAME_RANGES


def procgen_run(folder: Path, env: str, search: str, seed: int, rounds: int = 3, t_ready: int = 512,
                max_budget: int | None = None) -> None:
    """A ProcGen run folder as the runner writes it (the resolved config, 2 members), with random scores inside
    the game's range instead of training."""
    cfg = resolve([{"run": {"env": env, "search": search, "seed": seed, "pop_size": 2, "t_ready": t_ready,
                            "max_budget": max_budget or t_ready * rounds, "name": folder.name},
                    "member": {"n_envs": 2, "n_steps": 256, "batch_size": 256}}])
    folder.mkdir(parents=True)
    cfg.write(folder / "config.yaml")
    space = Space.from_dict(cfg.to_dict()["space"])
    log = HistoryLog(folder / "history.csv", space, 2)
    rng = np.random.default_rng([seed, len(search), len(env)])
    low, high = EASY[env]
    for r in range(cfg.rules.fixed_rounds):
        log.append([Row(m, r, (r + 1) * t_ready, float(r), float(rng.uniform(low, high)),
                        float(rng.uniform(low, high)), m, False, space.initial()) for m in range(2)])


@pytest.fixture(scope="module")
def games_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sweep folder over three ProcGen games x (none, PBT) x 3 seeds, env among the swept keys."""
    root = tmp_path_factory.mktemp("games")
    variants = [{"name": f"{env}-{search}", "settings": {"env": env, "search": search}}
                for env in GAMES for search in ("none", "PBT")]
    for variant in variants:
        for seed in (0, 1, 2):
            procgen_run(root / variant["name"] / f"seed{seed}", **variant["settings"], seed=seed)
    (root / "sweep.yaml").write_text(yaml.safe_dump({
        "experiment": {"run": {"pop_size": 2, "t_ready": 512, "max_budget": 1536}}, "seeds": [0, 1, 2],
        "variants": variants, "baseline": "bigfish-none"}))
    return root


def normalised_final(sweep: Path, search: str, column: int) -> np.ndarray:
    """(seeds, games) of final scores read off history.csv, min-max normalised with train-procgen's ranges."""
    return np.array([[(final_score(sweep / f"{env}-{search}" / f"seed{seed}")[column] - EASY[env][0])
                      / (EASY[env][1] - EASY[env][0]) for env in GAMES] for seed in (0, 1, 2)])


def test_games_table_equals_rliable_on_normalised_scores(games_sweep: Path) -> None:
    """python -m pbx.report over a sweep with env swept: strategies without the env, rliable's four aggregates
    and the probability of improvement on normalised scores over 3 seeds x 3 games, a row per game, and the
    caution that 3 runs per game cannot give a 95% interval its coverage."""
    done = subprocess.run([sys.executable, "-m", "pbx.report", str(games_sweep), "--reps", "200"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    table = (games_sweep / "report" / "statistics.md").read_text()
    aggregates = [metrics.aggregate_iqm, metrics.aggregate_mean, metrics.aggregate_median,
                  metrics.aggregate_optimality_gap]
    for search in ("none", "PBT"):
        scores = normalised_final(games_sweep, search, 0)
        np.random.seed(stats.SEED)
        point, interval = rly.get_interval_estimates(
            {"x": scores}, lambda x: np.array([f(x) for f in aggregates]), reps=200)
        expected = [cell(point["x"][i], *interval["x"][:, i], runs="3×3") for i in range(4)]
        assert table_row(table, search)[1:6] == ["9", *expected]
    np.random.seed(stats.SEED)
    point, interval = rly.get_interval_estimates(
        {"x": (normalised_final(games_sweep, "PBT", 0), normalised_final(games_sweep, "none", 0))},
        metrics.probability_of_improvement, reps=200)
    assert table_row(table, "PBT")[6] == cell(point["x"], *np.ravel(interval["x"]), runs="3×3")
    assert table_row(table, "none")[6] == "baseline"
    per_game = table.split("## Per game: mean train score")[1]
    assert [table_row(per_game, env)[0] for env in GAMES] == list(GAMES)
    assert table_row(per_game, "game") == ["game", "none", "PBT"]  # budget 1536 steps: no published column
    assert "Caution: some intervals here cover the truth less often" in table and "IQM from 3 runs" in table
    assert "PPO, published" not in table
    for name in ("comparison.png", "intervals.png", "profile.png"):
        assert matplotlib.image.imread(games_sweep / "report" / name)[..., :3].std() > 0.05


def test_published_baseline_only_for_its_protocol_and_budget(tmp_path: Path) -> None:
    """train-procgen's PPO beside runs of its protocol (easy, 200 levels, 25M steps); never beside others."""
    procgen_run(tmp_path / "paper", "coinrun", "PBT", 0, t_ready=12_500_000, max_budget=25_000_000)
    procgen_run(tmp_path / "short", "coinrun", "PBT", 0)
    for name, shown in (("paper", True), ("short", False)):
        with contextlib.redirect_stdout(io.StringIO()):
            assert main([str(tmp_path / name), "--out", str(tmp_path / f"out-{name}"), "--reps", "20"]) == 0
        table = (tmp_path / f"out-{name}" / "statistics.md").read_text()
        assert ("| coinrun | " in table and "| 9.4 ± 0.1 |" in table and "| 8.7 ± 0.5 |" in table) == shown
        assert ("PPO, published" in table and "running mean of the last 100 training episodes" in table) == shown


def test_coverage_caution_names_the_cells_that_fall_short() -> None:
    """The IQM from 10 runs per game reaches 90% in the benchmark, the mean does not, nor anything from 5."""
    def est(runs: int, interval: bool = True) -> stats.Estimate:
        return stats.Estimate(0.5, 0.4 if interval else float("nan"), 0.6, runs)

    assert stats.coverage_caution([("IQM", est(10)), ("IQM", est(25)), ("mean", est(2, interval=False))]) is None
    line = stats.coverage_caution([("IQM", est(10)), ("IQM", est(5)), ("mean", est(12)), ("P", est(3))])
    assert line is not None and "\n" not in line
    assert "(IQM from 5 runs, mean from 3 runs, mean from 12 runs per game)" in line and "71%, 87%, 92%" in line


def test_two_seeds_a_game_get_no_interval_however_many_games() -> None:
    assert not stats.has_interval(np.zeros((2, 3))) and not stats.has_interval(np.zeros((2, 10)))
    assert stats.has_interval(np.zeros((3, 1))) and stats.has_interval(np.zeros((3, 6)), np.zeros((4, 6)))
