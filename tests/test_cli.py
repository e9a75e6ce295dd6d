"""``python -m pbx.train`` as a user types it: outputs, and one-line errors with exit code 2."""

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

from pbx.config import resolve
from pbx.errors import UsageError
from pbx.fingerprint import provenance, run_record
from pbx.train import build_parser, main

from conftest import start_train

ROOT = Path(__file__).resolve().parent.parent


def test_toy_pb2_run_from_the_command_line(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--env", "toy", "--search", "PB2", "--batchsize", "4",
                           "--seed", "0", "--run-dir", str(run_dir)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(line.startswith("round ") for line in lines) == 50  # one line per round
    assert lines[-1].startswith("done: best final score")
    assert proc.stderr.strip() == ""  # no warning banners
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["run"]["search"] == "PB2" and config["run"]["pop_size"] == 4 and config["run"]["t_ready"] == 4
    assert len((run_dir / "history.csv").read_text().splitlines()) == 1 + 4 * 50


@pytest.mark.parametrize("search, budget, gpy, torch", [("PBT", 16, False, False), ("PB2", 16, True, False),
                                                      ("IPBT", 40, True, True)])
def test_only_a_run_that_fits_a_gp_imports_gpy_or_torch(search: str, budget: int, gpy: bool, torch: bool,
                                                         tmp_path) -> None:
    """GPy (with the matplotlib it pulls in) costs about a second at every process start, torch three: PB2
    imports GPy at its first fit and IPBT torch at its first stagnation test (its sparse GP), so PBT runs, other
    commands and MPI ranks that never fit either do not pay them."""
    code = ("import sys; from pbx.train import main; main(sys.argv[1:]); "
            "print('GPy' in sys.modules, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, "--env", "toy", "--search", search, "--batchsize", "4",
                           "-m", f"max_budget={budget}", "--run-dir", str(tmp_path / "run")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines()[-1] == f"{gpy} {torch}"


def test_layers_config_file_then_flags_then_overrides(tmp_path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text("run: {env: toy, search: PBT, pop_size: 6, seed: 3}\nstrategy: {resample_prob: 0.5}\n")
    run_dir = tmp_path / "run"
    assert main(["--config", str(exp), "--seed", "4", "--run-dir", str(run_dir), "-m", "max_budget=8",
                 "t_ready=4", "strategy.resample_prob=0.1", "member.init=paper"]) == 0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["run"]["pop_size"] == 6 and config["run"]["seed"] == 4 and config["run"]["max_budget"] == 8
    assert config["strategy"]["resample_prob"] == 0.1 and config["member"]["init"] == "paper"
    # the resolved config rebuilds the same run
    again = tmp_path / "again"
    assert main(["--config", str(run_dir / "config.yaml"), "--run-dir", str(again)]) == 0
    rebuilt = yaml.safe_load((again / "config.yaml").read_text())
    # under a new name (it holds the time to the second): the rest is the same run
    assert rebuilt["run"].pop("name") != "" and config["run"].pop("name") != ""
    assert rebuilt == config


def _exit_code(argv: list[str]) -> int:
    """main()'s code, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code)


BAD = [
    (["--search", "PB3"], "unknown --search 'PB3'"),
    (["--env", "nosuchgame"], "nosuchgame"),
    (["--selection", "best"], "unknown selection 'best'"),
    (["--batchsize", "1"], "population of at least 2"),
    (["--batchsize", "0", "--search", "none"], "pop_size must be at least 1"),
    (["--t_ready", "0"], "t_ready must be a positive"),
    (["--t-ready", "10", "--max-budget", "5"], "max_budget (5) must be at least t_ready (10)"),
    (["-m", "colour=blue"], "unknown key 'colour'"),
    (["-m", "pop_size=many"], "pop_size must be int, got 'many'"),
    (["-m", "quantile=0.9"], "quantile must be in (0, 0.5], got 0.9"),
    (["-m", "nokey"], "-m takes key=value items, got 'nokey'"),
    (["-mb", "6144"], "the reference code's -mb, -tr, -b, -s, -sd are --max_budget"),
    (["-m", "eval_every=0"], "eval_every must be a positive number of rounds, got 0"),
    (["--device", "tpu"], "device must be auto, cpu or cuda"),
    (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
    (["--seed", "-1"], "seed must be a whole number from 0 to 2**32 - 1, got -1"),
    (["-m", "seed=4294967296"], "seed must be a whole number from 0 to 2**32 - 1, got 4294967296"),
    (["-m", "max_budget=1e400"], "max_budget must be int, got '1e400'"),
    # a number past a check's range: it trained a round, then died of OverflowError (1e400 is inf), or trained on
    (["--search", "IPBT", "-m", "step_factor=1e400"], "step_factor must be a finite number, got '1e400'"),
    (["--search", "IPBT", "-m", "shrink=.nan"], "shrink must be a finite number, got nan"),
    (["--search", "IPBT", "-m", "ucb_kappa=.inf"], "ucb_kappa must be a finite number, got inf"),
    (["--search", "IPBT", "-m", "perturb=1.5"], "perturb must be in [0, 1] (a restart's weights become"),
    (["-m", "sigma_k=-1"], "sigma_k must be > 0"),  # checked whatever the selection
    (["--selection", "wta", "-m", "quantile=2"], "quantile must be in (0, 0.5], got 2.0"),
    (["--batchsize", str(10**18)], "pop_size must be at least 1 and at most 10,000 members, got 1,000,000,000,000,"),
    (["--search", "IPBT", "-m", "init_factor=3000"], "--search IPBT trains 12,000 members in a round (3000 x"),
    (["--config", "missing.yaml"], "config file not found: missing.yaml"),
]


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv: list[str], message: str) -> None:
    env = [] if "--env" in argv else ["--env", "toy"]
    assert _exit_code([*env, "--run-dir", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_a_plan_of_a_trillion_rounds_is_refused_at_once(tmp_path, capsys) -> None:
    """It hung before the start line, its memory growing, building the plan a round at a time."""
    start = time.perf_counter()
    assert _exit_code(["--env", "toy", "--t_ready", "1", "--max_budget", "1000000000000",
                       "--run-dir", str(tmp_path / "run")]) == 2
    assert time.perf_counter() - start < 10
    assert capsys.readouterr().err == (
        "error: max_budget 1,000,000,000,000 in rounds of t_ready 1 is 1,000,000,000,000 rounds, more than a run "
        "may plan (100,000): raise t_ready to at least 10,000,000 or lower max_budget\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, message", [
    # runs/ itself was the run; ../../x wrote outside runs/; '' trained into the working folder
    (["--name", ""], "name must name a folder inside runs/ (the run folder is runs/<name>), got ''"),
    (["--name", "../../x"], "name must name a folder inside runs/ (the run folder is runs/<name>), got '../../x'"),
    (["--run-dir", ""], "--run-dir '' names no folder (it would train into the working folder)"),
    (["--run-dir", "notes.txt"], "--run-dir notes.txt is a file, not a folder"),  # NotADirectoryError
    (["--run-dir", "notes.txt/run"], "--run-dir notes.txt/run is under notes.txt, a file, not a folder"),
])
def test_a_run_folder_that_cannot_be_one_is_one_line_and_nothing_is_written(tmp_path, monkeypatch, capsys,
                                                                           argv: list[str], message: str) -> None:
    work = tmp_path / "work" / "here"  # runs/../../x from here is tmp_path/x
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    assert _exit_code(["--env", "toy", "-m", "max_budget=8", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert sorted(tmp_path.rglob("*")) == [tmp_path / "work", work, work / "notes.txt"]
    assert (work / "notes.txt").read_text() == "mine"


# Settings a member checks against its env (its observations), before the run folder is touched.
MEMBER_REFUSALS = [
    (["--env", "bigfish", "-m", "normalize_obs=true"], "normalize_obs is for MLP policies on vector observations"),
    (["--env", "CartPole-v1", "-m", "channels_last=true"],
     "channels_last=true is a setting of the image policy (IMPALA CNN) only"),
    # tf32 (TF32 matrix products) applies to an MLP and is taken; bf16 changes the IMPALA CNN, and says so
    (["--env", "CartPole-v1", "-m", "precision=bf16"],
     "precision=bf16 is a setting of the image policy (IMPALA CNN) only; CartPole-v1's observations are vectors (an "
     "MLP): leave it at its default (precision=tf32, TF32 matrix products on a GPU, applies to any policy)"),
]


@pytest.mark.parametrize("argv, message", MEMBER_REFUSALS)
def test_a_members_refusal_comes_before_the_start_line_and_the_folder(tmp_path, capsys, argv: list[str],
                                                                      message: str) -> None:
    run = tmp_path / "run"
    assert main([*argv, "--search", "none", "--batchsize", "1", "--t_ready", "64", "--max_budget", "64",
                 "--device", "cpu", "--run-dir", str(run)]) == 2
    out, err = capsys.readouterr()
    assert message in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert out == "" and not run.exists()


def test_a_refused_run_leaves_a_users_folder_byte_for_byte(user_folder, capsys) -> None:
    """The reproduction of a refused run that emptied a user's folder: the member's refusal through the command
    and through ``pbx.run``, and a valid run pointed at a folder holding files under a run's names: one line each,
    the folder as it was (it used to lose checkpoints/, tb/ and history.csv)."""
    import pbx

    refused = ["--env", "CartPole-v1", "--search", "PBT", "-m", "channels_last=true", "--run-dir",
               str(user_folder.path)]
    assert main(refused) == 2
    assert "channels_last" in capsys.readouterr().err
    user_folder.assert_unchanged()
    with pytest.raises(UsageError, match="channels_last"):
        pbx.run(env="CartPole-v1", search="PBT", channels_last=True, run_dir=user_folder.path)
    user_folder.assert_unchanged()
    assert main(["--env", "toy", "--search", "PBT", "--run-dir", str(user_folder.path)]) == 2
    out, err = capsys.readouterr()
    assert err == (f"error: {user_folder.path} holds history.csv, checkpoints, tb, which a new run would write, "
                   f"and no run (config.yaml): pick a new or empty folder with --run-dir\n") and out == ""
    user_folder.assert_unchanged()


def test_a_new_run_in_an_existing_folder_of_other_files_keeps_them(tmp_path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    assert main(["--env", "toy", "--search", "PBT", "--batchsize", "2", "-m", "max_budget=8", "--run-dir",
                 str(run)]) == 0
    assert (run / "notes.txt").read_text() == "mine" and (run / "history.csv").is_file()


def test_malformed_search_space_and_non_run_resume(tmp_path, capsys) -> None:
    bad = tmp_path / "space.yaml"
    bad.write_text("h0: {type: continuous, low: 1, high: 0}\nh1: {type: continuous, low: 0, high: 1}\n")
    assert main(["--env", "toy", "--space", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    assert "parameter 'h0': low must be below high" in capsys.readouterr().err
    (tmp_path / "notarun").mkdir()
    assert main(["--resume", str(tmp_path / "notarun")]) == 2
    assert "not a pbx run folder" in capsys.readouterr().err
    assert main(["--resume", str(tmp_path / "nothing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_unknown_search_in_a_subprocess_has_no_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--env", "toy", "--search", "PB3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown --search 'PB3'; choose from none, random, PBT, PB2, ")
    assert proc.stderr.endswith("replay (any case; Fixed = none)\n") and proc.stderr.count("\n") == 1


def test_batchsize_says_it_is_the_population_size() -> None:
    assert "population size (not PPO's batch_size)" in " ".join(build_parser().format_help().split())


def test_reference_aliases_set_quantile_and_resample_prob(tmp_path) -> None:
    run_dir = tmp_path / "run"
    assert main(["--env", "toy", "--search", "PBT", "--pbt_thresh", "0.5", "--pbt_resample", "0.1",
                 "--max_budget", "8", "--run-dir", str(run_dir)]) == 0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["run"]["quantile"] == 0.5 and config["strategy"]["resample_prob"] == 0.1


def test_space_flag_replaces_the_inline_space_of_a_run_config(tmp_path) -> None:
    run_dir = tmp_path / "run"
    assert main(["--env", "toy", "--max_budget", "8", "--run-dir", str(run_dir)]) == 0
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text("h0: {type: continuous, low: 0.1, high: 0.2}\nh1: {type: continuous, low: 0.1, high: 0.2}\n")
    again = tmp_path / "again"
    assert main(["--config", str(run_dir / "config.yaml"), "--space", str(narrow), "--run-dir", str(again)]) == 0
    config = yaml.safe_load((again / "config.yaml").read_text())
    assert config["run"]["space"] == str(narrow) and config["space"]["h0"]["high"] == 0.2


def test_a_run_config_rebuilds_the_run_under_a_new_name(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--env", "toy", "--max_budget", "8", "--name", "first"]) == 0
    assert main(["--config", "runs/first/config.yaml"]) == 0
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_resume_may_extend_the_budget_and_nothing_that_changes_decisions(tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["--env", "toy", "--max_budget", "8", "--run-dir", str(run_dir)]) == 0
    assert main(["--resume", str(run_dir), "-m", "max_budget=16", "eval_every=2"]) == 0
    history = pd.read_csv(run_dir / "history.csv")
    assert history["round"].max() == 3 and history["steps"].max() == 16
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["eval_every"] == 2
    capsys.readouterr()
    assert main(["--resume", str(run_dir), "-m", "t_ready=8"]) == 2
    assert "may change only max_budget, eval_every, eval_episodes, device, runner, comm, checkpoint_minutes, not t_ready" in \
        capsys.readouterr().err
    assert main(["--resume", str(run_dir), "--max_budget", "12"]) == 2
    assert "--resume may extend max_budget, not cut it: 12 < 16" in capsys.readouterr().err
    assert main(["--resume", str(run_dir), "--max_budget", "20", "--device", "cpu"]) == 0
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["max_budget"] == 20


def test_start_line_says_what_ppo_really_trains(tmp_path) -> None:
    from pbx.runners.announce import start_line as _start_line
    from pbx.run_dir import RunDir

    cfg = resolve([{"run": {"env": "CartPole-v1", "t_ready": 100, "max_budget": 300},
                    "member": {"n_envs": 2, "n_steps": 32, "batch_size": 32}}])
    line = _start_line(cfg, RunDir(tmp_path))
    assert "each member really trains 128 steps per round, 384 in total" in line  # 100 -> 2 rollouts of 64
    described = cfg.member_cls.describe(cfg.member)
    assert line.startswith(f"pbx: PBT on CartPole-v1, {described} over ppo_classic.yaml (") and "PPO" in described
    cfg = resolve([{"run": {"env": "CartPole-v1", "t_ready": 128, "max_budget": 300},
                    "member": {"n_envs": 2, "n_steps": 32, "batch_size": 32}}])
    assert "128 steps per round (64 in the last), 320 in total" in _start_line(cfg, RunDir(tmp_path))
    whole = resolve([{"run": {"env": "CartPole-v1", "t_ready": 128, "max_budget": 384},
                      "member": {"n_envs": 2, "n_steps": 32, "batch_size": 32}}])
    assert "note" not in _start_line(whole, RunDir(tmp_path))


def test_resume_keeps_the_record_of_the_pbx_that_started_the_run_and_says_when_another_goes_on(tmp_path,
                                                                                             capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["--env", "toy", "--max_budget", "8", "--run-dir", str(run_dir)]) == 0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["pbx"] == run_record("toy")
    capsys.readouterr()
    assert main(["--resume", str(run_dir), "-m", "max_budget=12"]) == 0
    assert "note:" not in capsys.readouterr().out  # the same pbx goes on
    config["pbx"] = {"version": "0.0.1", "commit": "abc123"}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["--resume", str(run_dir), "-m", "max_budget=16"]) == 0
    assert "note: this run was started by pbx 0.0.1 (commit abc123); it continues with pbx " in capsys.readouterr().out
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["pbx"] == {"version": "0.0.1", "commit": "abc123"} and config["run"]["max_budget"] == 16
    config["pbx"] = {"version": "0.0.1", "commit": "abc123", "code": "0123456789abcdef"}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["--resume", str(run_dir), "-m", "max_budget=18"]) == 0
    assert "started by pbx 0.0.1 (code 0123456789abcdef, commit abc123)" in capsys.readouterr().out
    # every code that trained rounds is recorded, once, and counts in the run's fingerprint
    code = provenance()["code"]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["pbx"]["continued"] == [code]
    assert main(["--resume", str(run_dir), "-m", "max_budget=24"]) == 0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["pbx"]["continued"] == [code] and config["run"]["max_budget"] == 24
    del config["pbx"]  # a folder from before pbx recorded itself
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["--resume", str(run_dir), "-m", "max_budget=28"]) == 0
    assert "config.yaml does not say which pbx started it" in capsys.readouterr().out
    assert "pbx" not in yaml.safe_load((run_dir / "config.yaml").read_text())
    assert len(pd.read_csv(run_dir / "history.csv")) == 4 * 7


def test_a_resume_under_other_library_versions_says_so_and_records_them(tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["--env", "toy", "--max_budget", "8", "--run-dir", str(run_dir)]) == 0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["pbx"]["libraries"] = {"numpy": "0.0.1"}  # started under another NumPy
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    capsys.readouterr()
    assert main(["--resume", str(run_dir), "-m", "max_budget=12"]) == 0
    numpy = run_record("toy")["libraries"]["numpy"]
    assert (f"note: this run was started with other library versions (numpy 0.0.1 -> {numpy}); the rounds from "
            f"here on run these") in capsys.readouterr().out
    record = yaml.safe_load((run_dir / "config.yaml").read_text())["pbx"]
    assert record["libraries"] == {"numpy": "0.0.1"} and record["libraries_continued"] == [{"numpy": numpy}]
    assert main(["--resume", str(run_dir), "-m", "max_budget=16"]) == 0  # the same versions again: listed once
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["pbx"]["libraries_continued"] == [{"numpy": numpy}]


def test_a_run_folder_in_use_is_locked(tmp_path) -> None:
    run_dir = tmp_path / "run"
    # 20 rounds: still running when stopped just after its history.csv appears, few for the resume below to train
    first = start_train("--env", "toy", "--search", "PB2", "--max_budget", "80", "--run-dir", str(run_dir))
    try:
        deadline = time.time() + 60
        while not (run_dir / "history.csv").exists() and time.time() < deadline:
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGSTOP)  # mid-run, holding its lock, however slow the checks below are
        for argv in (["--resume", str(run_dir)], ["--env", "toy", "--run-dir", str(run_dir)]):
            proc = subprocess.run([sys.executable, "-m", "pbx.train", *argv], cwd=ROOT, capture_output=True,
                                  text=True, timeout=60)
            assert proc.returncode == 2 and f"is in use by process {first.pid}" in proc.stderr, proc.stderr
    finally:
        first.kill()
        first.wait()
    # the killed process's lock died with it
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", str(run_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and pd.read_csv(run_dir / "history.csv")["steps"].max() == 80, proc.stderr


def test_the_help_names_every_registered_strategy_agent_and_member(tmp_path, monkeypatch) -> None:
    """--search's and --algo's help were written by hand and lagged the registries; they are read from them as the
    parser is built, so a strategy or member a script registers before it calls main shows too."""
    from pbx import train
    from pbx.members import ALGOS, REGISTERED, ToyMember
    from pbx.strategies import STRATEGIES, Schedule

    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "1000"})  # each flag's help on one line
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip().startswith("--")}
    assert [name for name in STRATEGIES if not re.search(rf"\b{name}\b", lines["--search"])] == []
    assert [name for name in ALGOS if not re.search(rf"\b{name}\b", lines["--algo"])] == []

    class Mine(Schedule):
        name = "Mine"

    monkeypatch.setitem(STRATEGIES, "Mine", Mine)
    monkeypatch.setitem(REGISTERED, "my-env", ToyMember)
    monkeypatch.setenv("COLUMNS", "1000")
    text = train.build_parser().format_help()
    assert "PB2, FIRE, BGPBT, IPBT or Mine;" in text and "toy-deceptive, my-env train their own" in text
