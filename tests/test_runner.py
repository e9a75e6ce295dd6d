"""The synchronous runner on the toy problem: records, determinism, resume after a kill."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from pbx.history import History, read_csv
from pbx.members import Diverged, ToyMember, register
from pbx.strategies.bayes.observations import intervals

from conftest import CHUNKED_TOY, check_skips, kill_after, run_toy, start_train, toy_config

def _without_wall(path: Path) -> pd.DataFrame:
    return read_csv(path).drop(columns="wall_s")


def test_history_rows_record_lineage_and_configs(tmp_path) -> None:
    history = run_toy(tmp_path / "run", search="PBT", max_budget=40)
    frame = history.frame
    assert len(frame) == 4 * 10 and frame["round"].max() == 9
    assert [sorted(set(steps)) for _, steps in frame.groupby("round")["steps"]] == [[4 * (r + 1)] for r in range(10)]
    copied = frame[frame["parent"] != frame["member"]]
    assert len(copied) == 9  # one bottom member per exploit round (ceil(0.25 * 4) = 1), none in round 0
    assert copied["explored"].all() and (copied["round"] > 0).all()
    # the recipient starts from the donor's state: on the toy |theta| only shrinks, so its score is at
    # least the donor's score of the round before (its own was lower: it was in the bottom quarter)
    previous = frame.set_index(["member", "round"])["score"]
    for _, row in copied.iterrows():
        donor_before = previous[(row["parent"], row["round"] - 1)]
        assert row["score"] >= donor_before > previous[(row["member"], row["round"] - 1)]
    ckpts = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert ckpts == [f"member_{i}.r9.ckpt" for i in range(4)]


def test_none_never_copies_and_keeps_the_default_config(tmp_path) -> None:
    frame = run_toy(tmp_path / "run", search="none", max_budget=20).frame
    assert (frame["parent"] == frame["member"]).all() and not frame["explored"].any()
    assert (frame["h0"] == 0.5).all() and (frame["h1"] == 0.5).all()


def test_same_seed_same_history_other_seed_other(tmp_path) -> None:
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        run_toy(tmp_path / name, search="PB2", max_budget=60, seed=seed)
    a, b, c = (_without_wall(tmp_path / n / "history.csv") for n in "abc")
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


PB2_TOY = ("--env", "toy", "--search", "PB2", "--seed", "5", "--max_budget", "120")
_start = start_train


def test_killed_run_resumes_to_the_uninterrupted_history(tmp_path) -> None:
    whole = _start(*PB2_TOY, "--run-dir", str(tmp_path / "whole"))
    assert whole.wait(timeout=120) == 0, whole.stderr.read()

    killed = _start(*PB2_TOY, "--run-dir", str(tmp_path / "killed"))
    history = tmp_path / "killed" / "history.csv"
    kill_after(killed, history, rows=4 * 8)  # kill -9 somewhere after round 8, mid-run
    done_rounds = read_csv(history)["round"].max()
    assert 8 <= done_rounds < 29, "the kill should land mid-run"

    resumed = _start("--resume", str(tmp_path / "killed"))
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    pd.testing.assert_frame_equal(_without_wall(history), _without_wall(tmp_path / "whole" / "history.csv"))
    assert "Traceback" not in err


def test_members_whose_chunks_outlast_t_ready_skip_rounds_and_resume_to_the_uninterrupted_history(tmp_path) -> None:
    """The toy in whole chunks of 3 to 7 steps against t_ready 4 (tests/mpi/chunked_toy.py), as PPO's rollouts of a
    searched length outlast a round: a member skips the rounds it begins at or past their planned end, so every
    member ends within a chunk of max_budget; the skip is decided from the steps and config a checkpoint holds,
    so kill -9 and --resume write the same history; and PB2 takes no improvement rate to a skipped round (its
    score is carried: no steps, no improvement) but does take one from it (the carried score is the score of
    exactly the state the next round starts from; on the toy every carried score is a skip's)."""
    args = [sys.executable, CHUNKED_TOY, "train", "--env", "toy-chunked", "--search", "PB2", "--seed", "5",
            "--max_budget", "120"]
    whole = subprocess.run([*args, "--run-dir", str(tmp_path / "whole")], capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0, whole.stderr
    killed = subprocess.Popen([*args, "--run-dir", str(tmp_path / "killed")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    history = tmp_path / "killed" / "history.csv"
    kill_after(killed, history, rows=4 * 8)
    assert 8 <= read_csv(history)["round"].max() < 29, "the kill should land mid-run"
    resumed = subprocess.run([sys.executable, CHUNKED_TOY, "train", "--resume", str(tmp_path / "killed")],
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    pd.testing.assert_frame_equal(_without_wall(history), _without_wall(tmp_path / "whole" / "history.csv"))

    frame = read_csv(history)
    skipped = check_skips(frame, 4, 3 + (4 * frame["h0"]).round())
    assert skipped.sum() >= 10 and frame.loc[frame["round"] == 29, "steps"].between(120 - 3, 120 + 6).all()
    carried = frame.set_index(["member", "round"])["carried"]
    trained = [r > 0 and not carried[(m, r)] for m, r in zip(frame["member"], frame["round"])]
    after_skip = [t and carried[(p, r - 1)] for t, p, r in zip(trained, frame["parent"], frame["round"])]
    rates = intervals(History(["h0", "h1"], frame), toy_config().space, window=1000)
    assert len(rates.rate) == sum(trained) < 4 * 29 and sum(after_skip) >= 5


def test_sigterm_stops_cleanly_with_a_resume_hint(tmp_path) -> None:
    """SIGTERM stops the run at its next member with everything saved: exit 75, one line saying how to go on."""
    proc = _start(*PB2_TOY, "--run-dir", str(tmp_path / "run"))
    history = tmp_path / "run" / "history.csv"
    deadline = time.time() + 60
    while time.time() < deadline and not (history.exists() and len(history.read_text().splitlines()) > 1 + 4 * 3):
        time.sleep(0.01)
    proc.terminate()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    assert err.startswith("stopped by SIGTERM in round ") and err.count("\n") == 1, err
    assert err.strip().endswith(f"continue with --resume {tmp_path / 'run'}")
    resumed = _start("--resume", str(tmp_path / "run"))
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert read_csv(history)["round"].max() == 29 and out.splitlines()[-1].startswith("done:")


def test_strategy_csv_records_pb2_reasons_and_a_resume_writes_them_once(tmp_path) -> None:
    whole = _start(*PB2_TOY, "--run-dir", str(tmp_path / "whole"))
    assert whole.wait(timeout=120) == 0, whole.stderr.read()
    killed = _start(*PB2_TOY, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=4 * 10)
    resumed = _start("--resume", str(tmp_path / "killed"))
    assert resumed.wait(timeout=120) == 0, resumed.stderr.read()
    a, b = (pd.read_csv(tmp_path / name / "strategy.csv") for name in ("whole", "killed"))
    pd.testing.assert_frame_equal(a, b)
    # one row per copy (one recipient per round here), each recorded once although round 10's was replayed
    history = read_csv(tmp_path / "whole" / "history.csv")
    copies = history[history["parent"] != history["member"]]
    assert a[["round", "member", "donor"]].values.tolist() == (
        copies[["round", "member", "parent"]].assign(round=copies["round"] - 1).values.tolist())
    info = pd.json_normalize(a["info"].map(json.loads).tolist())
    pb2 = info[info["gp"] == 1]
    assert len(pb2) >= len(a) - 2 and pb2[["lengthscale", "epsilon", "noise", "ucb"]].notna().all().all()


def test_eval_every_tests_every_nth_round_and_the_last(tmp_path) -> None:
    frame = run_toy(tmp_path / "run", search="PBT", max_budget=40, eval_every=3).frame
    tested = sorted(frame.loc[frame["test_score"].notna(), "round"].unique())
    assert tested == [2, 5, 8, 9]


def _damage_cases(ckpt: Path, history: Path) -> dict[str, Callable[[], None]]:
    return {
        "missing checkpoint": lambda: ckpt.unlink(),
        "empty checkpoint": lambda: ckpt.write_text(""),
        "garbage checkpoint": lambda: ckpt.write_bytes(b"\x00\x01 not json"),
        "checkpoint out of step": lambda: ckpt.write_text(ckpt.read_text().replace('"steps": 40', '"steps": 36')),
        "history with a foreign header": lambda: history.write_text("a,b\n1,2\n"),
        # whole rounds, or a torn round 0, that look like an earlier kill but for the newer checkpoints
        "history without its last rounds": lambda: history.write_text("".join(_lines(history)[:1 + 4 * 5])),
        "history cut inside round 0": lambda: history.write_text("".join(_lines(history)[:2]) + "1,0,4,0.0"),
    }


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


@pytest.mark.parametrize("case", list(_damage_cases(Path("x"), Path("y"))))
def test_a_damaged_run_folder_is_one_line_and_exit_2(tmp_path, case: str) -> None:
    run_dir = tmp_path / "run"
    run_toy(run_dir, search="PBT", max_budget=40, t_ready=4)
    # make the run resumable: pretend it should go on to 80 steps
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("max_budget: 40", "max_budget: 80"))
    named = _damage_cases(run_dir / "checkpoints" / "member_2.r9.ckpt", run_dir / "history.csv")
    named[case]()
    stored = config.read_text()
    proc = _start("--resume", str(run_dir), "--max_budget", "120")  # a change the refusal must not write
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert ("member_2.r9.ckpt" in err) if "checkpoint" in case else ("history.csv" in err), err
    assert config.read_text() == stored
    if "history" in case:  # refused before anything in the folder changed
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [f"member_{m}.r9.ckpt" for m in range(4)]


def test_checkpoints_are_durable_before_the_rounds_history_rows(tmp_path, monkeypatch) -> None:
    """The order a crash relies on: round r's checkpoints fsynced, then its rows, then r-1's files deleted."""
    import os

    synced: list[str] = []
    fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    run_toy(tmp_path / "run", search="PBT", max_budget=12)
    history_syncs = [i for i, name in enumerate(synced) if name == "history.csv"]
    for r, at in enumerate(history_syncs[1:]):  # the first fsync writes the header
        before = synced[history_syncs[r]:at]
        assert {f"member_{m}.r{r}.ckpt.tmp" for m in range(4)} <= set(before), before


def test_the_round_line_shows_the_test_score_of_the_best_member_on_train() -> None:
    from pbx.console import round_line

    rows = pd.DataFrame({"member": [0, 1, 2], "round": [0, 0, 0], "steps": [8, 8, 8], "score": [5.0, 1.0, float("nan")],
                         "test_score": [2.0, 9.0, 7.0]})
    line = round_line(0, 3, rows, [], {2: "diverged (weights are not finite)"})
    assert "best 5 (m0)" in line and "test 2 |" in line and "test 9" not in line
    assert "m2 no score: diverged (weights are not finite)" in line
    nothing = rows.assign(score=float("nan"))
    from pbx.strategies import Decision

    keep = [Decision(m, m, {}) for m in range(3)]
    assert round_line(0, 3, nothing, keep).endswith("no exploit: no member has a score")


def test_without_a_terminal_a_long_round_says_as_it_begins_when_its_line_is_due(tmp_path) -> None:
    """Output to pipes (a CI log; a notebook without widgets has no terminal either): no bar, a line per round,
    and one more as a round begins whose round before took over a minute. The history's clock is edited so that
    each of the first 5 rounds took 90 s: the resumed round 6 says so as it begins; rounds 7 and 8, after rounds
    of milliseconds, do not."""
    run = tmp_path / "run"
    run_toy(run, max_budget=20)
    frame = read_csv(run / "history.csv")
    frame.assign(wall_s=90.0 * (frame["round"] + 1)).to_csv(run / "history.csv", index=False)
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", str(run), "--max_budget", "32"],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # no bar
    lines = [line for line in proc.stdout.splitlines() if line.startswith("round ")]
    assert [line.split(" |")[0].split(" at ")[0] for line in lines] == [
        "round 6/8 begins", "round 6/8", "round 7/8", "round 8/8"], lines
    assert re.fullmatch(r"round 6/8 begins at \d\d:\d\d; round 5 took 01:30, so its line is due near \d\d:\d\d",
                        lines[0])


class _Gappy(ToyMember):
    """The toy, but member 1 ends no episode in rounds 2 and 3 (a NaN score, no divergence), member 2 diverges in
    round 3, and member 3 ends none in round 0 (nothing to carry yet)."""

    def train(self, steps: int) -> float:
        score = super().train(steps)
        round_ = self.steps // steps - 1
        if (self.context.index, round_) in ((1, 2), (1, 3), (3, 0)):
            self._curve = []
            return math.nan
        if (self.context.index, round_) == (2, 3):
            raise Diverged("weights are not finite")
        return score


def test_a_round_without_an_episode_carries_the_last_score_and_a_diverged_member_scores_nan(tmp_path) -> None:
    """NaN says two things: diverged (the worst, kept NaN) or no episode ended (a policy whose episodes outlast the
    round): the latter carries the score its state last had, marked, so selection does not take a member too good
    to finish an episode for the worst, and no PB2 rate starts or ends at a carried score."""
    register(_Gappy, "toy-gappy")
    history = run_toy(tmp_path / "run", env="toy-gappy", search="none", max_budget=24)
    frame = history.frame.set_index(["member", "round"])
    assert frame.loc[(1, 2), "score"] == frame.loc[(1, 3), "score"] == frame.loc[(1, 1), "score"]
    assert frame.loc[(1, 2), "carried"] and frame.loc[(1, 3), "carried"] and not frame.loc[(1, 4), "carried"]
    assert math.isnan(frame.loc[(2, 3), "score"]) and not frame.loc[(2, 3), "carried"]
    assert math.isnan(frame.loc[(3, 0), "score"]) and not frame.loc[(3, 0), "carried"]  # nothing to carry yet
    assert frame["carried"].sum() == 2
    assert read_csv(tmp_path / "run" / "history.csv")["carried"].sum() == 2  # on disk too
    # PB2's intervals: 4 members x 5 rounds after the first, less member 1's rounds 2 to 4 (to or from a carried
    # score), member 2's 3 and 4 (to or from NaN) and member 3's round 1 (from NaN)
    cfg = toy_config(env="toy-gappy")
    assert len(intervals(history, cfg.space, window=100).rate) == 4 * 5 - 3 - 2 - 1


def test_a_history_written_before_carried_scores_reads_as_none_carried(tmp_path) -> None:
    history = run_toy(tmp_path / "run", search="PBT", max_budget=8)
    path = tmp_path / "run" / "history.csv"
    old = read_csv(path).drop(columns="carried")
    old.to_csv(path, index=False)
    again = read_csv(path)
    assert not again["carried"].any() and list(again.columns) == list(history.frame.columns)


@pytest.mark.parametrize("search, rounds, restarts", [("PBT", 50, False), ("BGPBT", 48, False), ("IPBT", 49, True)])
def test_the_start_line_and_the_progress_bar_count_what_the_run_trains(tmp_path, capsys, monkeypatch,
                                                                       search: str, rounds: int,
                                                                       restarts: bool) -> None:
    """The toy at max_budget 200, t_ready 4: BG-PBT's 12 first members take 3 rounds of the budget, so it has 48
    rounds, not 50 (the start line said 50, and the bar's total counted 832 steps for the 800 the run trains);
    IPBT's 8 take 2, and its restart round's 8 candidates again (the start line plans no restart: 49)."""
    from pbx import train
    from pbx.runners import common

    bars: list[tuple[int, int]] = []

    class Bar(common.Console):
        def __init__(self, total_steps: int, done_steps: int, desc: str) -> None:
            bars.append((total_steps, done_steps))
            super().__init__(total_steps, done_steps, desc)

    monkeypatch.setattr(common, "Console", Bar)
    run = tmp_path / "run"
    assert train.main(["--env", "toy", "--search", search, "--max_budget", "200", "--run-dir", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines[0]
    assert f"x 200 steps ({rounds} rounds of 4)" in start, start
    if search != "PBT":  # only IPBT's restarts lengthen its rounds (BG-PBT's keep t_ready)
        assert ("2 times as long" in lines[1]) == (search == "IPBT"), lines[1]
    frame = read_csv(run / "history.csv")
    assert frame["restart"].any() == restarts and (frame["round"].nunique() == rounds) != restarts
    trained = frame["steps"] - frame.merge(frame.assign(round=frame["round"] + 1), how="left",
                                           left_on=["parent", "round"], right_on=["member", "round"])["steps_y"].fillna(0)
    assert trained.sum() == 4 * 200 and bars == [(4 * 200, 0)]  # every member's steps, each candidate's included
