"""``python -m pbx.sweep``: a toy sweep completes, a killed one finishes only what was left, Slurm arrays, bad input."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pbx.fingerprint import differing_keys
from pbx.members.toys.toy import ToyMember
from pbx.run_dir import RunDir
from pbx.sweep import main
from pbx.sweep_file import load_sweep

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = """\
run: {env: toy, pop_size: 4, t_ready: 4, max_budget: 40}
sweep: {search: [none, PBT, PB2]}
seeds: 3
"""
RUNS = [f"{v}/seed{s}" for s in range(3) for v in ("none", "PBT", "PB2")]


def _history(folder: Path) -> pd.DataFrame:
    """A run's history without wall time (the one column a rerun may change)."""
    return pd.read_csv(folder / "history.csv").drop(columns="wall_s")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """The experiment file and its uninterrupted sweep folder."""
    folder = tmp_path_factory.mktemp("sweep")
    exp = folder / "toy.yaml"
    exp.write_text(EXPERIMENT)
    assert main([str(exp), "--out", str(folder / "ref")]) == 0
    return exp, folder / "ref"


def test_sweep_completes_and_records_itself(reference, capsys) -> None:
    exp, ref = reference
    record = yaml.safe_load((ref / "sweep.yaml").read_text())
    assert record["seeds"] == [0, 1, 2] and record["baseline"] == "none"
    assert [v["name"] for v in record["variants"]] == ["none", "PBT", "PB2"]
    for run in RUNS:
        config = yaml.safe_load((ref / run / "config.yaml").read_text())
        assert (config["run"]["search"], f"seed{config['run']['seed']}") == tuple(run.split("/"))
        assert _history(ref / run)["round"].max() == 9
    assert main([str(exp), "--out", str(ref)]) == 0  # a rerun of a finished sweep only skips
    lines = capsys.readouterr().out.splitlines()
    assert sum(": skipped, finished: final score" in line for line in lines) == 9


