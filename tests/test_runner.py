"""The synchronous runner on the toy problem: records, determinism, resume after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from pbx.history import read_csv

from conftest import run_toy

ROOT = Path(__file__).resolve().parent.parent


def _without_wall(path: Path) -> pd.DataFrame:
    return read_csv(path).drop(columns="wall_s")


def test_history_rows_record_lineage_and_configs(tmp_path) -> None:
    history = run_toy(tmp_path / "run", search="PBT", max_budget=40)
    frame = history.frame
    assert len(frame) == 4 * 10 and frame["round"].max() == 9
    assert (frame.groupby("round")["steps"].unique().map(list) == [[4 * (r + 1)] for r in range(10)]).all()
    copied = frame[frame["parent"] != frame["member"]]
    assert len(copied) == 9  # one bottom member per exploit round (ceil(0.25 * 4) = 1), none in round 0
    assert copied["explored"].all() and (copied["round"] > 0).all()
    # the recipient starts from the donor's state: its score can only be the donor's plus progress
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


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pbx.train", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_run_resumes_to_the_uninterrupted_history(tmp_path) -> None:
    whole = _start(*PB2_TOY, "--run-dir", str(tmp_path / "whole"))
    assert whole.wait(timeout=120) == 0, whole.stderr.read()

    killed = _start(*PB2_TOY, "--run-dir", str(tmp_path / "killed"))
    history = tmp_path / "killed" / "history.csv"
    deadline = time.time() + 60
    while time.time() < deadline:  # kill -9 somewhere after round 8, mid-run
        if history.exists() and len(history.read_text().splitlines()) > 1 + 4 * 8:
            break
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    done_rounds = read_csv(history)["round"].max()
    assert 8 <= done_rounds < 29, "the kill should land mid-run"

    resumed = _start("--resume", str(tmp_path / "killed"))
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    pd.testing.assert_frame_equal(_without_wall(history), _without_wall(tmp_path / "whole" / "history.csv"))
    assert "Traceback" not in err


def test_sigterm_stops_cleanly_with_a_resume_hint(tmp_path) -> None:
    proc = _start(*PB2_TOY, "--run-dir", str(tmp_path / "run"))
    history = tmp_path / "run" / "history.csv"
    deadline = time.time() + 60
    while time.time() < deadline and not (history.exists() and len(history.read_text().splitlines()) > 1 + 4 * 3):
        time.sleep(0.01)
    proc.terminate()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().endswith(f"continue with --resume {tmp_path / 'run'}") and "Traceback" not in err
    resumed = _start("--resume", str(tmp_path / "run"))
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert read_csv(history)["round"].max() == 29 and out.splitlines()[-1].startswith("done:")
