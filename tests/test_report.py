"""``python -m pbx.report`` on synthetic run folders and a real toy run: files, numbers in the tables, grouping,
bad input."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import statistics
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import yaml

from pbx.config import resolve
from pbx.errors import UsageError
from pbx.history import EVALUATOR_ROLE, RESULT_ROLE, History, HistoryLog, Row
from pbx.standings import best_rows
from pbx.report import main
from pbx.reporting import LAST_K, default_out, headline, load_run, member_kind, run_labels
from pbx.reporting.plots import _schedule_axis
from pbx.reporting.pooling import pool, with_member_kind
from pbx.space import Categorical, Continuous, Space

from conftest import run_toy

SPACE = Space({"lr": Continuous(1e-5, 1e-3, log=True), "aug": Categorical(("crop", "flip", "rotate")),
               "h0": Continuous(0.0, 1.0, default=0.5)})
POP, ROUNDS, T_READY = 4, 10, 100
STRATEGIES = ("PB2", "PBT")
SEEDS = (0, 1, 2)


def make_run(folder: Path, search: str, seed: int, env: str = "toy", selection: str = "truncation",
             test_every: int = 1) -> list[Row]:
    """A run folder as the runners write it: the worst member copies the best after every round.

    ``test_every=0`` leaves test scores NaN throughout; otherwise they are NaN in rounds not divisible by it.
    """
    rng = np.random.default_rng([seed, len(search)])
    run = {"env": env, "search": search, "selection": selection, "quantile": 0.25, "pop_size": POP,
           "t_ready": T_READY, "max_budget": T_READY * ROUNDS, "seed": seed, "device": "auto",
           "space": "search_spaces/x.yaml", "name": folder.name}
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(
        {"run": run, "space": SPACE.to_dict(), "strategy": {}, "member": {}}, sort_keys=False))
    log = HistoryLog(folder / "history.csv", SPACE, POP)
    configs = [SPACE.sample(rng) for _ in range(POP)]
    scores = [0.0] * POP
    rows: list[Row] = []
    for r in range(ROUNDS):
        parents = list(range(POP))
        if r > 0:
            order = np.argsort(scores)
            worst, best = int(order[0]), int(order[-1])
            parents[worst] = best
            scores[worst] = scores[best]
            configs[worst] = {**configs[best], "lr": SPACE.params["lr"].clip(configs[best]["lr"] * 1.2),
                              "aug": SPACE.params["aug"].sample(rng)}
        scores = [s + float(rng.normal(0.5, 0.3)) for s in scores]
        tested = test_every and r % test_every == 0
        round_rows = [Row(m, r, (r + 1) * T_READY, 0.1 * (r + 1), scores[m],
                          scores[m] - 0.2 + float(rng.normal(0, 0.1)) if tested else math.nan,
                          parents[m], parents[m] != m, configs[m]) for m in range(POP)]
        log.append(round_rows)
        rows += round_rows
    return rows


def final_of(rows: list[Row]) -> tuple[float, float]:
    """The final score as the report defines it, computed here without pandas."""
    return best_of_round(rows, max(r.round for r in rows))


def best_of_round(rows: list[Row], r: int) -> tuple[float, float]:
    """(train, test) of round ``r``'s best-on-train member (these runs have no NaN train scores)."""
    best = max((row for row in rows if row.round == r), key=lambda row: (row.score, -row.member))
    return best.score, best.test_score


def finite_mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.mean(finite) if finite else math.nan


def headline_of(rows: list[Row], k: int = LAST_K) -> list[float]:
    """Best member's, population mean's, last-k's and the two areas' (train, test), flat, computed here without
    pandas. These runs' rounds are equally long, so an area is the plain mean over the rounds with the score."""
    last = max(r.round for r in rows)
    population = [row for row in rows if row.round == last]
    recent = [best_of_round(rows, r) for r in range(max(0, last + 1 - k), last + 1)]
    every = [best_of_round(rows, r) for r in range(last + 1)]
    means = [(finite_mean([row.score for row in rows if row.round == r]),
              finite_mean([row.test_score for row in rows if row.round == r])) for r in range(last + 1)]
    return [*final_of(rows), finite_mean([row.score for row in population]),
            finite_mean([row.test_score for row in population]),
            finite_mean([train for train, _ in recent]), finite_mean([test for _, test in recent]),
            *(finite_mean([pair[i] for pair in every]) for i in (0, 1)),
            *(finite_mean([pair[i] for pair in means]) for i in (0, 1))]


