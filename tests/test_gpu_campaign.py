"""``benchmarks/gpu_campaign.py``: its ``--help``; its tiny CPU run with a 40-second limit, and a second run that
continues the same runs from the first's archive; the archive's compact checkpoints load into a member and train."""

from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import ROOT
from pbx.members.base import MemberContext
from pbx.members.ppo.ppo import PPOMember
from pbx.members.ppo.settings import PPOSettings

SCRIPT = ROOT / "benchmarks" / "gpu_campaign.py"
sys.path.insert(0, str(SCRIPT.parent))  # as when the script runs: its folder first on the path
import campaign_archive as archive  # noqa: E402
import gpu_campaign as campaign  # noqa: E402
from campaign_phases import Arm, Campaign, start_command, train  # noqa: E402


def run(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    cores = ["--cores", "1"] if hasattr(os, "sched_setaffinity") else []
    return subprocess.run([sys.executable, str(SCRIPT), *args, *cores], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_help_lists_the_options() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--limit", "--work", "--deliver", "--resume-from", "--setting", "--arms", "--skip-bench",
                 "--skip-arrangements", "--part-mb", "--archive-mb", "--cores"):
        assert flag in proc.stdout, flag


KEPT = re.compile(r"^train (\w+): stopped by its time limit, everything saved; \d+ finished rounds, ([\d,]+) env steps "
                  r"trained and kept in this loan", re.MULTILINE)


def test_three_tiny_loans_keep_what_every_arm_trained_and_go_on_inside_its_round(tmp_path: Path) -> None:
    """Three loans of 90 s, every arm (the PB2 arm on MPI ranks), each on a fresh work folder with only the
    archive carried: every run stops by its time limit inside a round with everything saved, so every arm's kept
    steps grow in every loan, and each loan's runs continue the one before's rows unchanged. (90 s: every arm runs
    on one core beside the suite's other worker, and at 60 s the two-rank arm could end a loan before its first
    rollout, or its exit outlast the share.)"""
    kept, before = tmp_path / "kept", {}
    for loan in range(3):
        out = tmp_path / f"out{loan}"
        carried = ["--resume-from", str(kept / "archive")] if loan else []
        proc = run("--limit", "90", "--setting", "tiny", "--device", "cpu", "--skip-bench", "--skip-arrangements",
                   "--archive-mb", "40", "--work", str(tmp_path / f"w{loan}"), "--deliver", str(out), *carried)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        grew = {name: int(steps.replace(",", "")) for name, steps in KEPT.findall(proc.stdout)}
        assert sorted(grew) == sorted(a.name for a in campaign.ARMS) and min(grew.values()) > 0, proc.stdout
        assert {"archive.tar.gz.00", "results.tar.gz", "summary.md"} <= {p.name for p in out.iterdir()}
        with tarfile.open(out / "results.tar.gz") as tar:
            assert {"bigfish_pb2/config.yaml", "bigfish_pb2/history.csv", "train_bigfish_pb2.txt"} <= set(tar.getnames())
        archive.collect(out, kept)
        for name in grew:
            history = tmp_path / f"w{loan}" / "runs" / name / "history.csv"
            now = pd.read_csv(history) if history.is_file() else pd.DataFrame()
            if name in before and len(before[name]):
                pd.testing.assert_frame_equal(now.iloc[:len(before[name])], before[name])
            before[name] = now
    assert len(list(kept.glob("summary-*.md"))) >= 1


def files(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` and its bytes (None: a folder)."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def earlier_runs(work: Path) -> dict[str, bytes | None]:
    """``work/runs`` as an earlier loan left it: what a refused archive must leave byte for byte."""
    run = work / "runs" / "bigfish_none"
    (run / "checkpoints").mkdir(parents=True)
    (run / "history.csv").write_text("member,round,score\n0,0,1.0\n")
    (run / "checkpoints" / "member_0.r0.ckpt").write_bytes(b"weights")
    return files(work)


def tar_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_an_archive_that_is_gzip_but_not_tar_leaves_the_runs_as_they_were(tmp_path: Path) -> None:
    """The command as a user runs it: one line, exit 2, ``--work/runs`` byte for byte unchanged (it was deleted
    before the archive was opened); an archive that is not gzip at all, and one that is missing, likewise (the
    missing one without making ``--work``)."""
    before = earlier_runs(tmp_path / "w")
    for data, says in ((gzip.compress(b"not a tar" * 100), "gzip but not a tar"),
                       (b"not gzip", "not one whole gzip stream")):
        (tmp_path / "archive.tar.gz.00").write_bytes(data)
        proc = run("--limit", "30", "--setting", "tiny", "--device", "cpu", "--skip-bench", "--skip-arrangements",
                   "--work", str(tmp_path / "w"), "--resume-from", str(tmp_path / "archive"), timeout=120)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
        assert files(tmp_path / "w") == before
    proc = run("--limit", "30", "--setting", "tiny", "--device", "cpu", "--skip-bench", "--skip-arrangements",
               "--work", str(tmp_path / "new"), "--resume-from", str(tmp_path / "missing"), timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: no archive parts"), proc.stderr
    assert not (tmp_path / "new").exists()


UNSAFE = {
    "a member outside the folder": {"../escaped": b"x"},
    "an absolute member": {"/tmp/absolute": b"x"},
    "a file beside the run folders": {"loose.txt": b"x"},
    "a checkpoint that does not load": {"bigfish_none/history.csv": b"h", "bigfish_none/checkpoints/m.r0.ckpt": b"?"},
    "no run folder": {},
}


@pytest.mark.parametrize("fault", [*UNSAFE, "a symbolic link", "a truncated tar", "a missing part"])
def test_a_bad_archive_is_one_line_and_changes_nothing(fault: str, tmp_path: Path, capsys) -> None:
    """Every fault found while the archive is read, checked or expanded is one line and exit 2, with ``work/runs``
    byte for byte as it was and nothing left beside it (nor a ``work`` made)."""
    work = tmp_path / "w"
    before = earlier_runs(work)
    if fault == "a symbolic link":
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            link = tarfile.TarInfo("bigfish_none/link")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(link)
        data = buffer.getvalue()
    elif fault == "a truncated tar":
        data = tar_of({"bigfish_none/history.csv": b"h" * 5000})[:2048]
    else:
        data = tar_of(UNSAFE.get(fault, {"bigfish_none/history.csv": b"h"}))
    packed = gzip.compress(data)
    (tmp_path / "archive.tar.gz.00").write_bytes(packed)
    if fault == "a missing part":
        (tmp_path / "archive.tar.gz.02").write_bytes(b"")
    for into in (work, tmp_path / "new" / "w"):  # a --work that does not exist yet is not left made
        with pytest.raises(SystemExit) as ended:
            archive.unpack(tmp_path / "archive", into)
        err = capsys.readouterr().err
        assert ended.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert files(work) == before
    assert not (tmp_path / "new").exists() and not (tmp_path / "escaped").exists()


def test_a_good_archive_replaces_the_runs_whole(tmp_path: Path) -> None:
    """The runs an archive holds replace the folder's (a run it does not hold goes), checkpoints expanded; a
    ``--work`` that does not exist yet is made."""
    source = tmp_path / "source"
    (source / "runs" / "starpilot_none" / "checkpoints").mkdir(parents=True)
    (source / "runs" / "starpilot_none" / "config.yaml").write_text("run: {}\n")
    torch.save({"policy": {"w": torch.ones(3)}}, source / "runs" / "starpilot_none" / "checkpoints" / "m.r0.ckpt")
    (tmp_path / "archive.tar.gz.00").write_bytes(archive._packed(source, "full"))
    for work in (tmp_path / "w", tmp_path / "fresh"):
        if work.name == "w":
            earlier_runs(work)
        assert archive.unpack(tmp_path / "archive", work) == ["starpilot_none"]
        assert sorted(p.name for p in work.iterdir()) == ["runs"]
        assert sorted(files(work / "runs")) == ["starpilot_none", "starpilot_none/checkpoints",
                                                "starpilot_none/checkpoints/m.r0.ckpt", "starpilot_none/config.yaml"]


@pytest.mark.parametrize("flags", [["--limit", "nan"], ["--limit", "inf"], ["--limit", "-1"], ["--limit", "5"],
                                   ["--limit", "60", "--part-mb", "nan"], ["--limit", "60", "--part-mb", "-1"],
                                   ["--limit", "60", "--part-mb", "1e-9"], ["--limit", "60", "--archive-mb", "inf"],
                                   ["--limit", "60", "--archive-mb", "0"], ["--limit", "60", "--cores", "nan"],
                                   ["--limit", "60", "--cores", "-1"], ["--limit", "60", "--cores", "0"]],
                         ids=" ".join)
def test_a_size_flag_out_of_its_range_is_one_line_before_anything_is_made(flags: list[str], tmp_path: Path,
                                                                         capsys) -> None:
    """``--limit nan`` was accepted (its runs then outlived the campaign), as ``nan`` and ``inf`` were by the other
    size flags: each flag's value is finite and in range, or one line and exit 2 before ``--work`` is made."""
    with pytest.raises(SystemExit) as ended:
        campaign.main([*flags, "--setting", "tiny", "--device", "cpu", "--work", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert flags[-2] in err and not (tmp_path / "w").exists()


def test_a_work_folder_that_is_a_file_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "w").write_text("mine")
    with pytest.raises(SystemExit) as ended:
        campaign.main(["--limit", "60", "--setting", "tiny", "--device", "cpu", "--work", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith("error: --work") and err.count("\n") == 1, err
    assert (tmp_path / "w").read_text() == "mine"


def test_an_arm_stopped_before_its_first_round_starts_over_on_the_next_loan(tmp_path: Path) -> None:
    """A run stopped before pbx wrote its history leaves ``config.yaml`` (and the empty folders), which a new run
    in the folder refused ("already holds a run", exit 2, on every loan after) and ``--resume`` refuses too: the
    arm starts over. A run with its history's header and no round yet is resumed (pbx resumes it)."""
    work = tmp_path / "w"
    folder = work / "runs" / "solo"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "tb").mkdir()
    (folder / "config.yaml").write_text("run:\n  env: bigfish\n")
    c = Campaign(work, "tiny", "cpu", time.monotonic() + 300)
    one_round = [v if v != "320000" else "32" for v in campaign.TINY]
    train(c, 240, one_round, [Arm("solo", "bigfish", "none", 1)])
    assert any("solo: starts over" in line for line in c.log), c.log
    assert any("solo: finished; 1 finished rounds, 32 env steps trained and kept" in line for line in c.log), c.log
    assert len(pd.read_csv(folder / "history.csv")) == 1

    (folder / "history.csv").write_text("member,round,steps\n")
    assert "--resume" in start_command(c, Arm("solo", "bigfish", "none", 1), one_round, folder)
    assert folder.is_dir()


SETTINGS = PPOSettings(n_envs=2, n_steps=16, batch_size=16, n_epochs=1, eval_episodes=0)
CONFIG = {"learning_rate": 5e-4, "ent_coef": 0.01, "clip_range": 0.2}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[PPOMember, Path]:
    """A bigfish member after one update (its IMPALA CNN shared by the policy's three feature extractors, as SB3
    shares it), and its checkpoint in a campaign's ``runs/`` folder."""
    member = PPOMember(MemberContext(env="bigfish", index=0, seed=1, device="cpu"), SETTINGS, dict(CONFIG))
    member.train(32)
    path = tmp_path_factory.mktemp("work") / "runs" / "bigfish_none" / "checkpoints" / "member_0.r0.ckpt"
    path.parent.mkdir(parents=True)
    member.save(path)
    return member, path


def test_each_archive_level_loads_into_a_member_that_trains(trained: tuple[PPOMember, Path], tmp_path: Path) -> None:
    member, path = trained
    weights = member.model.policy.state_dict()
    for level in archive.LEVELS:
        state = torch.load(path, map_location="cpu", weights_only=False)
        torch.save(archive.expand(archive.compact(state, level)), tmp_path / f"{level}.ckpt")
        resumed = PPOMember(MemberContext(env="bigfish", index=0, seed=1, device="cpu"), SETTINGS, dict(CONFIG))
        resumed.load(tmp_path / f"{level}.ckpt", own=True)
        again = resumed.model.policy.state_dict()
        for key, value in weights.items():
            if level == "full":
                assert torch.equal(again[key], value), (level, key)
            else:  # rounded to float16: within half a float16 step of the weight
                assert again[key].dtype == torch.float32
                torch.testing.assert_close(again[key], value, rtol=2 ** -11, atol=6e-8)
        adam = resumed.model.policy.optimizer.state
        if level == "no-optimizer":
            assert not adam
        else:
            first = next(iter(adam.values()))
            assert first["exp_avg_sq"].dtype == torch.float32
            assert bool((first["exp_avg"] == 0).all()) == (level == "no-first-moment"), level
        assert resumed.steps == member.steps
        resumed.train(32)
        assert resumed.steps == member.steps + 32


def test_each_archive_level_is_smaller_than_the_one_before(trained: tuple[PPOMember, Path]) -> None:
    """On a real member's checkpoint, packed as the archive packs it; and the policy's shared feature extractor
    stays one storage through compact and expand (a per-name cast made ``fp16-weights`` larger than ``full``)."""
    _, path = trained
    work = path.parent.parent.parent.parent
    sizes = [len(archive._packed(work, level)) for level in archive.LEVELS]
    assert all(a > b for a, b in zip(sizes, sizes[1:])), dict(zip(archive.LEVELS, sizes))
    state = torch.load(path, map_location="cpu", weights_only=False)
    for policy in (archive.compact(dict(state), "fp16-weights")["policy"],
                   archive.expand(archive.compact(dict(state), "fp16-weights"))["policy"]):
        storages = {value.untyped_storage().data_ptr() for value in policy.values()}
        assert len(storages) == len({value.untyped_storage().data_ptr() for value in state["policy"].values()})
        name = "stacks.0.conv.weight"
        assert policy[f"pi_features_extractor.{name}"].data_ptr() == policy[f"features_extractor.{name}"].data_ptr()


def test_an_archive_that_cannot_fit_even_at_its_smallest_level_is_refused(trained: tuple[PPOMember, Path],
                                                                          tmp_path: Path, capsys) -> None:
    """One line and exit 2, with no part written and the earlier parts as they were; one that fits takes the first
    level that does."""
    _, path = trained
    work = path.parent.parent.parent.parent
    smallest = len(archive._packed(work, archive.LEVELS[-1])) / 1e6
    (tmp_path / "archive.tar.gz.00").write_bytes(b"the last loan's")
    said: list[str] = []
    with pytest.raises(SystemExit) as ended:
        archive.archive(work, tmp_path / "archive", 15, smallest * 0.9, said.append)
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith("error: the archive is") and err.count("\n") == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["archive.tar.gz.00"]
    assert (tmp_path / "archive.tar.gz.00").read_bytes() == b"the last loan's"
    assert len(said) == len(archive.LEVELS)  # each level's size, over the limit
    fits = len(archive._packed(work, "no-first-moment")) / 1e6
    archive.archive(work, tmp_path / "archive", 15, fits, said.append)
    assert said[-1].startswith("archive at level no-first-moment"), said


def test_the_archive_carries_each_runs_last_round_reading_its_history_once(tmp_path: Path, monkeypatch) -> None:
    """Of each run's checkpoints only the last finished round's and the round in progress after it travel (the
    round before, kept against a kill, and any past the round in progress stay behind; replay segments travel);
    each history is read once, not once per checkpoint."""
    for run, last in (("a", 2), ("b", 0)):
        folder = tmp_path / "runs" / run
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "history.csv").write_text("member,round,score\n" + "".join(f"0,{r},1.0\n" for r in range(last + 1)))
        for r in range(max(last - 1, 0), last + 3):
            for m in range(3):
                torch.save({"steps": r}, folder / "checkpoints" / f"member_{m}.r{r}.ckpt")
        (folder / "checkpoints" / "member_0.r0.replay").write_bytes(b"segment")
    reads: list[str] = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda path, *args: reads.append(path.parent.name) or read_text(path, *args))
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive._packed(tmp_path, "full")))) as tar:
        names = sorted(n for n in tar.getnames() if "checkpoints" in n)
    travel = [f"{run}/checkpoints/{name}" for run, r in (("a", 2), ("b", 0))
              for name in [*(f"member_{m}.r{k}.ckpt" for m in range(3) for k in (r, r + 1)), "member_0.r0.replay"]]
    assert names == sorted(travel)
    assert sorted(reads) == ["a", "b"]
