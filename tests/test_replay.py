"""``python -m pbx.replay``: a member's discovered schedule trained from scratch as an ordinary run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pbx import replay, train
from pbx.config import resolve
from pbx.errors import UsageError
from pbx.history import History, read_csv
from pbx.reporting import load_run, run_labels
from pbx.run_dir import RunDir
from pbx.runners.loop import RoundLoop
from pbx.runners.sync import SyncRunner
from pbx.schedule import lineage, schedule
from pbx.space import Integer, Space
from pbx.strategies.schedule import Schedule, ScheduleSettings

from conftest import CHUNKED_TOY, ROOT, run_toy

TOY = ["h0", "h1"]
CARTPOLE = ["learning_rate", "ent_coef", "clip_range", "gamma", "gae_lambda", "n_epochs"]
TINY_PPO = ["--env", "CartPole-v1", "-m", "n_envs=2", "n_steps=32", "batch_size=32", "eval_episodes=1",
            "--t_ready", "64", "--max_budget", "192", "--device", "cpu"]


def _check_follows(original: Path, member: int, replayed: Path, names: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The replay's rounds hold the lineage's configs at the lineage's step counts, switched where they change."""
    path = lineage(read_csv(original / "history.csv"), member)
    ours = read_csv(replayed / "history.csv")
    assert (ours["member"] == 0).all() and (ours["parent"] == 0).all()
    assert ours["steps"].tolist() == path["steps"].tolist()
    pd.testing.assert_frame_equal(ours[names], path[names])  # exact: the schedule round-trips config.yaml
    changed = [r > 0 and not path.loc[r, names].equals(path.loc[r - 1, names]) for r in range(len(path))]
    assert ours["explored"].tolist() == changed
    return path, ours


