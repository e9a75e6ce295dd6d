"""The ProcGen peer study's comparison (benchmarks/peers/compare_procgen.py) on run folders made here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pbx.history import read_csv

ROOT = Path(__file__).resolve().parent.parent
ROUND = 65_536


def _runs(root: Path, pbx_offset: float) -> None:
    """3 seeds a side on bigfish: pbx's history (score100 per 65,536-step round), CleanRL's curve (every 16,384
    steps; only the rows at whole rounds count). Scores rise with steps; pbx's sit ``pbx_offset`` higher."""
    for seed in (1, 2, 3):
        steps = np.arange(1, 9) * ROUND
        folder = root / "bigfish" / f"pbx-s{seed}"
        folder.mkdir(parents=True)
        pd.DataFrame({"member": 0, "round": range(8), "steps": steps,
                      "score100": 1 + steps / 1e6 + pbx_offset + 0.01 * seed}).to_csv(folder / "history.csv")
        steps = np.arange(1, 37) * ROUND // 4  # CleanRL ran on past pbx: 9 rounds' worth
        folder = root / "bigfish" / f"cleanrl-s{seed}"
        folder.mkdir(parents=True)
        mean100 = 1 + steps / 1e6 + 0.01 * seed
        mean100[steps % ROUND != 0] = 99.0  # between rounds: never compared
        pd.DataFrame({"steps": steps, "mean100": mean100, "episodes": 1, "sps": 36}).to_csv(folder / "curve.csv")


def _compare(root: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers" / "compare_procgen.py"), str(root),
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_sides_are_compared_at_the_steps_both_reached(tmp_path) -> None:
    _runs(tmp_path / "same", 0.0)
    out = _compare(tmp_path / "same", "--out", str(tmp_path / "report"))
    assert "matched steps 65,536 to 524,288" in out  # pbx's 8 rounds, not CleanRL's 9
    # equal curves: equal means at every matched step, and P(pbx > CleanRL) 0.5 (every pair of equal seeds ties)
    assert "| bigfish | 524,288 | 1.54 ± 0.01 | 1.54 ± 0.01 | 1.26 ± 0.08 |" in out
    assert "| 524,288 |" in out and out.count("| 0.5 [") == 3  # two checkpoints and the area
    assert (tmp_path / "report" / "curves.png").stat().st_size > 0


def test_a_side_ahead_at_every_seed_wins_every_comparison(tmp_path) -> None:
    _runs(tmp_path / "ahead", 0.5)
    out = _compare(tmp_path / "ahead")
    assert out.count("| 1 [1, 1] |") == 3


def test_the_study_trains_both_sides_on_the_device_it_names() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))
    try:
        import procgen_study
    finally:
        sys.path.pop(0)
    folder = Path("/runs/bigfish/x")
    for device in ("cpu", "cuda"):
        pbx = procgen_study.command(procgen_study.Job("pbx", "bigfish", 1), folder, 4 * ROUND, "py", device)
        cleanrl = procgen_study.command(procgen_study.Job("cleanrl", "bigfish", 1), folder, 4 * ROUND, "py", device)
        assert pbx[pbx.index("--device") + 1] == device
        assert ("--no-cuda" in cleanrl) == (device == "cpu")
        assert ("--no-torch-deterministic" in cleanrl) == (device == "cuda")


def test_the_side_by_side_toy_trains_under_bgpbt_and_ipbt(tmp_path) -> None:
    """benchmarks/peers/ipbt's ToyPlain member, registered from outside pbx: both strategies run on it with their
    first populations (24 and 16 for 8), and its scores are the reference's fitness, at most 1.2. Each candidate's
    state is scored before round 0 (the reference's eval-only call: the fresh theta's fitness, 1.2 - 0.9^2), so the
    first explore asks the GP."""
    for search, first in (("BGPBT", 24), ("IPBT", 16)):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers" / "ipbt" / "toy_plain.py"), "--env",
                               "toy-plain", "--search", search, "--seed", "0", "--batchsize", "8", "--t_ready", "10",
                               "--max_budget", "100", "--run-dir", str(tmp_path / search)],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        frame = read_csv(tmp_path / search / "history.csv")
        assert (frame["round"] == 0).sum() == first and frame["score"].max() <= 1.2
        assert np.allclose(frame.loc[frame["round"] == 0, "start_score"], 0.39, rtol=0, atol=1e-6)
        assert frame.groupby("round")["score"].max().iloc[-1] > frame.groupby("round")["score"].max().iloc[0]