def mean_std_text(values: list[float]) -> str:
    """The report's cell for ``values`` over runs: mean ± std of the finite ones, and how many if not all."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "n/a"
    text = f"{statistics.mean(finite):.4g}" + (f" ± {statistics.stdev(finite):.4g}" if len(finite) > 1 else "")
    return text + (f" ({len(finite)} of {len(values)})" if len(finite) < len(values) else "")


def table_row(markdown: str, label: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, list[Row]]:
    """2 strategies x 3 seeds; PBT seed 0 is never tested, PB2 every third round (the last included)."""
    root = tmp_path_factory.mktemp("runs")
    runs = {}
    for search in STRATEGIES:
        for seed in SEEDS:
            test_every = 3 if search == "PB2" else 0 if seed == 0 else 1
            folder = root / f"toy-{search}-s{seed}"
            runs[folder] = make_run(folder, search, seed, test_every=test_every)
    return runs


@pytest.fixture(scope="module")
def written(runs: dict[Path, list[Row]]) -> list[str]:
    """The report over all six runs, run once, with the paths it printed."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([str(path) for path in runs] + ["--reps", "100"]) == 0
    return stdout.getvalue().splitlines()


def test_per_run_plots_are_real_images(runs: dict[Path, list[Row]], written: list[str]) -> None:
    for path in runs:
        for name in ("scores.png", "schedules.png"):
            png = path / "report" / name
            assert str(png) in written
            assert png.stat().st_size > 20_000
            image = matplotlib.image.imread(png)
            assert image.shape[0] > 400 and image.shape[1] > 800
            assert image[..., :3].std() > 0.05  # not a blank canvas


def test_run_summary_names_best_member_and_final_score(runs: dict[Path, list[Row]],
                                                       written: list[str]) -> None:
    path, rows = next(iter(runs.items()))
    train, test = final_of(rows)
    best = max((r for r in rows if r.round == ROUNDS - 1), key=lambda row: row.score).member
    summary = (path / "report" / "summary.md").read_text()
    assert f"Final score: train {train:.4g}, test {test:.4g}** (member {best})" in summary
    assert table_row(summary, f"**{best}** (best)")[1] == f"{train:.4g}"
    members, categories = summary.split("Scores and configs are")
    assert sum(1 for line in members.splitlines() if line.startswith("| ")) == 2 + POP
    # each choice of the categorical hyperparameter: its share of member-rounds, over the run and at the end
    shares = [line.split(" | ") for line in categories.splitlines() if line.startswith("| aug |")]
    assert [row[1] for row in shares] == ["crop", "flip", "rotate"]
    assert sum(int(row[2].rstrip("%")) for row in shares) in (99, 100, 101)


def test_comparison_table_has_mean_std_of_the_headline_numbers(runs: dict[Path, list[Row]],
                                                               written: list[str]) -> None:
    """Best member, population mean and last-k mean, train and test, each mean ± std over the runs."""
    out = next(iter(runs)).parent / "report"
    table = (out / "comparison.md").read_text()
    assert {str(out / "comparison.md"), str(out / "comparison.png")} <= set(written)
    header = table_row(table, "strategy")
    assert header[2:] == ["best member: train", "best member: test", "population mean: train",
                          "population mean: test", f"best member, mean of last {LAST_K} rounds: train",
                          f"best member, mean of last {LAST_K} rounds: test", "best member, area: train",
                          "best member, area: test", "population mean, area: train", "population mean, area: test",
                          "kept answer: train", "kept answer: test", "steps per member"]
    for search in STRATEGIES:
        heads = [headline_of(rows) for path, rows in runs.items() if f"-{search}-" in path.name]
        cells = table_row(table, search)
        assert cells[1] == "3" and cells[-1] == mean_std_text([ROUNDS * T_READY] * 3)
        assert cells[2:12] == [mean_std_text([head[i] for head in heads]) for i in range(10)]
        assert cells[12:14] == cells[2:4]  # no restart: the kept answer is the final score
    assert "(2 of 3)" in table_row(table, "PBT")[3]  # PBT seed 0 has no test score
    assert sum(line.startswith("| P") for line in table.splitlines()) == len(STRATEGIES)  # one row each
    assert "no selection on the test set" in table and "Population mean: the mean over all members" in table