def test_toy_replay_repeats_the_lineage_bit_for_bit_and_the_report_labels_it(tmp_path) -> None:
    run_toy(tmp_path / "pbt", search="PBT", seed=3, max_budget=100)
    run_toy(tmp_path / "none", search="none", seed=3, max_budget=100)
    proc = subprocess.run([sys.executable, "-m", "pbx.replay", str(tmp_path / "pbt"), "--run-dir",
                           str(tmp_path / "replay")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("replay: member ") and sum(line.startswith("round ") for line in lines) == 25
    best = int(lines[0].split()[2].rstrip(","))
    path, ours = _check_follows(tmp_path / "pbt", best, tmp_path / "replay", TOY)
    # the lineage passes through other members' states (copied theta): a fresh run repeats it only if
    # copying theta and switching h is the same as training on with the new h, which the toy is
    assert path["member"].nunique() > 1 and ours["explored"].sum() >= 2
    # tolerance 0: the toy has no randomness and the replay does the lineage's float operations in order
    assert ours["score"].tolist() == path["score"].tolist()
    original = read_csv(tmp_path / "pbt" / "history.csv")
    final = original[original["round"] == original["round"].max()].set_index("member")["score"]
    assert ours["score"].iloc[-1] == final[best] == final.max()
    config = yaml.safe_load((tmp_path / "replay" / "config.yaml").read_text())
    assert config["run"]["pop_size"] == 1 and config["run"]["seed"] == 3 and config["run"]["t_ready"] == 4
    assert [point["steps"] for point in config["strategy"]["schedule"]] == \
        [0, *(ours["steps"].shift()[ours["explored"]].astype(int))]
    runs = [load_run(tmp_path / name) for name in ("pbt", "replay", "none")]
    assert run_labels(runs) == ["PBT", "replay", "none"]


def test_a_stopped_replay_resumes_to_the_uninterrupted_history(tmp_path, monkeypatch, capsys) -> None:
    run_toy(tmp_path / "pbt", search="PBT", seed=1, max_budget=80)
    args = [str(tmp_path / "pbt"), "--member", "2", "--seed", "7"]
    assert replay.main([*args, "--run-dir", str(tmp_path / "whole")]) == 0
    decide = RoundLoop._decide

    def stop_after_round_8(self, history, r):  # Ctrl-C (or a job's SIGTERM) once round 8 is on disk
        if r == 8:
            raise KeyboardInterrupt
        return decide(self, history, r)

    with monkeypatch.context() as patch:
        patch.setattr(RoundLoop, "_decide", stop_after_round_8)
        assert replay.main([*args, "--run-dir", str(tmp_path / "stopped")]) == 130
    assert read_csv(tmp_path / "stopped" / "history.csv")["round"].max() == 8
    assert train.main(["--resume", str(tmp_path / "stopped")]) == 0
    whole, resumed = (read_csv(tmp_path / name / "history.csv").drop(columns="wall_s") for name in ("whole", "stopped"))
    pd.testing.assert_frame_equal(resumed, whole)
    assert whole["explored"].any() and len(whole) == 20
    assert yaml.safe_load((tmp_path / "whole" / "config.yaml").read_text())["run"]["seed"] == 7


def test_a_run_resumed_past_a_short_last_round_replays_as_it_was_trained(tmp_path, capsys) -> None:
    # max_budget 18 ends round 4 at 18 steps, not 20; the resume to 26 goes on from there (the replay called
    # that "the history does not match its config.yaml")
    run_toy(tmp_path / "pbt", search="PBT", max_budget=18)
    assert train.main(["--resume", str(tmp_path / "pbt"), "-m", "max_budget=26"]) == 0
    capsys.readouterr()
    assert replay.main([str(tmp_path / "pbt"), "--run-dir", str(tmp_path / "replay")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "trained to max_budget 18, then resumed to 26, as the run was" in out.splitlines()[0]
    best = int(out.split()[2].rstrip(","))
    path, ours = _check_follows(tmp_path / "pbt", best, tmp_path / "replay", TOY)
    assert ours["steps"].tolist() == [4, 8, 12, 16, 18, 24, 26]
    assert ours["score"].tolist() == path["score"].tolist()  # the toy repeats the lineage exactly


def test_cartpole_replay_applies_the_schedule_at_the_lineage_steps(tmp_path, capsys) -> None:
    original = tmp_path / "pbt"
    assert train.main([*TINY_PPO, "--search", "PBT", "--batchsize", "2", "--seed", "1",
                       "--run-dir", str(original)]) == 0
    history = read_csv(original / "history.csv")
    # the member that copied after the second round: its lineage changes config at least once
    member = int(history[(history["round"] == 2) & history["explored"]]["member"].iloc[0])
    capsys.readouterr()
    assert replay.main([str(original), "--member", str(member), "--run-dir", str(tmp_path / "replay")]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == "", "third-party banners or warnings reached the terminal"
    assert sum(line.startswith("round ") for line in out.splitlines()) == 3
    path, ours = _check_follows(original, member, tmp_path / "replay", CARTPOLE)
    assert ours["steps"].tolist() == [64, 128, 192] and ours["explored"].iloc[2]
    assert np.isfinite(ours["test_score"]).all()
    member_settings = yaml.safe_load((original / "config.yaml").read_text())["member"]
    assert yaml.safe_load((tmp_path / "replay" / "config.yaml").read_text())["member"] == member_settings


def test_a_replay_skips_the_rounds_its_lineage_skipped(tmp_path) -> None:
    """A lineage of members whose chunks outlast t_ready (tests/mpi/chunked_toy.py) skipped rounds: the replay, with
    the same plan, skips them too, so it ends its rounds at the lineage's steps with the lineage's scores (a
    skipped round's config, in force at no step, gives way to the next round's in the schedule)."""
    run = [sys.executable, CHUNKED_TOY]
    done = subprocess.run([*run, "train", "--env", "toy-chunked", "--search", "PBT", "--seed", "2",
                           "--max_budget", "60", "--run-dir", str(tmp_path / "pbt")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    again = subprocess.run([*run, "replay", str(tmp_path / "pbt"), "--run-dir", str(tmp_path / "replay")],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    best = int(again.stdout.split()[2].rstrip(","))
    path = lineage(read_csv(tmp_path / "pbt" / "history.csv"), best)
    ours = read_csv(tmp_path / "replay" / "history.csv")
    skipped = ours["carried"] & (ours["steps"] == ours["steps"].shift(fill_value=0))
    assert skipped.any() and ours["steps"].tolist() == path["steps"].tolist()
    assert ours["score"].tolist() == path["score"].tolist()
    assert ours.loc[~skipped, TOY].equals(path.loc[~skipped, TOY])


def test_a_config_a_skipped_round_held_at_no_step_leaves_the_schedule() -> None:
    """A round the lineage skipped (its steps unchanged) trained no step with its config, so the schedule holds the
    next round's config from those steps, as the replay's member, skipping the same round, trains it (two change
    points at one step count are refused, and the replay would switch to the first)."""
    a, b, c = ({"h0": h0, "h1": 0.5} for h0 in (0.1, 0.2, 0.3))

    def points(steps: list[int], configs: list[dict]) -> list[dict]:
        rows = pd.DataFrame([{"steps": s, **config} for s, config in zip(steps, configs)])
        found = schedule(rows, History(TOY))
        ScheduleSettings(found)  # a valid schedule
        return [(point["steps"], point["config"]["h0"]) for point in found]

    assert points([5, 5, 10, 10, 15], [a, b, c, c, a]) == [(0, 0.1), (5, 0.3), (10, 0.1)]
    assert points([5, 5, 5, 10], [a, b, c, a]) == [(0, 0.1)]  # two skipped rounds, back to the config in force


def test_a_lineage_trained_before_rounds_were_skipped_is_refused_saying_so(tmp_path, capsys) -> None:
    """The committed PB2-paper runs trained one rollout a round at least: random seed 1's member 0 (56,960-step
    rollouts against t_ready 50,000) ran ahead of a plan that this pbx would have it skip rounds of."""
    source = ROOT / "docs" / "results" / "pb2_paper" / "random" / "seed1"
    assert replay.main([str(source), "--member", "0", "--run-dir", str(tmp_path / "replay")]) == 2
    err = capsys.readouterr().err
    assert "the lineage was trained before pbx let a member skip a round" in err and err.count("\n") == 1, err
    assert not (tmp_path / "replay").exists()


def _damage(tmp_path: Path, case: str) -> list[str]:
    run = tmp_path / "pbt"
    if case == "missing":
        return [str(tmp_path / "nothing")]
    run_toy(run, search="PBT", max_budget=16)
    history = run / "history.csv"
    if case == "no history":
        history.unlink()
    elif case == "bad config":
        (run / "config.yaml").write_text("run: [\n")
    elif case == "torn middle row":
        lines = history.read_text().splitlines()
        history.write_text("\n".join([*lines[:3], lines[3][:5], *lines[4:]]) + "\n")
    elif case == "no round":
        history.write_text(history.read_text().splitlines()[0] + "\n")
    elif case == "other t_ready":
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["run"]["t_ready"] = 2
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    return [str(run), "--member", {"member 4": "4", "member x": "x"}.get(case, "best"),
            *(["--seed", "-1"] if case == "seed -1" else [])]


@pytest.mark.parametrize("case, message", [
    ("missing", "no such run folder"),
    ("no history", "not a pbx run folder (no history.csv)"),
    ("bad config", "not valid YAML"),
    ("torn middle row", "row 3 has"),
    ("no round", "no finished round yet, so no schedule to replay"),
    ("member 4", "--member must be best, kept or a member of the run (0 to 3), got '4'"),
    ("member x", "got 'x'"),
    ("other t_ready", "the history does not match its config.yaml"),
    ("seed -1", "--seed must be a whole number from 0 to 2**32 - 1, got -1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case: str, message: str) -> None:
    argv = _damage(tmp_path, case)
    capsys.readouterr()
    assert replay.main([*argv, "--run-dir", str(tmp_path / "replay")]) == 2
    out, err = capsys.readouterr()
    assert message in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert out == ""
    assert not (tmp_path / "replay").exists()


def _replay_config(schedule: object, **run: object) -> dict:
    return {"run": {"env": "toy", "search": "replay", "pop_size": 1, "t_ready": 4, "max_budget": 16, **run},
            "strategy": {"schedule": schedule}}


@pytest.mark.parametrize("schedule, message", [
    ([], "--search replay needs a schedule"),
    ("h0=1", "schedule must be a list"),
    ([{"steps": 4, "config": {"h0": 1.0, "h1": 1.0}}], "first entry must be at steps 0"),
    ([{"steps": 0, "config": {"h0": 1.0, "h1": 1.0}}, {"steps": 0, "config": {"h0": 0.5, "h1": 1.0}}],
     "entry 1: steps must be an integer above the previous entry's (0)"),
    ([{"steps": 0, "config": {"h0": 1.0}}], "sets ['h0'], but the search space holds ['h0', 'h1']"),
    ([{"steps": 0, "config": {"h0": 1.5, "h1": 1.0}}], "h0=1.5 is outside the search space"),
    ([{"steps": 0, "h0": 1.0}], "schedule entry 0 must be a mapping {steps: S, config: {...}}"),
])
def test_schedule_setting_is_checked_before_anything_trains(schedule: object, message: str) -> None:
    with pytest.raises(UsageError) as err:
        resolve([_replay_config(schedule)])
    assert message in str(err.value)


def test_a_schedule_that_gives_an_integer_parameter_a_fraction_is_refused() -> None:
    space = Space({"n_epochs": Integer(1, 20)})
    Schedule.validate(ScheduleSettings([{"steps": 0, "config": {"n_epochs": 4}}]), space)
    with pytest.raises(UsageError, match="n_epochs=4.5 is outside the search space"):
        Schedule.validate(ScheduleSettings([{"steps": 0, "config": {"n_epochs": 4.5}}]), space)


def test_a_change_point_inside_a_round_switches_at_the_next_boundary(tmp_path) -> None:
    # t_ready 4, change at step 6: as Ray's replay, the switch waits for the first boundary at or after it (8)
    points = [{"steps": 0, "config": {"h0": 1.0, "h1": 0.0}}, {"steps": 6, "config": {"h0": 0.0, "h1": 1.0}}]
    cfg = resolve([_replay_config(points)])
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    run_dir.begin()
    frame = SyncRunner(cfg, run_dir).run().frame
    assert frame["h1"].tolist() == [0.0, 0.0, 1.0, 1.0] and frame["explored"].tolist() == [False, False, True, False]
