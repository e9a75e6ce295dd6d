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