def test_the_side_by_side_runs_small_with_an_ablation_arm_and_compares_by_log_distance(tmp_path) -> None:
    """run_side_by_side.py on the pbx side (the reference's checkout is not here): PBT-Zoo's ToyDeceptive, IPBT,
    2 seeds, the default and the ``cut`` arm, a small budget; compare.py reads the runs as log(1.2 - score)."""
    script = ROOT / "benchmarks" / "peers" / "ipbt"
    proc = subprocess.run([sys.executable, str(script / "run_side_by_side.py"), "--dir", str(tmp_path / "study"),
                           "--sides", "pbx", "--toys", "toy-deceptive-zoo", "--algos", "IPBT", "--seeds", "2",
                           "--arms", "cut", "--budget", "60"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "4 runs to go" in proc.stdout and "## toy-deceptive-zoo" in proc.stdout
    assert len(list((tmp_path / "study").glob("toy-deceptive-zoo/*/IPBT/s*.json"))) == 4
    assert "| IPBT | pbx (default) | 2 |" in proc.stdout and "| IPBT | cut | 2 |" in proc.stdout
    first = read_csv(tmp_path / "study" / "toy-deceptive-zoo" / "pbx" / "IPBT" / "s0" / "history.csv")
    # each candidate's state is scored before round 0, as the reference's eval-only call: theta0 = 0.9
    assert np.allclose(first.loc[first["round"] == 0, "start_score"], 0.39, rtol=0, atol=1e-6)
    again = subprocess.run([sys.executable, str(script / "run_side_by_side.py"), "--dir", str(tmp_path / "study"),
                            "--sides", "pbx", "--toys", "toy-deceptive-zoo", "--algos", "IPBT", "--seeds", "2",
                            "--arms", "cut", "--budget", "60", "--no-compare"], capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
    assert again.returncode == 0 and "0 runs to go" in again.stdout  # finished runs are skipped
    # --commit-to's copy gzips the large files, and compare.py reads it as the study; two folders read as one
    sys.path.insert(0, str(script))
    try:
        import run_side_by_side
        import study
    finally:
        sys.path.pop(0)
    folder = tmp_path / "study"
    run_side_by_side.copy_small_files(run_side_by_side.jobs(["toy-deceptive-zoo"], ["IPBT"], [0, 1], ["pbx"], []),
                                      folder, tmp_path / "default")
    run_side_by_side.copy_small_files(run_side_by_side.jobs(["toy-deceptive-zoo"], ["IPBT"], [0, 1], [], ["cut"]),
                                      folder, tmp_path / "arm")
    kept = tmp_path / "default" / "toy-deceptive-zoo" / "pbx" / "IPBT" / "s0"
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "history.csv.gz", "strategy.csv.gz"]
    assert study.load(tmp_path / "default", tmp_path / "arm") == study.load(folder)
    with pytest.raises(ValueError, match="s0.json is in more than one of"):
        study.load(folder, tmp_path / "arm")


def test_the_side_by_side_calls_equivalence_only_inside_its_margin() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "peers" / "ipbt"))
    try:
        import anytime
        import compare
        import toy_deceptive
    finally:
        sys.path.pop(0)
    rng = np.random.default_rng(0)
    a = rng.normal(-5.0, 0.01, 8)
    assert compare.equivalence(a, a + 0.001).endswith("equivalent")
    assert compare.equivalence(a[:1], a[:1] + 0.001).endswith("no verdict under 8 seeds a side")
    assert compare.equivalence(a, a + 0.5).endswith("they differ (95% CI leaves out 0)")
    assert compare.equivalence(a, a + 0.03, margin=0.05).endswith("equivalent")
    assert compare.equivalence(a, a + 0.03, margin=0.02).endswith("not shown; they differ (95% CI leaves out 0)")
    assert compare.equivalence(a, a + np.tile([-0.5, 0.5], 4), margin=0.05).endswith(": not shown")  # wide: no call
    # the ablation pairs seeds: a shift common to both runs of a seed is no difference
    assert compare.paired_difference(a + np.arange(8), a + np.arange(8) + 0.01, 0.95) == pytest.approx((-0.01,) * 3)
    assert anytime.log_distance(np.array([1.2 - np.e ** -3]))[0] == pytest.approx(-3.0)
    assert toy_deceptive.check_against_torch(trials=50) == 0  # PBT-Zoo's ToyDeceptive to the bit


