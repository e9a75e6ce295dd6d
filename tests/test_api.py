"""``pbx.run``, ``pbx.resume`` and ``pbx.load``: a run from Python is the command's run, with the command's checks,
and reads back without being touched."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import pbx
from pbx.errors import UsageError
from pbx.run_dir import RunDir
from pbx.runners.start import launch, new_run
from pbx.runners.stopping import RunStopped, StopClock

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


TOY = {"env": "toy", "search": "PBT", "pop_size": 3, "seed": 1, "max_budget": 40}
"""A toy run of 10 rounds of 4 steps, 3 members."""


def _snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every file's bytes and every file's and folder's modification time under ``folder`` (itself included, whose
    time changes with any file made or removed in it), by relative path: dot files too."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
            for p in [folder, *sorted(folder.rglob("*"))]}


def test_load_reads_a_finished_run_without_touching_its_folder(tmp_path: Path) -> None:
    result = pbx.run(**TOY, run_dir=tmp_path / "run")
    assert result is not None and result.state == "finished"
    (tmp_path / "run" / ".lock").unlink()  # a reader that took the lock would make it again
    before = _snapshot(tmp_path / "run")

    loaded = pbx.load(str(tmp_path / "run"))
    assert _snapshot(tmp_path / "run") == before
    pd.testing.assert_frame_equal(loaded.history, result.history)
    assert loaded.best.equals(result.best) and (loaded.rounds, loaded.state) == (10, "finished")
    best = result.best
    assert repr(loaded) == (f"<pbx.Result {tmp_path / 'run'}: PBT on toy, 10/10 rounds, finished; best "
                            f"m{best['member']} score {best['score']:.4g} (test {best['test_score']:.4g})>")
    schedules = loaded.schedules
    assert list(schedules.columns) == ["h0", "h1"] and schedules.index.names == ["member", "round"]
    row = result.history.query("member == 2 and round == 7").iloc[0]
    assert schedules.loc[(2, 7)].tolist() == [row["h0"], row["h1"]]
    assert schedules["h0"].unstack("member").shape == (10, 3)


def test_load_leaves_out_a_round_and_a_line_still_being_written(tmp_path: Path) -> None:
    """A reader of a live run meets history.csv mid-write: a whole row of round 7 and half of the next are on disk."""
    pbx.run(**TOY, run_dir=tmp_path / "run")
    history = tmp_path / "run" / "history.csv"
    lines = history.read_text().splitlines(keepends=True)
    history.write_text("".join(lines[:1 + 7 * 3 + 1]) + lines[1 + 7 * 3 + 1][:20])
    before = _snapshot(tmp_path / "run")
    loaded = pbx.load(tmp_path / "run")
    assert (loaded.history["round"].max(), len(loaded.history), loaded.state) == (6, 21, "stopped")
    assert "7/10 rounds, stopped" in repr(loaded)
    assert _snapshot(tmp_path / "run") == before  # not cut back to whole rounds, as a resume would


def test_load_reads_a_run_stopped_inside_a_round_and_a_resume_goes_on(tmp_path: Path) -> None:
    """Stopped once member 0 is through round 2 (its report kept in member_0.r2.done.json), as a signal would."""
    folder = tmp_path / "run"

    class StopInRound2(StopClock):
        @property
        def stopping(self) -> bool:
            if self.reason is None and RunDir(folder).checkpoint(0, 2).is_file():
                self.request("the test")
            return super().stopping

    with pytest.raises(RunStopped):
        launch(lambda comm: new_run([{"run": TOY}], run_dir=folder), clock=StopInRound2())
    assert RunDir(folder).done_record(0, 2).is_file()
    before = _snapshot(folder)
    loaded = pbx.load(folder)
    assert _snapshot(folder) == before
    assert (loaded.state, loaded.rounds, loaded.history["round"].max()) == ("stopped", 10, 1)
    assert pbx.resume(folder).state == "finished"
    assert pbx.load(folder).history["round"].max() == 9


SLOW_TOY = """
import sys, time
from pbx.members import register
from pbx.members.toys.toy import ToyMember
from pbx.train import main

class SlowToy(ToyMember):
    def train(self, steps):
        time.sleep(0.1)
        return super().train(steps)