def test_headline_numbers_differ_where_the_best_member_overstates(runs: dict[Path, list[Row]]) -> None:
    """In these runs the best member is a maximum over members: the population mean is lower, and the
    last-k mean averages rounds with a test score only (PB2 tests every third round)."""
    path, rows = next((p, r) for p, r in runs.items() if "PB2" in p.name)
    head = headline(load_run(path))
    assert [*head.best, *head.population, *head.last_k, *head.area, *head.population_area] == pytest.approx(
        headline_of(rows), nan_ok=True)
    assert head.population[0] < head.best[0] and head.k == LAST_K
    assert head.last_k[1] == pytest.approx(statistics.mean(best_of_round(rows, r)[1] for r in (6, 9)))
    assert head.area[1] == pytest.approx(statistics.mean(best_of_round(rows, r)[1] for r in (0, 3, 6, 9)))
    assert head.population_area[0] < head.area[0] < head.best[0]  # these scores climb: the past drags


def test_area_weights_each_round_by_the_steps_it_trained(tmp_path: Path) -> None:
    """IPBT doubles its rounds after a restart: rounds of 100, 100 and 200 steps (in the third round the other
    members were skipped, so their steps stay behind) weigh 1:1:2, and a round with no test score drops out
    of the test area's weights, not into them as 0."""
    make_run(tmp_path / "run", "PBT", 0)
    (tmp_path / "run" / "history.csv").unlink()
    steps, best, rest, tests = [(100, 100), (200, 200), (400, 200)], [1.0, 2.0, 4.0], [0.0, 1.0, 3.0], \
        [3.0, math.nan, 5.0]
    rows = [Row(m, r, steps[r][min(m, 1)], 1.0, best[r] if m == 0 else rest[r], tests[r] if m == 0 else math.nan,
                m, False, SPACE.initial()) for r in range(3) for m in range(POP)]
    HistoryLog(tmp_path / "run" / "history.csv", SPACE, POP).append(rows)
    head = headline(load_run(tmp_path / "run"))
    assert head.area == pytest.approx(((1 * 100 + 2 * 100 + 4 * 200) / 400, (3 * 100 + 5 * 200) / 300))
    means = [(b + (POP - 1) * o) / POP for b, o in zip(best, rest)]
    assert head.population_area[0] == pytest.approx((means[0] * 100 + means[1] * 100 + means[2] * 200) / 400)
    assert head.best == (4.0, 5.0) and head.last_k[0] == pytest.approx(7 / 3) and head.kept == head.best


def test_kept_answers_with_an_earlier_generations_best_when_it_scored_higher(tmp_path: Path) -> None:
    """Round 2 restarts (IPBT's marks) after a generation whose best scored 6: the kept answer is that member's
    (6, and no test score: round 1 took none), though the final best is 4; the best member stays the final."""
    make_run(tmp_path / "run", "PBT", 0)
    (tmp_path / "run" / "history.csv").unlink()
    best, tests = [1.0, 6.0, 4.0], [3.0, math.nan, 5.0]
    rows = [Row(m, r, 100 * (r + 1), 1.0, best[r] - m, tests[r] if m == 0 else math.nan, m, False, SPACE.initial(),
                restart=r == 2) for r in range(3) for m in range(POP)]
    HistoryLog(tmp_path / "run" / "history.csv", SPACE, POP).append(rows)
    head = headline(load_run(tmp_path / "run"))
    assert head.best == (4.0, 5.0) and head.kept[0] == 6.0 and math.isnan(head.kept[1])


