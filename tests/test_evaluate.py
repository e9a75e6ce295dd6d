"""``python -m pbx.evaluate`` on real tiny runs: scores, videos that decode, and one-line errors."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from pbx import evaluate, export, train
from pbx.evaluation import describe, evaluate as evaluate_target, find_target, result_path
from pbx.video import imageio_ffmpeg

from conftest import ROOT, run_toy

# One rollout of 2 envs x 32 steps, no test episodes while training: the smallest run a PPO member makes.
TINY = ["--search", "none", "--batchsize", "1", "-m", "n_envs=2", "n_steps=32", "batch_size=32", "eval_episodes=0",
        "--t_ready", "64", "--max_budget", "64", "--device", "cpu"]
# Two episodes per policy, cut off after 30 steps (an untrained bigfish episode can last 1,000).
QUICK = ["--episodes", "2", "--max-steps", "30", "--seed", "3"]
CHECKPOINT = "checkpoints/member_0.r0.ckpt"
SHORT = ["--episodes", "1", "--max-steps", "1"]  # an input that is not refused plays in a second


@pytest.fixture(scope="module")
def bigfish_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("evaluate") / "bigfish"
    assert train.main(["--env", "bigfish", *TINY, "-m", "num_levels=50", "--run-dir", str(run_dir)]) == 0
    return run_dir


def _evaluate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[str], dict[str, Any]]:
    """Run the command in this process; return its output lines and the JSON it wrote."""
    assert evaluate.main([*args]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    path = re.search(r"^wrote (\S+\.json)$", out.out, re.M)
    assert path is not None, out.out
    return out.out.splitlines(), json.loads(Path(path.group(1)).read_text())


def _video_line(lines: list[str]) -> tuple[int, tuple[int, int]]:
    """The frame count and size the command says it wrote."""
    found = [re.fullmatch(r"wrote \S+ \((\d+) frames, (\d+)x(\d+)\)", line) for line in lines]
    match = next(m for m in found if m)
    return int(match.group(1)), (int(match.group(2)), int(match.group(3)))


def test_scores_both_policies_and_writes_videos_that_decode(bigfish_run: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    mp4 = tmp_path / "episodes.mp4"
    lines, first = _evaluate(capsys, str(bigfish_run), *QUICK, "--video", str(mp4), "--video-episodes", "2")
    assert lines[0].startswith("member 0 of ") and "test levels" in lines[0]
    for policy in ("stochastic", "deterministic"):
        score = first["scores"][policy]
        assert score["count"] == len(score["returns"]) == 2 and math.isfinite(score["mean"])
        assert math.isfinite(score["std"]) and 0 <= score["cut"] <= 2
        assert any(line.startswith(f"{policy} ") and " mean " in line for line in lines)
    frames, size = _video_line(lines)
    assert size == (256, 256)  # 64x64 observations scaled 4x
    reader = imageio_ffmpeg().read_frames(str(mp4))
    meta = next(reader)
    decoded = [np.frombuffer(f, np.uint8).reshape(256, 256, 3) for f in reader]
    assert meta["size"] == size and len(decoded) == frames
    # each episode's frames (at most 31: the first observation and one per step before the cut) plus 1 s held
    assert 2 * 15 < frames <= 2 * (31 + 15)
    box = decoded[0][3:18, 3:60].astype(int)  # the return written in: white text on a black box
    assert (box.sum(axis=2) < 150).mean() > 0.4 and (box.sum(axis=2) > 600).any()

    # the same seed gives the same scores, with a GIF this time
    gif = tmp_path / "episodes.gif"
    lines, second = _evaluate(capsys, str(bigfish_run), *QUICK, "--video", str(gif), "--video-episodes", "1")
    assert second["scores"] == first["scores"]
    frames, size = _video_line(lines)
    with Image.open(gif) as image:
        assert image.size == size == (256, 256) and image.n_frames >= 2
        durations = []
        for k in range(image.n_frames):
            image.seek(k)
            durations.append(image.info["duration"])
    # the frames shown, held ones and ones Pillow merged included; GIF counts time in 10 ms steps
    assert abs(sum(durations) - frames * 1000 / 15) < 10 * len(durations)


def test_a_procgen_member_exports_to_what_ppo_load_reads(bigfish_run: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # The IMPALA policy is pbx's class: the zip loads where pbx is installed (the other agents': tests/test_export.py).
    from stable_baselines3 import PPO

    assert export.main([str(bigfish_run), "--out", str(tmp_path / "agent")]) == 0
    # rewards are normalised, frames go in raw: the pickle holds return statistics only
    assert "its return statistics (its policy acts on raw observations)" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "agent").iterdir()) == ["model.zip", "vecnormalize.pkl"]
    model = PPO.load(tmp_path / "agent" / "model.zip", device="cpu")
    member = find_target(bigfish_run).load_member()
    obs = np.random.default_rng(0).integers(0, 256, size=(4, 3, 64, 64), dtype=np.uint8)
    assert np.array_equal(model.predict(obs, deterministic=True)[0], member.act(obs, deterministic=True))
    member.close()

def test_train_levels_are_the_runs_training_levels(bigfish_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pbx.members.sb3.member as sb3

    built: list[tuple[Any, bool]] = []
    real = sb3.make_env

    def spy(*args: Any, **kwargs: Any) -> Any:
        built.append((args[3], kwargs["train"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(sb3, "make_env", spy)
    result = evaluate_target(find_target(bigfish_run), episodes=1, levels="train", max_steps=5, device="cpu")
    # after the member's own: the training levels, from the run's config.yaml
    assert [(s.num_levels, s.start_level, train) for s, train in built[1:]] == [(50, 0, True), (50, 0, True)]
    assert result.levels == "train" and result.scores["stochastic"].count == 1


def test_cartpole_is_scored_and_filmed_from_its_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "cartpole"
    assert train.main(["--env", "CartPole-v1", *TINY, "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    mp4 = tmp_path / "cartpole.mp4"
    code = evaluate.main([str(run_dir), "--episodes", "2", "--video", str(mp4), "--video-episodes", "1"])
    out = capsys.readouterr()
    try:
        import pygame  # noqa: F401  (CartPole renders with it)
    except ImportError:
        assert code == 2 and out.err.count("\n") == 1 and "pygame" in out.err
        return
    assert code == 0 and mp4.is_file()
    _, size = _video_line(out.out.splitlines())
    assert size == (304, 208)  # 600x400 kept at every 2nd pixel, padded to 16-pixel blocks


def test_a_mujoco_run_is_filmed_on_a_machine_with_no_display_without_a_traceback(tmp_path: Path) -> None:
    # Left to itself, gymnasium tries glfw first, which needs a display, and prints the traceback of the failed
    # context before it falls back to an off-screen library; pbx picks the off-screen one that is there.
    run_dir = tmp_path / "hopper"
    assert train.main(["--env", "Hopper-v5", *TINY, "--run-dir", str(run_dir)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")}
    gif = tmp_path / "hopper.gif"
    proc = subprocess.run([sys.executable, "-m", "pbx.evaluate", str(run_dir), "--episodes", "1", "--max-steps", "5",
                           "--video", str(gif), "--video-episodes", "1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    with Image.open(gif) as image:
        assert image.n_frames > 5 and np.asarray(image.convert("RGB")).std() > 0  # a picture, not a blank frame

def test_an_ipbt_run_counts_its_rounds_and_a_kept_checkpoint_has_its_own_result_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """IPBT's first population of 4 for 2 takes 2 rounds of the budget: 192 steps at t_ready 64 are 2 rounds, not
    3 (the line said "round 2/3"). A checkpoint a restart kept is another state than the member's last one: its
    numbers go to another file (both went to evaluate_m<M>_test_seed<S>.json)."""
    run = tmp_path / "ipbt"
    assert train.main(["--env", "CartPole-v1", "--search", "IPBT", "--batchsize", "2", "-m", "n_envs=2", "n_steps=32",
                       "batch_size=32", "eval_episodes=0", "--t_ready", "64", "--max_budget", "192", "--device", "cpu",
                       "--run-dir", str(run)]) == 0
    capsys.readouterr()
    lines, result = _evaluate(capsys, str(run), "--member", "0", *SHORT)
    assert f"member 0 of {run} after round 2/2 (" in lines[0] and result["round"] == 1
    target = find_target(run, "0")
    kept = dataclasses.replace(target, round=0, kept=True)
    assert result_path(target, "test", 0).name == "evaluate_m0_test_seed0.json"
    assert result_path(kept, "test", 0).name == "evaluate_m0_kept_r0_test_seed0.json"
    assert describe(kept, "test", 1, 0).startswith(f"member 0 of {run} after round 1/2, kept at the restart after it")


def _damage(run: Path, tmp_path: Path, case: str) -> list[str]:
    """A copy of ``run`` damaged as ``case`` says; returns the command's arguments."""
    if case == "no folder":
        return [str(tmp_path / "absent")]
    if case == "toy":
        run_toy(tmp_path / "toy", max_budget=8)
        return [str(tmp_path / "toy")]
    copy = tmp_path / "copy"
    # without the results other tests wrote into the shared run: the check is that a refusal writes none
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
    if case == "no checkpoint":
        (copy / CHECKPOINT).unlink()
    elif case == "garbage checkpoint":
        (copy / CHECKPOINT).write_bytes(b"not a checkpoint" * 100)
    return {"member 1": [str(copy), "--member", "1"], "bad video": [str(copy), "--video", "x.avi"],
            "0 episodes": [str(copy), "--episodes", "0"], "seed -1": [str(copy), "--seed", "-1", *SHORT],
            "seed 2**32": [str(copy), "--seed", str(2**32), *SHORT]}.get(case, [str(copy)])


