"""A user's own env, named ``module:Name-v0`` (gymnasium.make's convention): trained, resumed and evaluated from
the folder that holds the module, as a user runs it, and the one-line errors when the module or the env is not
there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pbx import train
from pbx.history import read_csv

from conftest import ROOT

# docs/examples/point.py: an env gymnasium does not ship, which registers itself when its module is imported
# and cannot render.
MODULE = ROOT / "docs" / "examples" / "point.py"
SAC = ["--algo", "sac", "--search", "PBT", "--batchsize", "2", "--quantile", "0.5", "--t_ready", "100",
       "--max_budget", "200", "-m", "learning_starts=50", "buffer_size=1000", "batch_size=32", "net_arch=[16,16]",
       "eval_episodes=1"]


def _pbx(folder: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pbx.<command>`` run in ``folder``, as a user in their project runs it."""
    return subprocess.run([sys.executable, "-m", f"pbx.{command}", *args], cwd=folder, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "my_tasks.py").write_text(MODULE.read_text())
    return tmp_path


def test_an_env_of_the_users_own_module_trains_resumes_and_is_scored(project: Path) -> None:
    done = _pbx(project, "train", "--env", "my_tasks:Point-v0", *SAC, "--run-dir", "run")
    assert done.returncode == 0 and done.stderr == "", done.stderr  # no warning that it cannot render
    assert "PBT on my_tasks:Point-v0, SAC" in done.stdout
    resumed = _pbx(project, "train", "--resume", "run", "-m", "max_budget=300")
    assert resumed.returncode == 0 and resumed.stderr == "", resumed.stderr
    history = read_csv(project / "run" / "history.csv")
    assert sorted(history["round"].unique()) == [0, 1, 2] and history["score"].notna().all()
    filmed = _pbx(project, "evaluate", "run", "--episodes", "2", "--video", "point.gif")
    assert "of run after round 3/3 (300 steps): 2 episodes on my_tasks:Point-v0" in filmed.stdout
    assert filmed.returncode == 2 and filmed.stderr == ("error: cannot record the video: my_tasks:Point-v0 does not "
                                                        "render RGB frames (its metadata's render_modes: [])\n")


@pytest.mark.parametrize("env, message", [
    ("my_taskz:Point-v0", "--env my_taskz:Point-v0: cannot import my_taskz (No module named 'my_taskz'): run from "
                          "the folder that holds it, or put that folder on PYTHONPATH"),
    ("docs.examples.point:Line-v0", "unknown env 'docs.examples.point:Line-v0': docs.examples.point imports, but "
                                    "registers no Line-v0 with gymnasium (gymnasium.register('Line-v0', "
                                    "entry_point=...) in it)"),
])
def test_a_module_or_env_that_is_not_there_is_one_line(env: str, message: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # where docs.examples.point imports from
    assert train.main(["--env", env, "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "run").exists()