def test_test_scores_taken_only_at_the_end_of_runs_that_end_apart_draw_no_test_curve(tmp_path: Path) -> None:
    """IPBT's members end a few steps short of PBT's, and a run tested only after its last round has one test
    point: the runs share no step to draw a test curve over, so the comparison draws the train curves alone."""
    paths = []
    for seed, end in ((0, 300), (1, 280)):
        path = tmp_path / f"toy-PBT-s{seed}"
        make_run(path, "PBT", seed)
        (path / "history.csv").unlink()
        rows = [Row(m, r, min(100 * (r + 1), end), 1.0, float(r + m), 1.0 if r == 2 else math.nan, m, False,
                    SPACE.initial()) for r in range(3) for m in range(POP)]
        HistoryLog(path / "history.csv", SPACE, POP).append(rows)
        paths.append(str(path))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([*paths, "--out", str(tmp_path / "out"), "--reps", "20"]) == 0
    assert (tmp_path / "out" / "comparison.png").stat().st_size > 20_000


def test_best_member_ranks_nan_last_and_ties_to_lowest_id() -> None:
    rows = [Row(m, 0, 10, 1.0, score, 0.5 * m, m, False, SPACE.initial())
            for m, score in enumerate([math.nan, 2.0, 2.0, 1.0])]
    best = best_rows(History(SPACE.names).with_rows(rows).frame)
    assert best["member"].tolist() == [1] and best["test_score"].tolist() == [0.5]


