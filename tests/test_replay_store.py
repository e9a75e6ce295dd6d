"""A damaged replay buffer segment (issue 33) is one line naming the file and exit 2, as a damaged checkpoint is.

A resume rebuilds an off-policy member's buffer from the segment files its checkpoint lists
(:mod:`pbx.members.offpolicy.replay_store`); a disk that filled or a copy cut short leaves one truncated or
missing. Every way a segment can be damaged is one :class:`UsageError` naming it, never a traceback.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from pbx.errors import UsageError
from pbx.members.base import MemberContext
from pbx.members.offpolicy.replay_store import FIELDS
from pbx.members.offpolicy.sac import SACMember, SACSettings

from conftest import ROOT

TINY_SAC = ["--algo", "sac", "--env", "Pendulum-v1", "--search", "PBT", "--batchsize", "2", "--t_ready", "100",
            "--max_budget", "200", "--device", "cpu", "-m", "buffer_size=1000", "learning_starts=64",
            "net_arch=[16,16]", "batch_size=32", "train_freq=4", "eval_episodes=0"]


def _sac(**settings: Any) -> SACMember:
    return SACMember(MemberContext(env="Pendulum-v1", index=0, seed=0, device="cpu"),
                     SACSettings(**{"buffer_size": 1000, "learning_starts": 32, "batch_size": 32,
                                    "net_arch": [16, 16], **settings}), {})


def _newest_segment(folder: Path, member: int = 0) -> Path:
    return max(folder.glob(f"member_{member}.replay.*.npz"))


def _rewrite(path: Path, change: Callable[[dict[str, np.ndarray]], None]) -> None:
    """Rewrite a segment with its arrays changed by ``change``."""
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    change(arrays)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


DAMAGES = {
    "deleted": (lambda p: p.unlink(), "missing replay buffer segment"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "unreadable replay buffer segment"),
    "empty": (lambda p: p.write_bytes(b""), "unreadable replay buffer segment \\(empty file\\)"),
    "garbage": (lambda p: p.write_text("not a segment"), "unreadable replay buffer segment"),
    "a field missing": (lambda p: _rewrite(p, lambda a: a.pop("rewards")), "unreadable replay buffer segment"),
    "another shape": (lambda p: _rewrite(p, lambda a: a.update(observations=a["observations"][..., :2])),
                      "observations of shape \\(\\d+, 1, 2\\), the buffer needs \\(\\d+, 1, 3\\)"),
    "fewer rows": (lambda p: _rewrite(p, lambda a: a.update({k: v[:-1] for k, v in a.items()})),
                   "observations of shape \\(99, 1, 3\\), the buffer needs \\(100, 1, 3\\)"),
    "another dtype": (lambda p: _rewrite(p, lambda a: a.update(rewards=a["rewards"].astype(np.float64))),
                      "rewards of dtype float64, the buffer needs float32"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_segment_is_a_one_line_usage_error_naming_it(damage: str, tmp_path: Path) -> None:
    member = _sac()
    member.train(100)
    member.save(tmp_path / "member_0.r0.ckpt")
    segment = _newest_segment(tmp_path)
    harm, match = DAMAGES[damage]
    harm(segment)
    with pytest.raises(UsageError, match=match) as err:
        _sac().load(tmp_path / "member_0.r0.ckpt", own=True)
    message = str(err.value)
    assert message.startswith(f"{segment}: ") and "member_0.r0.ckpt" in message and "\n" not in message, message


def test_a_damaged_buffer_inside_a_checkpoint_is_a_one_line_usage_error(tmp_path: Path) -> None:
    """With ``copy_buffer`` the checkpoint holds the buffer: rows of another shape there name the checkpoint."""
    import torch

    member = _sac(copy_buffer=True)
    member.train(100)
    path = tmp_path / "member_0.r0.ckpt"
    member.save(path)
    state = torch.load(path, weights_only=False)
    state["replay"]["rows"]["actions"] = state["replay"]["rows"]["actions"][:, :, :0]
    torch.save(state, path)
    with pytest.raises(UsageError, match="actions of shape \\(100, 1, 0\\), the buffer needs \\(100, 1, 1\\)") as err:
        _sac(copy_buffer=True).load(path, own=True)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished SAC run of two members and two rounds."""
    run_dir = tmp_path_factory.mktemp("sac") / "run"
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *TINY_SAC, "--run-dir", str(run_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return run_dir


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_resume_over_a_damaged_segment_is_one_line_and_exit_2(damage: str, sac_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(sac_run, run_dir)
    segment = _newest_segment(run_dir / "checkpoints")
    DAMAGES[damage][0](segment)
    proc = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", str(run_dir), "-m", "max_budget=400"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: {segment}: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