@pytest.mark.parametrize("case, message", [
    ("no folder", "absent: no such run folder"),
    ("toy", "trains toy, which has no episodes to play"),
    ("no checkpoint", "member_0.r0.ckpt: missing checkpoint of member 0 after round 0"),
    ("garbage checkpoint", "member_0.r0.ckpt: unreadable checkpoint"),
    ("member 1", "--member must be best, kept or a member of the run (0 to 0), got '1'"),
    ("bad video", "--video x.avi: the file must end in .mp4 or .gif"),
    ("0 episodes", "--episodes must be at least 1, got 0"),
    # ProcGen played seed -1 and wrote evaluate_m0_test_seed-1.json; gymnasium's envs raised a traceback
    ("seed -1", "--seed must be a whole number from 0 to 2**32 - 1, got -1"),
    ("seed 2**32", "--seed must be a whole number from 0 to 2**32 - 1, got 4294967296"),
])
def test_bad_input_is_one_line_and_exit_2(bigfish_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          case: str, message: str) -> None:
    args = _damage(bigfish_run, tmp_path, case)
    capsys.readouterr()
    assert evaluate.main(args) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "copy" / "report").exists()
    if case.startswith("seed"):  # refused with the options, before the line that says what will be played
        assert out == ""


def test_a_truncated_checkpoint_is_one_line_from_the_command(bigfish_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(bigfish_run, copy)
    data = (copy / CHECKPOINT).read_bytes()
    (copy / CHECKPOINT).write_bytes(data[:len(data) // 2])
    proc = subprocess.run([sys.executable, "-m", "pbx.evaluate", str(copy), "--episodes", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and re.match(r"error: \S+member_0\.r0\.ckpt: unreadable checkpoint",
                                                     proc.stderr), proc.stderr
