"""A user's own env, named ``module:Name-v0`` (gymnasium.make's convention): trained, resumed and evaluated from
the folder that holds the module, as a user runs it, and the one-line errors when the module or the env is not
there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from pbx import train
from pbx.history import read_csv

from conftest import ROOT

# docs/examples/point.py: an env gymnasium does not ship, which registers itself when its module is imported
# and cannot render.
MODULE = ROOT / "docs" / "examples" / "point.py"
SAC = ["--algo", "sac", "--search", "PBT", "--batchsize", "2", "--quantile", "0.5", "--t_ready", "100",
       "--max_budget", "200", "-m", "learning_starts=50", "buffer_size=1000", "batch_size=32", "net_arch=[16,16]",
       "eval_episodes=1"]


class DictPoint(gym.Env):
    """A point on a line whose observation is a Dict (position and time left): SB3's MultiInputPolicy's kind."""

    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-10, 10, (1,), np.float32),
                                         "left": gym.spaces.Box(0, 1, (1,), np.float32)})
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, False, True, {}


class GridPoint(DictPoint):
    """A point on a grid, moved along each axis at once: a MultiDiscrete action, which only PPO acts in."""

    observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 3])


class PairPoint(GridPoint):
    """Two separate choices as a Tuple action, which no pbx agent acts in."""

    action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2)))


# Registered when pytest imports this module, so pbx finds them as test_own_env:DictPoint-v0 and so on.
gym.register("DictPoint-v0", entry_point=DictPoint)
gym.register("GridPoint-v0", entry_point=GridPoint)
gym.register("PairPoint-v0", entry_point=PairPoint)


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


def test_runs_whose_env_code_differs_are_not_pooled_and_a_resume_under_other_env_code_says_so(project: Path) -> None:
    """Seed 0 trains the env as it was, seed 1 after its reward was scaled tenfold: the report refuses to pool the
    two, naming the env's code; a resume of seed 0 under the edited module says so and records it."""
    assert _pbx(project, "train", "--env", "my_tasks:Point-v0", *SAC, "--seed", "0", "--run-dir", "s0").returncode == 0
    module = project / "my_tasks.py"
    module.write_text(module.read_text().replace("-float(abs(self.x[0]))", "-10 * float(abs(self.x[0]))"))
    assert _pbx(project, "train", "--env", "my_tasks:Point-v0", *SAC, "--seed", "1", "--run-dir", "s1").returncode == 0
    refused = _pbx(project, "report", "s0", "s1", "--out", "both")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("error: runs under 'PBT' are not one experiment: they differ in pbx.env_code (")
    assert not (project / "both").exists()
    resumed = _pbx(project, "train", "--resume", "s0", "-m", "max_budget=300")
    assert resumed.returncode == 0, resumed.stderr
    assert "note: the code of my_tasks (the env's own, hash " in resumed.stdout
    record = yaml.safe_load((project / "s0" / "config.yaml").read_text())["pbx"]
    started = yaml.safe_load((project / "s1" / "config.yaml").read_text())["pbx"]
    assert record["env_continued"] == [started["env_code"]] != [record["env_code"]]


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_an_env_with_dict_observations_is_one_line_before_anything_is_written(
        algo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = "test_own_env:DictPoint-v0"
    assert train.main(["--env", env, "--algo", algo, "--batchsize", "2", "--t_ready", "64", "--max_budget", "64",
                       "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        f"error: --algo {algo} cannot take {env}'s observations, a Dict space (keys left, x): pbx's agents act on "
        f"one array (SB3's MlpPolicy and CnnPolicy, not its MultiInputPolicy); register the env wrapped in "
        f"gymnasium.wrappers.FlattenObservation, which makes them one Box\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("env, algo, fix", [
    ("GridPoint-v0", "sac", "SAC needs continuous (Box) actions and test_own_env:GridPoint-v0's are multi-discrete; "
                            "use --algo ppo"),  # was "use --algo  or ppo"
    # PPO went on to SB3's AssertionError, SAC to an IndexError inside the check
    *((("PairPoint-v0", algo, "no pbx agent can (they act in Box, Discrete, MultiDiscrete or MultiBinary spaces): "
                              "wrap the env's actions as one of those") for algo in ("ppo", "sac"))),
])
def test_an_action_space_the_agent_cannot_act_in_is_one_line_before_anything_is_written(
        env: str, algo: str, fix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train.main(["--env", f"test_own_env:{env}", "--algo", algo, "--search", "none", "--batchsize", "1",
                       "--t_ready", "64", "--max_budget", "64", "--run-dir", str(tmp_path / "run")]) == 2
    space = {"GridPoint-v0": "MultiDiscrete([3 3])", "PairPoint-v0": "Tuple(Discrete(2), Discrete(2))"}[env]
    assert capsys.readouterr().err == (f"error: --algo {algo} cannot act in test_own_env:{env}'s action space "
                                       f"{space}: {fix}\n")
    assert not (tmp_path / "run").exists()


def test_runs_of_a_registered_member_whose_code_differs_are_not_pooled(tmp_path: Path) -> None:
    """docs/add-a-member.md's worked member, registered from outside pbx: seed 0 as shipped, seed 2 with its
    objective x10. The report refuses to pool them, naming the member's code."""
    example = ROOT / "docs" / "examples"
    for name in ("quadratic.py", "quadratic_space.yaml"):
        (tmp_path / name).write_text((example / name).read_text())

    def train_seed(seed: int) -> None:
        done = subprocess.run([sys.executable, "quadratic.py", "--env", "quadratic", "--search", "PBT", "--seed",
                               str(seed), "-m", "max_budget=40", "--run-dir", f"s{seed}"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr

    train_seed(0)
    script = tmp_path / "quadratic.py"
    script.write_text(script.read_text().replace("return -((self.x - 3.0) ** 2)\n",
                                                 "return -10 * (self.x - 3.0) ** 2\n"))
    train_seed(2)
    refused = _pbx(tmp_path, "report", "s0", "s2", "--out", "both")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("error: runs under 'PBT' are not one experiment: they differ in pbx.env_code (")
    assert not (tmp_path / "both").exists()


def test_a_module_the_env_module_imports_beside_it_counts_in_the_envs_code(tmp_path: Path, monkeypatch) -> None:
    """An env module in no package that imports a helper beside it: an edit to the helper changes the env's code."""
    from pbx.fingerprint import ENV_CODE, run_record

    (tmp_path / "sibling_helper.py").write_text("SCALE = 1.0\n")
    (tmp_path / "sibling_tasks.py").write_text("import sibling_helper  # noqa: F401\n" + MODULE.read_text()
                                               .replace('"Point-v0"', '"SiblingPoint-v0"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = run_record("sibling_tasks:SiblingPoint-v0")[ENV_CODE]
    (tmp_path / "sibling_helper.py").write_text("SCALE = 10.0\n")
    assert run_record("sibling_tasks:SiblingPoint-v0")[ENV_CODE] != before