def test_killed_sweep_finishes_only_what_was_left(reference, tmp_path, capsys) -> None:
    exp, ref = reference
    out = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "pbx.sweep", str(exp), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # SIGKILL while PB2/seed0 (the third run) is in progress: two runs done, one with some of its 10 rounds.
    partial = out / "PB2/seed0/history.csv"
    deadline = time.time() + 120
    while time.time() < deadline and not (partial.exists() and len(partial.read_text().splitlines()) > 1 + 4 * 3):
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rounds = len(partial.read_text().splitlines()) // 4  # a torn last round counts as not finished
    assert 3 <= rounds < 10, "the kill came too late to leave a run half done"
    done = {run: ((out / run / "history.csv").read_bytes(), (out / run / "history.csv").stat().st_mtime_ns)
            for run in RUNS[:2]}
    before = _history(out / "PB2/seed0")
    assert not (out / "none/seed1").exists()

    assert main([str(exp), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(r"^\[\d/9\] \S+: (\w+).*", r"\1", line) for line in lines[1:-1] if "done in" not in line] == \
        ["skipped", "skipped", "resumed", *["started"] * 6]
    assert any(re.match(r"\[3/9\] PB2/seed0: resumed after round [3-9]/10$", line) for line in lines)
    for run, (data, mtime) in done.items():  # finished runs untouched
        assert (out / run / "history.csv").read_bytes() == data
        assert (out / run / "history.csv").stat().st_mtime_ns == mtime
    resumed = _history(out / "PB2/seed0")
    kept = len(before) - len(before) % 4
    pd.testing.assert_frame_equal(resumed.iloc[:kept], before.iloc[:kept])  # continued, not restarted
    for run in RUNS:  # the toy is deterministic: the end state is the uninterrupted sweep's
        pd.testing.assert_frame_equal(_history(out / run), _history(ref / run))


def test_failed_runs_are_reported_and_the_others_go_on(tmp_path, monkeypatch, capsys) -> None:
    exp = tmp_path / "pbt.yaml"
    exp.write_text("run: {env: toy, t_ready: 4, max_budget: 8}\nsweep: {search: [PBT]}\nseeds: 3\n")
    train = ToyMember.train

    def dies_in_seed1(self: ToyMember, steps: int) -> float:
        if "seed1" in str(self.context.log_dir):
            raise RuntimeError("boom")
        return train(self, steps)

    monkeypatch.setattr(ToyMember, "train", dies_in_seed1)
    out = tmp_path / "sweep"
    (out / "PBT/seed0").mkdir(parents=True)
    with RunDir(out / "PBT/seed0").lock():  # held, as by another process: train refuses the folder
        assert main([str(exp), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "is in use by process" in err
    assert re.search(r"error: 2 of 3 runs failed: PBT/seed0 \(exit 2\); PBT/seed1 \(RuntimeError: boom; "
                     r"traceback in \S+error.txt\)", err)
    assert "RuntimeError: boom" in (out / "PBT/seed1/error.txt").read_text()
    assert len(_history(out / "PBT/seed2")) == 2 * 4  # the run after the failures finished


def test_slurm_array_runs_one_run_per_task(reference, tmp_path) -> None:
    exp, ref = reference
    out = tmp_path / "sweep"
    script = tmp_path / "job.sh"
    assert main([str(exp), "--out", str(out), "--print-slurm", str(script)]) == 0
    text = script.read_text()
    assert re.search(r"^#SBATCH --array=0-8$", text, re.M)  # one task per (variant, seed)
    assert "--requeue" in text and (out / "slurm").is_dir()
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": "4"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "[5/9] PBT/seed1: done" in proc.stdout
    assert [p.relative_to(out).as_posix() for p in out.glob("*/seed*")] == ["PBT/seed1"]
    pd.testing.assert_frame_equal(_history(out / "PBT/seed1"), _history(ref / "PBT/seed1"))

    ranked = tmp_path / "ranked.yaml"
    ranked.write_text(EXPERIMENT + "slurm: {ranks: 2, gpus: 1, time: '02:00:00', partition: gpu, max_parallel: 3}\n")
    assert main([str(ranked), "--out", str(tmp_path / "r"), "--print-slurm", str(script)]) == 0
    text = script.read_text()
    for option in ("--array=0-8%3", "--ntasks=2", "--gpus=1", "--time=02:00:00", "--partition=gpu"):
        assert f"#SBATCH {option}\n" in text
    assert re.search(r"^exec \S*mpiexec -n 2 \S+python\S* -m pbx.sweep .* --only \"\$SLURM_ARRAY_TASK_ID\"$", text,
                     re.M)
    ranked.write_text(EXPERIMENT.replace("pop_size: 4, ", "") + "slurm: {ranks: 6, launcher: srun}\n")
    assert main([str(ranked), "--out", str(tmp_path / "s"), "--print-slurm", str(script)]) == 0
    assert re.search(r"^exec srun --kill-on-bad-exit=1 \S+python\S* -m pbx.sweep ", script.read_text(), re.M)
    # resolved as the tasks will run: on 6 ranks, one member each
    assert yaml.safe_load((tmp_path / "s/PBT/variant.yaml").read_text())["run"]["pop_size"] == 6


def test_an_mpi_sweep_goes_on_past_runs_that_fail_on_any_rank(reference, tmp_path) -> None:
    exp, _ = reference
    out = tmp_path / "sweep"
    args = [str(exp), "--out", str(out), "--seeds", "2", "-m", "max_budget=8"]
    assert main([*args, "--only", "0"]) == 0  # finished before the launch: rank 0 skips it, the others too
    mpiexec = Path(sys.executable).parent / "mpiexec"
    (out / "PBT/seed0").mkdir(parents=True)
    with RunDir(out / "PBT/seed0").lock():  # held by this process: the run fails at setup, on rank 0
        # none/seed1's member 1, on rank 1, raises in its second round
        proc = subprocess.run([str(mpiexec), "-n", "2", sys.executable, "tests/mpi/fail_member.py", "1", "1",
                               "none/seed1", "sweep", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert [re.sub(r"^\[(\d)/6\] (\S+): (\w+).*", r"\1 \2 \3", line) for line in lines[1:]] == \
        ["1 none/seed0 skipped", "2 PBT/seed0 started", "2 PBT/seed0 failed", "3 PB2/seed0 started",
         "3 PB2/seed0 done", "4 none/seed1 started", "4 none/seed1 failed", "5 PBT/seed1 started", "5 PBT/seed1 done",
         "6 PB2/seed1 started", "6 PB2/seed1 done"], proc.stdout
    assert "is in use by process" in proc.stderr and "MPI_Abort" not in proc.stderr  # contained, not the job's end
    assert re.search(r"error: rank 1, member 1: RuntimeError: injected failure at 4 steps \(traceback in \S+"
                     r"none/seed1/error-rank1.txt\)", proc.stderr), proc.stderr
    assert "error: 2 of 6 runs failed: PBT/seed0 (exit 2); none/seed1 (exit 1)" in proc.stderr
    assert "4 members on 2 MPI ranks" in (out / "PB2/seed1/train.log").read_text()
    assert len(_history(out / "none/seed1")) == 4  # its first round stays
    assert main(args) == 0  # the rerun starts the one and resumes the other
    for run in ("PBT/seed0", "none/seed1"):
        assert _history(out / run)["round"].max() == 1


def test_variants_that_are_not_a_cross_product(tmp_path) -> None:
    exp = tmp_path / "mix.yaml"
    exp.write_text("run: {env: toy-cat}\nsweep:\n  - search: [none, PBT]\n"
                   "  - {search: PB2, cat_exp: [random, exp3, cocabo]}\n")
    sweep = load_sweep(exp, "2", ["max_budget=8"])
    assert [v.name for v in sweep.variants] == ["none", "PBT", "PB2-random", "PB2-exp3", "PB2-cocabo"]
    assert sweep.variants[3].settings == {"search": "PB2", "cat_exp": "exp3"}
    assert len(sweep.runs) == 10 and sweep.out == Path("sweeps/mix-8") and sweep.baseline == "none"


@pytest.mark.parametrize("text, args, message", [
    (None, [], "experiment file not found"),
    ("run: {env: toy}\nsweep: {search: [none], frobs: [1, 2]}\n", [], "variant none-1: unknown key 'frobs'"),
    ("run: {env: toy}\nsweep: {search: []}\n", [], "sweep: search has an empty list of values"),
    ("run: {env: toy}\n", [], "no sweep: section"),
    ("run: {env: toy, seed: 2}\nsweep: {search: [none]}\n", [], "seed: a sweep sets each run's seed"),
    ("run: {env: toy}\nsweep: {search: [none]}\n", ["--seeds", "1,1"], "seeds must be distinct"),
    # a MemoryError: the seeds were listed before being checked
    ("run: {env: toy}\nsweep: {search: [none]}\n", ["--seeds", "4294967296"],
     "seeds must be a count from 1 to 10,000 (seeds 0..N-1) or a list such as 0,3,7, got '4294967296'"),
    ("run: {env: toy}\nsweep: {search: [none]}\n", ["--seeds", "0,4294967296"],
     "each of seeds '0,4294967296' must be a whole number from 0 to 2**32 - 1, got 4294967296"),
    ("run: {env: toy}\nsweep: {search: [none]}\n", ["--only", "5"], "--only 5: the sweep has runs 0 to 1"),
    ("run: {env: toy}\nsweep: {search: [none]}\n", ["-m", "search=PBT"], "-m search: swept by"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, text, args, message) -> None:
    exp = tmp_path / "exp.yaml"
    if text is not None:
        exp.write_text(text)
    assert main([str(exp), "--seeds", "2", "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_files_out_of_range_seed_is_refused_before_the_sweep_folder_is_written(tmp_path, capsys) -> None:
    """It was found only inside each run, once the sweep folder and its records were written."""
    exp = tmp_path / "exp.yaml"
    exp.write_text("run: {env: toy, max_budget: 8}\nsweep: {search: [none]}\nseeds: [0, 4294967296]\n")
    assert main([str(exp), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == ("error: each of seeds [0, 4294967296] must be a whole number from 0 to "
                                       "2**32 - 1, got 4294967296\n")
    assert not (tmp_path / "out").exists()


def test_a_changed_file_is_refused_for_its_old_folder(tmp_path, capsys) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text("run: {env: toy, t_ready: 4, max_budget: 8}\nsweep: {search: [none]}\n")
    out = tmp_path / "out"
    assert main([str(exp), "--seeds", "1", "--out", str(out)]) == 0
    exp.write_text("run: {env: toy, t_ready: 4, max_budget: 12}\nsweep: {search: [none]}\n")
    capsys.readouterr()
    assert main([str(exp), "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run.max_budget changed since" in err and "--out DIR" in err
    assert main([str(exp), "--seeds", "1", "--out", str(tmp_path / "new")]) == 0


@pytest.mark.parametrize("now, named", [
    ("[{name: a, search: none}, {name: b, search: PBT, quantile: 0.5}]", "(sweep.b.quantile changed since)"),
    ("[{name: a, search: none}, {name: b, search: PBT}, {name: c, search: PB2}]", "(sweep.c (added) changed"),
    ("[{name: a, search: none}]", "(sweep.b (removed) changed"),
    ("[{name: b, search: PBT}, {name: a, search: none}]", "(sweep order changed since)"),
])
def test_a_changed_variant_is_named_in_the_refusal(tmp_path, capsys, now, named) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text("run: {env: toy, t_ready: 4, max_budget: 4}\nsweep: [{name: a, search: none}, "
                   "{name: b, search: PBT}]\n")
    out = tmp_path / "out"
    assert main([str(exp), "--seeds", "1", "--out", str(out)]) == 0
    exp.write_text(f"run: {{env: toy, t_ready: 4, max_budget: 4}}\nsweep: {now}\n")
    capsys.readouterr()
    assert main([str(exp), "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err


@pytest.mark.parametrize("damage", ["- name: none", "  settings:"])
def test_a_damaged_sweep_record_is_one_line(tmp_path, capsys, damage) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text("run: {env: toy, t_ready: 4, max_budget: 4}\nsweep: {search: [none]}\n")
    out = tmp_path / "out"
    assert main([str(exp), "--seeds", "1", "--out", str(out)]) == 0
    record = out / "sweep.yaml"
    assert damage in record.read_text()
    record.write_text(record.read_text().replace(damage, damage.replace("n", "x", 1)))
    capsys.readouterr()
    assert main([str(exp), "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sweep.yaml: not a pbx sweep record" in err, err


def test_a_sweep_whose_space_file_changed_between_seeds_is_refused_unless_kept(tmp_path, capsys) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("h0: {type: continuous, low: 0, high: 1}\nh1: {type: continuous, low: 0, high: 1}\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"run: {{env: toy, t_ready: 4, max_budget: 8, space: {space}}}\nsweep: {{search: [PBT]}}\n")
    out = tmp_path / "out"
    assert main([str(exp), "--seeds", "1", "--out", str(out)]) == 0
    stored = yaml.safe_load((out / "PBT/variant.yaml").read_text())
    assert stored["space"]["h0"]["high"] == 1 and "seed" not in stored["run"] and stored["pbx"]["version"]
    space.write_text("h0: {type: continuous, low: 0, high: 0.5}\nh1: {type: continuous, low: 0, high: 1}\n")
    capsys.readouterr()
    assert main([str(exp), "--seeds", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(PBT: space.h0.high)" in err and "--keep-stored" in err, err
    assert not (out / "PBT/seed1").exists()
    assert main([str(exp), "--seeds", "2", "--out", str(out), "--keep-stored"]) == 0
    first, second = (yaml.safe_load((out / f"PBT/seed{s}/config.yaml").read_text()) for s in (0, 1))
    assert second["space"]["h0"]["high"] == 1 and second["run"]["seed"] == 1  # the stored resolution, its seed
    assert differing_keys(first, second) == []  # one experiment: the report may pool them


def test_each_run_of_an_in_process_sweep_starts_from_clean_torch_state(tmp_path, monkeypatch) -> None:
    import torch

    from pbx.members.ppo.ppo import PPOMember

    exp = tmp_path / "det.yaml"
    exp.write_text("run: {env: CartPole-v1, search: none, pop_size: 1, t_ready: 64, max_budget: 64}\n"
                   "member: {n_envs: 2, n_steps: 32, batch_size: 32, eval_episodes: 0}\n"
                   "sweep: {deterministic: [true, false]}\n")
    seen, train = [], PPOMember.train

    def spy(self: PPOMember, steps: int, stop=None) -> float:  # type: ignore[no-untyped-def]
        seen.append((self.settings.deterministic, torch.are_deterministic_algorithms_enabled()))
        return train(self, steps, stop)

    monkeypatch.setattr(PPOMember, "train", spy)
    before = (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads())
    assert main([str(exp), "--seeds", "1", "--out", str(tmp_path / "out")]) == 0
    assert seen == [(True, True), (False, False)]  # the first run's setting did not carry over to the second
    assert (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()) == before


def test_a_sweep_stopped_by_its_time_limit_goes_on_when_rerun(reference, tmp_path, capsys) -> None:
    """``--time-limit``: the run in progress stops with everything saved, the command says how to go on and exits
    75; rerunning the sweep resumes that run and ends with the uninterrupted sweep's histories."""
    exp, ref = reference
    out = tmp_path / "sweep"
    assert main([str(exp), "--out", str(out), "--time-limit", "1.5"]) == 75
    err = capsys.readouterr().err
    assert err.startswith("stopped: ") and f"rerun python -m pbx.sweep {exp}" in err and err.endswith("to go on\n")
    assert not all((out / run / "history.csv").is_file() for run in RUNS), "the limit should land mid-sweep"
    assert main([str(exp), "--out", str(out)]) == 0
    for run in RUNS:
        pd.testing.assert_frame_equal(_history(out / run), _history(ref / run))
