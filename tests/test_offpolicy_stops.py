"""Off-policy members (SAC, TD3, DQN) stop inside a round at their next collection (``train_freq`` steps), as PPO
stops at its next rollout (``tests/test_stops.py``): a signal, a time limit or a kill after a periodic save, and a
resume ends with the uninterrupted run's history and curves; the replay buffer's segment files
(:mod:`pbx.members.offpolicy.replay_store`) keep every checkpoint a resume or an exploit may read whole, at every
point a kill can land. Real SB3, real Pendulum and CartPole, real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import pbx.members.sb3.checkpoint
from pbx.history import read_csv
from pbx.members import Stopped
from pbx.members.base import MemberContext
from pbx.members.offpolicy.replay_store import rows
from pbx.members.offpolicy.sac import SACMember, SACSettings
from pbx.run_dir import RunDir
from pbx.runners.start import launch, new_run
from pbx.runners.stopping import STOPPED_EXIT

from conftest import ROOT, built_once
from test_stops import assert_same_run, stopped_every, train, wait_for

# Two members under PBT, 2 or 3 rounds, a buffer the run wraps: Pendulum's episodes last 200 steps, so rounds of 400
# score two each (members are ranked and copied); SAC collects 16 steps between updates. DQN on CartPole: rounds
# of 160, 16 steps a collection. copy_buffer: an exploit copies the donor's buffer, written whole into each save;
# optimize_memory_usage (DQN's Atari row): a row's next observation is the next row's, none in the segments.
MEMBER = {"buffer_size": 300, "learning_starts": 64, "net_arch": [16, 16], "train_freq": 16, "eval_episodes": 1}
RUNS: dict[str, dict[str, Any]] = {
    "sac": {"run": {"env": "Pendulum-v1", "algo": "sac", "t_ready": 400, "max_budget": 800},
            "member": {**MEMBER, "batch_size": 32}},
    "sac-copy_buffer": {"run": {"env": "Pendulum-v1", "algo": "sac", "t_ready": 400, "max_budget": 800},
                        "member": {**MEMBER, "batch_size": 32, "copy_buffer": True}},
    "dqn": {"run": {"env": "CartPole-v1", "algo": "dqn", "t_ready": 160, "max_budget": 480},
            "member": {**MEMBER, "gradient_steps": 4, "schedule_timesteps": 480}},
    "dqn-optimize_memory_usage": {"run": {"env": "CartPole-v1", "algo": "dqn", "t_ready": 160, "max_budget": 480},
                                  "member": {**MEMBER, "gradient_steps": 4, "schedule_timesteps": 480,
                                             "optimize_memory_usage": True}},
}


def layer(name: str) -> dict[str, Any]:
    run = RUNS[name]
    return {"run": {**run["run"], "search": "PBT", "pop_size": 2, "quantile": 0.5, "device": "cpu"},
            "member": run["member"]}


def whole_run(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The uninterrupted run ``name``, trained once for the session's tests."""
    return built_once(tmp_path_factory, f"offpolicy-stops-{name}",
                      lambda folder: launch(lambda comm: new_run([layer(name)], run_dir=folder)))