def test_the_anytime_measures_read_both_sides_on_one_clock() -> None:
    """The area and the budget to the threshold (anytime.py): both sides' committed runs of the noisy toy on the same
    budget clock (BG-PBT's first round of 24 members costs 3 rounds on both), the best so far never worse than
    the final answer, the threshold the greedy schedule's at half the budget."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "peers" / "ipbt"))
    try:
        import anytime
        import study
    finally:
        sys.path.pop(0)
    runs = study.load(ROOT / "docs" / "results" / "ipbt_side_v8", ROOT / "docs" / "results" / "ipbt_side_v7")
    pbx, ref = (study.runs_by_seed(runs, "toy-plain-noisy", side, "BGPBT")[0] for side in ("pbx", "reference"))
    assert pbx.rounds is not None and ref.rounds is not None
    assert pbx.rounds.ends[0] == ref.rounds.ends[0] == 30 and pbx.rounds.ends[-1] == ref.rounds.ends[-1] == 1000
    for run in (pbx, ref):
        assert run.restarts >= 1 and len(run.restart_at) == run.restarts
        so_far = run.rounds.so_far()
        assert len(so_far) == 100 and np.all(np.diff(so_far) <= 0) and so_far[-1] <= run.measure("final")
        assert run.measure("area") == pytest.approx(so_far.mean())
    # (1 - 0.002 (2 - 1e-4))^500 from theta 0.9: the greedy schedule's distance after half of 1,000 steps
    assert anytime.threshold(1000) == pytest.approx(np.log(0.81) + 1000 * np.log(1 - 0.002 * (2 - 1e-4)), abs=1e-3)
    close = 1.2 - np.exp(anytime.threshold(1000) - 0.01)
    rounds = anytime.Rounds(np.arange(10, 101, 10), np.array([0.5] * 4 + [close] + [0.5] * 5), 10, 100)
    assert rounds.budget_to_threshold() == 0.5 and rounds.so_far()[-1] == pytest.approx(np.log(1.2 - close))
    assert anytime.Rounds(rounds.ends, np.full(10, 0.5), 10, 100).budget_to_threshold() == 1.1  # never reached


def test_the_reference_runs_unguarded_and_a_crash_or_a_guard_keeps_a_run_out_of_the_reference(tmp_path) -> None:
    """The default launcher is the authors' code with the CPU override alone; the flat-generation guard lives only
    in the guarded launcher, whose printed lines the runner counts. A reference run that stops with an error is
    recorded where it stopped and read as a crash, with no score; a guarded run reads as ``reference-guarded``."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "peers" / "ipbt"))
    try:
        import compare
        import reference
        import run_side_by_side
        import study
    finally:
        sys.path.pop(0)
    assert reference.GUARD_LINE not in reference.LAUNCHER
    assert f"print(f'{reference.GUARD_LINE} bests at" in reference.GUARDED_LAUNCHER
    assert reference.command("py", Path("/c"), "IPBT", 0, Path("/r/s0"))[1] == "/c/run_cpu.py"
    assert reference.command("py", Path("/c"), "IPBT", 0, Path("/r/s0"), guarded=True)[1] == "/c/run_cpu_guarded.py"
    log = f"Expanding TR length to 1.0{reference.GUARD_LINE} bests at 240: not improved\nmean=...\n" \
          f"{reference.GUARD_LINE} bests at 250: not improved\n"
    assert run_side_by_side.flat_guards(log) == 2 and run_side_by_side.flat_guards("mean=tensor([nan])") == 0
    log = ("Start tick 0\nStart tick 230\nTraceback (most recent call last):\n"
           '  File "/c/algo/ipbt.py", line 700, in _update_population_and_record_time\n'
           '  File "/env/gpytorch/distributions.py", line 9, in __init__\n'
           "ValueError: Expected parameter loc of distribution Normal to satisfy the constraint Real()\n")
    found = run_side_by_side.crash(log)
    assert found["last_tick"] == 230 and found["error"].startswith("ValueError: Expected parameter loc")
    assert "/c/algo/ipbt.py" in found["frame"]
    toy = tmp_path / "toy-deceptive-zoo"
    for side, seed, marker in (("reference", 0, {"rc": 1, "wall_s": 5.0, "crash": found}),
                               ("reference", 1, {"rc": 1, "wall_s": 6.0, "guarded": True, "crash": found})):
        (toy / side / "IPBT").mkdir(parents=True, exist_ok=True)
        (toy / side / "IPBT" / f"s{seed}.json").write_text(json.dumps(marker))
    runs = study.load(tmp_path)
    assert study.crashes(runs, "toy-deceptive-zoo", "reference", "IPBT")[0].last_tick == 230
    assert set(study.crashes(runs, "toy-deceptive-zoo", study.GUARDED, "IPBT")) == {1}
    assert not study.runs_by_seed(runs, "toy-deceptive-zoo", "reference", "IPBT")
    assert "| IPBT | reference | s0 | 230 | ValueError: Expected parameter loc" in compare.crash_table(runs,
                                                                                               "toy-deceptive-zoo")
    assert study.side_of("reference", {"flat_guards": 3}) == study.GUARDED == study.side_of(
        "reference", {"guarded": True}) and study.side_of("reference", {"flat_guards": 0}) == "reference"