register(SlowToy, "toy-slow")
sys.exit(main(sys.argv[1:]))
"""


def test_load_reads_a_run_another_process_trains_and_leaves_it_training(tmp_path: Path) -> None:
    """Read over and over while ``python -m pbx.train`` trains a toy slowed to 0.1 s a member and round (2 members, 8 rounds): each read
    says training and holds whole rounds only, as the run wrote them; the run ends as it would have, unrefused."""
    folder = tmp_path / "run"
    load = pbx.load  # imported before the run starts: the import takes seconds on a loaded machine
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TOY, "--env", "toy-slow", "--batchsize", "2", "--seed", "1",
                             "--max_budget", "32", "--run-dir", str(folder)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        while proc.poll() is None and len(seen) < 5:
            if (folder / "history.csv").is_file():
                loaded = load(folder)
                if len(loaded.history) and loaded.state == "training":
                    seen.append(loaded)
            time.sleep(0.01)
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert len(seen) >= 3, out + err  # 1.6 s of training: every load took well under half a second
    final = pbx.load(folder)
    assert final.state == "finished" and final.history["round"].max() == 7
    assert 0 < len(seen[0].history) < len(final.history) and seen[0].rounds == 8
    for loaded in seen:  # whole rounds only, each as the run finished it
        pd.testing.assert_frame_equal(loaded.history, final.history.iloc[:len(loaded.history)])
        assert len(loaded.history) % 2 == 0


@pytest.mark.parametrize("damage, message", [
    (lambda run: (run / "config.yaml").unlink(), "{run}: not a pbx run folder (no config.yaml)"),
    (lambda run: (run / "history.csv").write_text("what,is\nthis,file\n"), "{run}/history.csv: not a pbx history file"),
    (lambda run: (run / "history.csv").write_bytes(b"\x00\xff" * 9), "{run}/history.csv: not a readable pbx history"),
    (lambda run: (run / "config.yaml").write_text("run: [1, 2\n"), "{run}/config.yaml: "),
    (lambda run: (run / "config.yaml").write_text((run / "config.yaml").read_text().replace("search: PBT",
                                                                                            "search: PBX")),
     "{run}/config.yaml: unknown --search 'PBX'"),
    (lambda run: shutil.rmtree(run) or run.mkdir(), "{run}: not a pbx run folder (no config.yaml or history.csv)"),
    (lambda run: shutil.rmtree(run), "{run}: no such run folder"),
], ids=["no config.yaml", "garbage history.csv", "binary history.csv", "bad yaml", "unknown search", "no run",
        "no folder"])
def test_load_of_a_damaged_folder_is_one_usage_error_naming_the_file(damage, message: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    pbx.run(**TOY, run_dir=run)
    damage(run)
    with pytest.raises(UsageError) as refused:
        pbx.load(run)
    assert str(refused.value).startswith(message.format(run=run)) and "\n" not in str(refused.value), refused.value


@pytest.mark.parametrize("path, message", [("", "pbx.load(path): '' names no folder"),
                                           (123, "pbx.load(path) must be a path (a str or pathlib.Path), got int 123")])
def test_load_of_no_path_is_a_usage_error(path: object, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        pbx.load(path)  # type: ignore[arg-type]


@pytest.mark.parametrize("table", ["kernel", "none"], ids=["/proc/locks", "no lock table"])
def test_the_folder_s_holder_is_found_without_taking_its_lock(table: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a kernel table of locks (macOS), the process the lock file names while it lives."""
    if table == "none":
        monkeypatch.setattr("pbx.run_dir.LOCK_TABLE", tmp_path / "absent")
    folder = RunDir(tmp_path)
    assert folder.holder() is None  # no .lock: none made
    assert not (tmp_path / ".lock").exists()
    with folder.lock():
        assert folder.holder() == os.getpid()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / ".lock").write_text(ended.stdout.strip())  # as a killed run leaves it
    assert folder.holder() is None


def test_load_of_a_sweep_folder_says_to_load_one_of_its_runs(tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text("variants: []\nseeds: [0]\n")
    with pytest.raises(UsageError, match=re.escape(f"{tmp_path} is a sweep folder (sweep.yaml): load one of its runs")):
        pbx.load(tmp_path)