@pytest.mark.parametrize("name", list(RUNS))
def test_stopped_every_few_collections_resumes_to_the_uninterrupted_run(
        name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stopped at every ninth collection boundary of the process and resumed each time: the history and curves are
    the uninterrupted run's, exploits included."""
    whole = whole_run(tmp_path_factory, name)
    folder = tmp_path / "stopped"
    stops: list[str] = []
    stopped_every(9, layer(name), folder, lambda err: stops.append(str(err)))
    assert sum("saved inside it" in stop for stop in stops) >= 5, stops
    assert_same_run(folder, whole)
    history = read_csv(folder / "history.csv")
    assert (history["parent"] != history["member"]).any(), "the run should copy a donor"
    assert not list((folder / "checkpoints").glob("*.part.*"))


def run_args(name: str) -> list[str]:
    run, member = RUNS[name]["run"], RUNS[name]["member"]
    return ["--algo", run["algo"], "--env", run["env"], "--search", "PBT", "--batchsize", "2", "--quantile", "0.5",
            "--t_ready", str(run["t_ready"]), "--max_budget", str(run["max_budget"]), "--device", "cpu",
            "-m", *(f"{key}={value}".replace(" ", "") for key, value in member.items())]


def resume_to_the_end(folder: Path, whole: Path) -> None:
    """``--resume`` (periodic saves off: the stops are tested) ends with the uninterrupted run's history and curves."""
    done = subprocess.run([sys.executable, "-m", "pbx.train", "--resume", str(folder), "-m", "checkpoint_minutes=0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert_same_run(folder, whole)


def sigterm_inside(job: subprocess.Popen, folder: Path, round_: int) -> None:
    """SIGTERM once a member has saved inside ``round_``: exit 75, one line saying so, the part on disk."""
    wait_for(f"member_*.r{round_}.part.ckpt", folder, job)
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    assert job.returncode == STOPPED_EXIT, err
    assert err.startswith(f"stopped by SIGTERM in round {round_} (") and "saved inside it" in err, err
    assert err.endswith(f"continue with --resume {folder}\n") and err.count("\n") == 1, err
    assert list((folder / "checkpoints").glob(f"member_*.r{round_}.part.ckpt"))


def test_a_sac_run_killed_after_a_periodic_save_then_stopped_by_sigterm_inside_a_round_resumes_exactly(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """``kill -9`` once a member has saved inside round 0 (periodic saves at every collection), a resume, SIGTERM
    inside round 1; a resume ends with the uninterrupted run's history and curves."""
    whole = whole_run(tmp_path_factory, "sac")
    folder = tmp_path / "run"
    job = train(*run_args("sac"), "-m", "checkpoint_minutes=1e-9", "--run-dir", str(folder))
    wait_for("member_0.r0.part.ckpt", folder, job)
    job.kill()
    job.wait()
    assert (folder / "history.csv").read_text().count("\n") == 1, "the kill should land inside round 0"
    sigterm_inside(train("--resume", str(folder)), folder, 1)
    resume_to_the_end(folder, whole)


def test_a_dqn_run_stopped_by_sigterm_inside_a_round_resumes_exactly(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """SIGTERM once a member has saved inside round 1 (periodic saves at every collection); a resume ends with the
    uninterrupted run's history and curves."""
    whole = whole_run(tmp_path_factory, "dqn")
    folder = tmp_path / "run"
    sigterm_inside(train(*run_args("dqn"), "-m", "checkpoint_minutes=1e-9", "--run-dir", str(folder)), folder, 1)
    resume_to_the_end(folder, whole)


def _sac(**settings: Any) -> SACMember:
    return SACMember(MemberContext(env="Pendulum-v1", index=0, seed=0, device="cpu"),
                     SACSettings(**{"buffer_size": 100, "learning_starts": 16, "batch_size": 16, "train_freq": 4,
                                    "net_arch": [16, 16], **settings}), {})


def _filled(member: SACMember) -> dict[str, Any]:
    """The rows a member's buffer holds and where its ring stands."""
    buffer = member.model.replay_buffer
    return {**rows(buffer, 0, buffer.buffer_size if buffer.full else buffer.pos), "ring": (buffer.pos, buffer.full)}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


ROUNDS = [(48, {3, 7}), (48, set()), (48, {1, 2, 9}), (112, {2}), (48, {4, 8, 11})]
"""Each round of the walk: its env steps (collections of 4), and the collection boundaries (counted from 1 in each
call that trains the round) at which it saves inside it, as a stop or a periodic save does: twice, never, at the
round's first collection, once and then more rows than the buffer of 100 holds before the round's end."""
RESUMED = (2, 9)
"""The round and boundary after whose save the walk resumes, as a run does: a new member loads the last round in
the history's checkpoint, then the part."""

@pytest.mark.parametrize("copy_buffer", [False, True])
def test_every_checkpoint_a_resume_or_an_exploit_may_read_stays_whole_at_every_kill(
        copy_buffer: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member saved at round ends and inside rounds, in the orders a run saves it (and resumed from a part once,
    as a resume loads it: the round's start, then the part), the prune after each round is in the history: at every
    point a kill can land (inside a save, once its segments are written and the old ones deleted, before its
    checkpoint; after the save; after the prune), each checkpoint a resume or an exploit may read rebuilds the
    buffer it was saved with: the last round in the history's (restored first, and an exploit's donor), the part
    of the round in progress and that round's end (a member through it). The segments on disk hold at most the
    buffer and two rounds' rows, however often a round is saved inside."""
    run_dir = RunDir(tmp_path)
    run_dir.checkpoints.mkdir()
    member, reader = _sac(copy_buffer=copy_buffer), _sac(copy_buffer=copy_buffer)
    saved: dict[Path, dict[str, Any]] = {}
    last = -1  # the last round in the history
    checks = 0

    def check() -> None:
        nonlocal checks
        readable = [run_dir.checkpoint(0, last)] if last >= 0 else []
        readable += [p for p in (run_dir.part(0, last + 1), run_dir.checkpoint(0, last + 1)) if p.is_file()]
        for path in readable:
            reader.load(path, own=True)
            assert _same(_filled(reader), saved[path]), path.name
        segments = sum(len(np.load(f)["rewards"]) for f in run_dir.checkpoints.glob("*.npz"))
        assert segments <= 100 + 2 * max(steps for steps, _ in ROUNDS)
        checks += 1

    write = pbx.members.sb3.checkpoint.durable_write

    def killed_here_first(path: Path, content: Callable[[Path], None]) -> None:
        check()  # the save's segments are written and the files no list keeps deleted; its checkpoint is not
        write(path, content)

    monkeypatch.setattr(pbx.members.sb3.checkpoint, "durable_write", killed_here_first)

    def save(path: Path) -> None:
        state = _filled(member)
        member.save(path)
        saved[path] = state
        check()

    for r, (steps, inside) in enumerate(ROUNDS):
        boundary = 0

        def stop() -> bool:
            nonlocal boundary
            boundary += 1
            return boundary in inside

        while True:
            try:
                member.train(steps, stop=stop)
                break
            except Stopped:
                save(run_dir.part(0, r))
                if (r, boundary) == RESUMED:
                    member = _sac(copy_buffer=copy_buffer)
                    member.load(run_dir.checkpoint(0, r - 1), own=True)
                    member.load(run_dir.part(0, r), own=True)
        save(run_dir.checkpoint(0, r))
        last = r
        run_dir.prune_checkpoints(keep_round=r)
        check()
    assert member.steps == sum(steps for steps, _ in ROUNDS)
    assert checks == sum(3 + 2 * len(inside) for _, inside in ROUNDS)