def test_comparison_groups_by_strategy_and_selection(tmp_path: Path) -> None:
    make_run(tmp_path / "a", "PBT", 0)
    make_run(tmp_path / "b", "PBT", 1, selection="wta")
    make_run(tmp_path / "c", "PBT", 2, selection="wta")
    runs = [load_run(tmp_path / name) for name in "abc"]
    assert run_labels(runs) == ["PBT (truncation)", "PBT (wta)", "PBT (wta)"]
    assert run_labels(runs[1:]) == ["PBT", "PBT"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([str(tmp_path / name) for name in "abc"] + ["--out", str(tmp_path / "results"), "--reps", "20"]) == 0
    table = (tmp_path / "results" / "comparison.md").read_text()
    assert table_row(table, "PBT (truncation)")[1] == "1"
    assert table_row(table, "PBT (wta)")[1] == "2"


def test_default_out_is_in_the_common_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_out([Path("runs/a"), Path("runs/b")]) == Path("runs/report")
    assert default_out([Path("a"), Path("b")]) == Path("report")
    assert default_out([tmp_path / "x" / "a", tmp_path / "y" / "b"]) == Path("report")
    assert default_out([Path("/a/b"), Path("/c/d")]) == Path("report")


def test_bad_input_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    make_run(tmp_path / "bigfish", "PBT", 0, env="bigfish")
    make_run(tmp_path / "toy", "PBT", 0)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.yaml").write_text("run: [unclosed\n")
    (tmp_path / "bad" / "history.csv").write_text("")
    cases = {
        (str(tmp_path / "missing"),): "no such run folder",
        (str(tmp_path / "empty"),): "no config.yaml or history.csv",
        (str(tmp_path / "bad"),): "not valid YAML",
        (str(tmp_path / "toy"), str(tmp_path / "bigfish")): "need normalisation ranges",
        (str(tmp_path / "toy"), str(tmp_path / "toy")): "more than once",
        (str(tmp_path / "toy"), "--last-k", "0"): "--last-k must be at least 1, got 0",
    }
    for args, message in cases.items():
        assert main(list(args)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
        assert args[0] in err or message in ("more than once", "--last-k must be at least 1, got 0",
                                             "need normalisation ranges")
    assert not (tmp_path / "toy" / "report").exists()  # checked before anything was written


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pbx.report", *args], capture_output=True, text=True,
                          timeout=60)


def test_command_line_empty_history_exits_2_without_traceback(tmp_path: Path) -> None:
    make_run(tmp_path / "run", "PBT", 0)
    history = tmp_path / "run" / "history.csv"
    history.write_text(history.read_text().splitlines()[0] + "\n")
    result = report(str(tmp_path / "run"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == f"error: {history}: no finished round yet, nothing to report\n"


def test_help_describes_outputs() -> None:
    result = report("--help")
    assert result.returncode == 0 and "comparison" in result.stdout and "RUN_DIR" in result.stdout


def test_missing_run_dir_argument_is_one_line_and_exit_2() -> None:
    result = report()
    assert result.returncode == 2
    assert result.stderr == "error: the following arguments are required: RUN_DIR (see --help)\n"


def test_real_toy_run_reports_population_mean_and_last_k_beside_the_best_member(tmp_path: Path) -> None:
    """A run folder written by the runner (not by ``make_run``): the command line's summary and table
    carry the headline numbers read off the runner's own history, with ``--last-k``; its rounds are equally
    long, so the areas are means over the rounds."""
    frame = run_toy(tmp_path / "run", search="random", max_budget=40).frame
    last = frame[frame["round"] == frame["round"].max()]
    every = best_rows(frame)
    best = every.tail(3)
    per_round = frame.groupby("round")[["score", "test_score"]].mean()
    assert len(last) == 4 and len(best) == 3 and len(every) > 3 and last["test_score"].notna().all()
    expected = [*best.iloc[-1][["score", "test_score"]], last["score"].mean(), last["test_score"].mean(),
                best["score"].mean(), best["test_score"].mean(), every["score"].mean(), every["test_score"].mean(),
                *per_round.mean()]
    assert expected[0] > expected[2]  # random search: the best member is a maximum over different configs
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([str(tmp_path / "run"), "--out", str(tmp_path / "out"), "--last-k", "3"]) == 0
    assert str(tmp_path / "out" / "comparison.md") in stdout.getvalue().splitlines()
    summary = (tmp_path / "run" / "report" / "summary.md").read_text()
    cells = [f"{value:.4g}" for value in expected]
    train, test, pop_train, pop_test, k_train, k_test, area_train, area_test, pop_area_train, pop_area_test = cells
    assert f"**Final score: train {train}, test {test}**" in summary
    assert f"Population mean in the last round: train {pop_train}, test {pop_test}." in summary
    assert f"Best member's mean over the last 3 rounds: train {k_train}, test {k_test}." in summary
    assert (f"(the area): best member train {area_train}, test {area_test}; population mean train "
            f"{pop_area_train}, test {pop_area_test}." in summary)
    assert area_train != k_train  # the toy's scores climb, so the whole run's mean is not the last rounds'
    table = (tmp_path / "out" / "comparison.md").read_text()
    assert table_row(table, "random")[1:-1] == ["1", *cells, train, test]  # no restart: kept is the final score
    assert "mean of last 3 rounds" in table_row(table, "strategy")[6]
    # make_run writes what the runner writes, but for the hyperparameter columns
    make_run(tmp_path / "made", "random", 0)
    runner_columns, made_columns = ((tmp_path / name / "history.csv").read_text().splitlines()[0].split(",")
                                    for name in ("run", "made"))
    assert [c for c in runner_columns if c not in ("h0", "h1")] == [c for c in made_columns if c not in SPACE.names]


def test_runs_of_different_experiments_are_not_pooled(tmp_path: Path) -> None:
    """Three toy PBT runs of different population and budget under one label: one line naming the differing
    keys and exit 2, nothing written; with --split, one group per experiment, the values in the labels."""
    for name, pop, budget in (("a", 4, 40), ("b", 8, 24), ("c", 2, 32)):
        run_toy(tmp_path / name, pop_size=pop, max_budget=budget)
    folders = [str(tmp_path / name) for name in "abc"]
    result = report(*folders, "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: runs under 'PBT' are not one experiment: they differ in "
                                    "run.max_budget, run.pop_size (")
    assert not (tmp_path / "out").exists() and not (tmp_path / "a" / "report").exists()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*folders, "--out", str(tmp_path / "out"), "--split", "--reps", "20"]) == 0
    table = (tmp_path / "out" / "comparison.md").read_text()
    assert table_row(table, "PBT (max_budget=24, pop_size=8)")[1] == "1"



@pytest.mark.parametrize("runs, differ", [
    ({"toy": {"env": "toy"}, "cart": {"env": "CartPole-v1"}},
     "they train other envs ({toy}: toy, {cart}: CartPole-v1)"),
    ({"ppo": {"env": "Pendulum-v1", "algo": "ppo"}, "sac": {"env": "Pendulum-v1", "algo": "sac"}},
     "they train other agents ({ppo}: PPO, {sac}: SAC)"),
])
def test_runs_of_other_envs_or_agents_are_refused_naming_that_not_every_setting(
        tmp_path: Path, runs: dict[str, dict[str, str]], differ: str) -> None:
    """A toy run and a CartPole run were refused with a 4,713-character list of some 80 differing settings and no
    word of the env; the refusal names the first difference that matters (the env, then the agent) in a short
    line."""
    for name, run in runs.items():
        make_run(tmp_path / name, "PBT", 0)
        config = resolve([{"run": {**run, "search": "PBT"}}]).to_dict()
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump({**config, "space": SPACE.to_dict()},
                                                                    sort_keys=False))
    with pytest.raises(UsageError) as refused:
        pool([load_run(tmp_path / name) for name in runs], ["PBT"] * 2, split=False)
    message = str(refused.value)
    folders = {name: tmp_path / name for name in runs}
    assert message.startswith(f"runs under 'PBT' are not one experiment: {differ.format(**folders)}, and "), message
    assert message.endswith("; report them apart, or give --split to group them by those values")
    assert len(message) < 250 + 2 * len(str(tmp_path))


def test_strategies_at_unequal_budgets_are_compared_with_a_note_and_a_steps_column(tmp_path: Path) -> None:
    """PBT at max_budget 40 against none at ten times it: the comparison says the budgets differ, on the command's
    stderr and in the generated files, and its table shows the steps each strategy's members trained."""
    run_toy(tmp_path / "pbt", max_budget=40)
    run_toy(tmp_path / "none", search="none", max_budget=400)
    result = report(str(tmp_path / "pbt"), str(tmp_path / "none"), "--out", str(tmp_path / "out"), "--reps", "20",
                    "--baseline", "none")
    note = ("the strategies were not trained on one budget, so their scores differ by it too: PBT max_budget 40, "
            "t_ready 4, members trained 40 steps; none max_budget 400, t_ready 4, members trained 400 steps")
    assert result.returncode == 0 and f"note: {note}\n" in result.stderr, result.stderr
    for name in ("statistics.md", "comparison.md"):
        assert f"Note: {note}." in (tmp_path / "out" / name).read_text()
    table = (tmp_path / "out" / "comparison.md").read_text()
    assert "steps per member" in table and table_row(table, "none")[-1] == "400"

def test_runs_of_other_library_versions_are_pooled_with_a_note(tmp_path: Path) -> None:
    """Two seeds of one toy experiment, one trained (and resumed) under other NumPy versions: pooled, and the
    command and the comparison's files name the library and its versions."""
    for seed in (0, 1):
        run_toy(tmp_path / f"s{seed}", seed=seed, max_budget=24)
    config = yaml.safe_load((tmp_path / "s1" / "config.yaml").read_text())
    numpy = config["pbx"]["libraries"]["numpy"]
    config["pbx"] = {**config["pbx"], "libraries": {"numpy": "0.0.1"}, "libraries_continued": [{"numpy": "0.0.2"}]}
    (tmp_path / "s1" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = report(str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "out"), "--reps", "20")
    note = (f"runs under 'PBT' were trained with other library versions, pooled all the same (pbx compares code "
            f"and settings, not versions): numpy {numpy} (1 of 2 runs), 0.0.1 then 0.0.2 (1 of 2 runs)")
    assert result.returncode == 0 and result.stderr == f"note: {note}\n", result.stderr
    for name in ("statistics.md", "comparison.md"):
        assert f"Note: {note}." in (tmp_path / "out" / name).read_text()
    assert table_row((tmp_path / "out" / "comparison.md").read_text(), "PBT")[1] == "2"


def test_an_envs_own_code_must_agree_among_its_runs_not_across_envs(tmp_path: Path) -> None:
    """Across games a strategy's runs pool though each game's code hash is its own; two runs of one game whose
    code differs do not."""
    for name, env, code in (("a0", "tasks:A-v0", "a" * 16), ("a1", "tasks:A-v0", "a" * 16),
                            ("b0", "more:B-v0", "b" * 16)):
        make_run(tmp_path / name, "PBT", int(name[1]), env=env)
        config = yaml.safe_load((tmp_path / name / "config.yaml").read_text())
        config["pbx"] = {"version": "0.1.0", "commit": None, "code": "0" * 16, "env_code": code}
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    runs = [load_run(tmp_path / name) for name in ("a0", "a1", "b0")]
    assert [len(group) for group in pool(runs, ["PBT"] * 3, split=False).groups.values()] == [3]
    edited = {**runs[1].config, "pbx": {**runs[1].config["pbx"], "env_code": "c" * 16}}
    runs[1] = dataclasses.replace(runs[1], config=edited)
    with pytest.raises(UsageError, match=r"runs under 'PBT' are not one experiment: they differ in pbx.env_code \("):
        pool(runs, ["PBT"] * 3, split=False)


def test_member_kind_in_labels_and_evaluators_are_not_results(tmp_path: Path) -> None:
    """A PPO and a DrAC run of PBT on one game get labels that say which; a history's evaluator rows (a
    ``role`` column) count for neither the best member nor the population mean, in the tables either."""
    for name, space in (("ppo", SPACE), ("drac", Space({**SPACE.params, "aug_type": Categorical(("crop",))}))):
        folder = tmp_path / name
        folder.mkdir()
        run = {"env": "bigfish", "search": "PBT", "pop_size": 2, "t_ready": 10, "max_budget": 10, "seed": 0}
        (folder / "config.yaml").write_text(yaml.safe_dump({"run": run, "space": space.to_dict(), "member": {}}))
        log = HistoryLog(folder / "history.csv", space, 2)
        log.append([Row(m, 0, 10, 1.0, 1.0 + 9 * m, 2.0 + 9 * m, m, False, space.initial(), role)
                    for m, role in enumerate((RESULT_ROLE, EVALUATOR_ROLE))])
    runs = [load_run(tmp_path / name) for name in ("ppo", "drac")]
    assert [member_kind(run) for run in runs] == ["PPO", "DrAC"]
    assert with_member_kind(runs, run_labels(runs)) == ["PBT [PPO]", "PBT [DrAC]"]
    assert with_member_kind(runs, ["PBT-PPO", "PBT-drac-crop"]) == ["PBT-PPO", "PBT-drac-crop"]  # named already
    head = headline(runs[0])
    assert head.best == (1.0, 2.0) and head.population == (1.0, 2.0)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([str(tmp_path / "ppo"), str(tmp_path / "drac"), "--out", str(tmp_path / "out"), "--reps", "20"]) == 0
    assert table_row((tmp_path / "out" / "comparison.md").read_text(), "PBT [PPO]")[1:6] == ["1", "1", "2", "1", "2"]


def test_the_train_score_panel_draws_the_points_within_rounds_along_the_lineage(tmp_path: Path) -> None:
    """A run that kept curves: each member's train curve is its points within rounds (not one score a round), and
    a member that copied a donor starts from the donor's last point before the copy."""
    from pbx.reporting.plots import _segments

    run_toy(tmp_path / "run", search="PBT", max_budget=20)
    run = load_run(tmp_path / "run")
    assert len(run.curves) == 4 * 20  # the toy takes a point after each of its steps
    within = {(int(m), int(r)): list(zip(g["steps"].astype(float), g["score"])) for (m, r), g in
              run.curves.groupby(["member", "round"])}
    segments = _segments(run.frame, run.frame["score"], from_zero=False, within=within)
    assert sum(len(s.steps) for s in segments) == len(run.curves) + sum(s.branched for s in segments)
    copied = run.frame[run.frame["parent"] != run.frame["member"]].iloc[0]
    branch = next(s for s in segments if s.branched and s.member == copied["member"])
    assert (branch.steps[0], branch.values[0]) == within[(int(copied["parent"]), int(copied["round"]) - 1)][-1]
    assert branch.steps[1:5] == [4.0 * copied["round"] + k for k in (1, 2, 3, 4)]


def test_a_horizon_scale_discount_is_drawn_on_its_horizons() -> None:
    frame = pd.DataFrame({"member": [0, 0], "round": [0, 1], "steps": [10, 20], "gamma": [0.95, 0.999]})
    fig, ax = plt.subplots()
    _schedule_axis(ax, frame, "gamma", Continuous(0.9, 0.9999, horizon=True), [0])
    assert ax.get_ylabel() == "gamma (horizon scale)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0.9", "0.99", "0.999", "0.9999"]
    to_axis = ax.transData.transform
    gaps = np.diff([to_axis((0, y))[1] for y in (0.9, 0.99, 0.999, 0.9999)])
    assert np.allclose(gaps, gaps[0])  # a decade of horizon is one step, as on the cube PBT and PB2 move it on
    plt.close(fig)