def test_the_noisy_toy_shows_noisy_scores_and_tests_the_true_one(tmp_path) -> None:
    """toy-plain-noisy: the scores the strategy sees carry the noise (standard deviation toy_plain.NOISE), the test
    score is the noise-free 1.2 - theta^2, which compare.py reads; a noise of 0 is ToyPlain."""
    script = ROOT / "benchmarks" / "peers" / "ipbt" / "toy_plain.py"
    for env, noise in (("toy-plain-noisy", None), ("toy-plain", None)):
        proc = subprocess.run([sys.executable, str(script), "--env", env, "--search", "IPBT", "--seed", "0",
                               "--batchsize", "8", "--t_ready", "10", "--max_budget", "60", "--run-dir",
                               str(tmp_path / f"{env}-{noise}"), *(["-m", f"noise={noise}"] if noise else [])],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        frame = read_csv(tmp_path / f"{env}-{noise}" / "history.csv")
        gap = (frame["score"] - frame["test_score"]).to_numpy()
        assert frame["test_score"].max() < 1.2
        assert np.allclose(gap, 0) if env == "toy-plain" and noise is None else 0.05 < gap.std() < 0.2
    bad = subprocess.run([sys.executable, str(script), "--env", "toy-plain", "--search", "IPBT", "--run-dir",
                          str(tmp_path / "bad"), "-m", "noise=-1"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert bad.returncode == 2 and "noise must be a finite standard deviation >= 0, got -1" in bad.stderr


def test_the_authors_records_count_a_trust_region_collapse_as_their_restart_does(monkeypatch) -> None:
    """The authors' BG-PBT moves ``n_distills`` on at a collapse (``_restart``) and the round's explores, finding no
    data of the new count, are ``'random'`` rows: the converted records of each committed BG-PBT history step their
    count at its generations and collapses alone, and tag the explores of a collapse's first round alone."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "peers" / "ipbt"))  # its strategies import the toy
    import recorded_runs

    collapses = 0
    for folder in sorted((ROOT / "docs" / "results" / "ipbt_decisions" / "histories" / "BGPBT").glob("s*")):
        rec = recorded_runs.load(folder)
        last = int(rec.frame["round"].max())
        data, _, _ = rec.authors_at(last)
        begins = rec.strategy.collapse_begins(rec.frame)
        collapses += len([b for b in begins if b <= last])
        assert int(data["n_distills"].max()) == rec.strategy.segments(rec.frame).iloc[-1]
        explored = rec.frame[rec.frame["explored"].astype(bool) & (rec.frame["round"] > 0)]
        assert (data["config_source"] == "random").sum() == 8 + int(explored["round"].isin(begins).sum())
    assert collapses >= 1  # the histories hold a collapse, or this test says nothing
