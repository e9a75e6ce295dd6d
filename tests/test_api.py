"""``pbx.run`` and ``pbx.resume``: a run from Python is the command's run, with the command's checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import pbx
from pbx.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent


def _rows(path: Path) -> pd.DataFrame:
    """history.csv less its wall-clock column, the one thing two runs of the same settings may differ in."""
    return pd.read_csv(path / "history.csv").drop(columns="wall_s")


def test_run_from_python_is_the_command_line_run_and_resumes_to_itself(tmp_path: Path) -> None:
    result = pbx.run(env="toy", search="PBT", pop_size=3, seed=1, max_budget=40, run_dir=tmp_path / "python")
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--env", "toy", "--search", "PBT", "--batchsize", "3",
                           "--seed", "1", "--max_budget", "40", "--run-dir", str(tmp_path / "command")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert result is not None and result.path == tmp_path / "python"
    pd.testing.assert_frame_equal(_rows(tmp_path / "python"), _rows(tmp_path / "command"))
    pd.testing.assert_frame_equal(result.history.drop(columns="wall_s"), _rows(tmp_path / "command"))
    last = result.history[result.history["round"] == result.history["round"].max()]
    assert result.best["member"] == last.loc[last["score"].idxmax(), "member"]

    again = pbx.resume(tmp_path / "python")  # finished: nothing trains, the same result comes back
    assert again is not None
    pd.testing.assert_frame_equal(again.history, result.history)
    assert again.best.equals(result.best)


def test_a_bad_setting_is_one_usage_error_naming_it_and_leaves_no_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown key 'batchsiz'"):
        pbx.run(env="toy", search="PBT", batchsiz=4, run_dir=tmp_path / "run")
    with pytest.raises(UsageError, match="pop_size must be at least 1"):
        pbx.run(env="toy", pop_size=0, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(UsageError, match="may change only .*, not pop_size"):
        pbx.resume(tmp_path / "run", pop_size=8)


def test_usage_error_is_pbx_s_own_and_costs_no_import_of_the_api() -> None:
    """``except pbx.UsageError:`` was itself an AttributeError."""
    assert pbx.UsageError is UsageError and "UsageError" in pbx.__all__
    from pbx.runners.loop import RunFailed

    assert pbx.RunFailed is RunFailed
    code = "import sys, pbx; pbx.UsageError; print(sorted(m for m in sys.modules if m.startswith('pbx')))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["['pbx',", "'pbx.errors']"], proc.stdout + proc.stderr


@pytest.mark.parametrize("call, message", [
    (lambda: pbx.run(env="toy", run_dir=123), "run_dir must be a folder path (a str or pathlib.Path), got int 123"),
    (lambda: pbx.run(env="toy", config=123), "config must be a path (a str or pathlib.Path), got int 123"),
    (lambda: pbx.run(env="toy", run_dir=""), "--run-dir '' names no folder"),
    (lambda: pbx.run(env="toy", name="../x"), "name must name a folder inside runs/"),
    (lambda: pbx.resume(None), "pbx.resume(path) must be a path (a str or pathlib.Path), got NoneType None"),
], ids=["run_dir=123", "config=123", "run_dir=''", "name=../x", "resume(None)"])
def test_an_argument_of_the_wrong_kind_is_a_usage_error_and_writes_nothing(call, message: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """They raised TypeError (``run_dir=""`` trained into the working folder)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as refused:
        call()
    assert str(refused.value).startswith(message)
    assert list(tmp_path.iterdir()) == []
