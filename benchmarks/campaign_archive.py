"""The GPU campaign's archive: what one loan leaves for the next, small enough to be sent to a GPU machine.

``gpu_campaign.py`` trains its runs in folders; between loans only what a resume needs travels, and it must fit
beside the kit and the working tree in the 64 MiB a GPU machine here is sent (``docs/gpu.md``). This module makes
a member's checkpoint compact at one of :data:`LEVELS`, packs the run folders into a gzip archive in parts, unpacks
one (checkpoints expanded back), and lays a loan's delivery into the repository (:func:`collect`).
"""

from __future__ import annotations

import gzip
import io
import re
import shutil
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, Callable, NoReturn

import torch

ROOT = Path(__file__).resolve().parent.parent


def refuse(message: str) -> NoReturn:
    """Bad input: one line on stderr, exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


LEVELS = ("full", "fp16-weights", "no-first-moment", "no-optimizer")
"""How much of a checkpoint the archive carries, from most to least (:func:`compact`), each level strictly smaller
than the one before; the archive takes the first whose parts fit ``--archive-mb``. Measured as packed (gzip) on a
bigfish member's checkpoint after one update: 3.33 MB at ``full``, 2.15 at ``fp16-weights``, 1.65 at
``no-first-moment``, 1.15 at ``no-optimizer`` (``tests/test_gpu_campaign.py`` checks the order)."""


def compact(state: dict[str, Any], level: str) -> dict[str, Any]:
    """A member's checkpoint as the archive carries it at ``level`` (:data:`LEVELS`).

    Always: the statistics, counters, random streams and Adam's step count as saved; Adam's moments in bfloat16
    (float32's range, three significant digits: they are running averages); the envs' state and last observations
    left out, so a resume starts new episodes (as for envs that cannot be saved). ``fp16-weights`` also rounds the
    weights to float16, an error of at most 2**-11 of a weight, about 1e-5 on the IMPALA CNN's typical 0.02, against
    Adam's step of about the learning rate, 5e-4. ``no-first-moment`` also leaves out Adam's first moment (a
    10-update average at beta1 0.9): it restarts at zero, so the next few updates are smaller. ``no-optimizer``
    carries no Adam state: Adam starts over, its bias correction included.

    Every cast keeps what the checkpoint shares shared (:func:`_cast`): SB3's policy holds its feature extractor
    under three names (``features_extractor``, ``pi_``, ``vf_``), one storage that ``torch.save`` writes once.
    """
    state = dict(state, env_state=None, last_obs=None, carried=level)
    if state.get("in_round") is not None:  # a round in progress: its start state (a copy of the learner) stays behind
        state["in_round"] = dict(state["in_round"], start=None)
    if level != "full" and "policy" in state:
        state["policy"] = _cast(state["policy"], torch.float16)
    optimizer = state.get("optimizer")
    if optimizer is not None:
        dropped = {"no-first-moment": {"exp_avg"}, "no-optimizer": None}.get(level, set())
        moments = {} if dropped is None else {
            key: {name: value for name, value in entry.items() if name not in dropped}
            for key, entry in optimizer["state"].items()}
        state["optimizer"] = {**optimizer, "state": _nested_cast(moments, torch.bfloat16)}
    return state


def _cast(tensors: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """``tensors`` with each float tensor (not a scalar: Adam's step count stays as it is) in ``dtype``; anything
    else as it is. Tensors that share a storage (views of one another, or one tensor under several names) share
    the cast one: each storage is cast once, whole, and each tensor is the same view of the cast storage. (A cast
    per tensor makes a copy per name: a bigfish member's feature extractor written three times made its
    ``fp16-weights`` checkpoint 4.40 MB packed, against 3.33 at ``full``.)"""
    cast: dict[tuple[int, torch.dtype], torch.Tensor] = {}
    out = {}
    for name, value in tensors.items():
        if not (torch.is_tensor(value) and value.is_floating_point() and value.dim() > 0) or value.dtype == dtype:
            out[name] = value
            continue
        key = (value.untyped_storage().data_ptr(), value.dtype)
        if key not in cast:  # (elements,): the whole storage, in the tensor's dtype
            whole = value.untyped_storage().nbytes() // value.element_size()
            cast[key] = value.as_strided((whole,), (1,), 0).to(dtype)
        out[name] = cast[key].as_strided(value.size(), value.stride(), value.storage_offset())
    return out


def _nested_cast(entries: dict[Any, dict[str, Any]], dtype: torch.dtype) -> dict[Any, dict[str, Any]]:
    """:func:`_cast` over an optimizer's per-parameter state, every entry's tensors together (so that a storage
    two entries share is cast once too)."""
    flat = _cast({(key, name): value for key, entry in entries.items() for name, value in entry.items()}, dtype)
    return {key: {name: flat[(key, name)] for name in entry} for key, entry in entries.items()}


def expand(state: dict[str, Any]) -> dict[str, Any]:
    """:func:`compact`'s inverse, as far as it goes: every carried tensor in float32 again (storages shared as they
    were), a first moment left out restarted at zero."""
    if "policy" in state:
        state["policy"] = _cast(state["policy"], torch.float32)
    optimizer = state.get("optimizer")
    if optimizer is not None:
        moments = _nested_cast(optimizer["state"], torch.float32)
        for entry in moments.values():
            if "exp_avg_sq" in entry and "exp_avg" not in entry:
                entry["exp_avg"] = torch.zeros_like(entry["exp_avg_sq"])
        state["optimizer"] = {**optimizer, "state": moments}
    return state


def _packed(work: Path, level: str) -> bytes:
    """The run folders (without ``tb/``) as one gzip-compressed tar, checkpoints compacted at ``level``. gzip, not
    xz: on a bigfish checkpoint xz's file is 7% smaller and took 16 times as long (10.3 s against 0.64 s here), time
    that a campaign takes from training."""
    buffer = io.BytesIO()
    last: dict[Path, int | None] = {}
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted((work / "runs").rglob("*")):
            relative = path.relative_to(work / "runs")
            if not path.is_file() or relative.parts[1:2] == ("tb",) or path.name == ".lock" or _superseded(path, last):
                continue
            if path.suffix == ".ckpt":
                data = io.BytesIO()
                torch.save(compact(torch.load(path, map_location="cpu", weights_only=False), level), data)
                info = tarfile.TarInfo(str(relative))
                info.size = len(data.getvalue())
                tar.addfile(info, io.BytesIO(data.getvalue()))
            else:
                tar.add(path, arcname=str(relative))
    return gzip.compress(buffer.getvalue(), compresslevel=6, mtime=0)


def _superseded(path: Path, last: dict[Path, int | None]) -> bool:
    """Whether ``path`` is a checkpoint in ``checkpoints/`` of a round other than the run's last finished one and
    the one in progress after it (a resume starts from the last round's checkpoints and goes on inside the next, and the runner keeps the round before too (against a kill
    while the last is written), which would double the archive. (Replay segments stay: a newer checkpoint reads
    older rounds' segments.) ``last``: each run folder's last finished round, filled as the runs are met, so that
    a run's history is read once however many checkpoints it has."""
    if path.suffix != ".ckpt" or path.parent.name != "checkpoints":
        return False
    run = path.parent.parent
    if run not in last:
        last[run] = _last_round(run / "history.csv")
    round_ = re.search(r"\.r(\d+)\.", path.name)
    # the round after the last finished one is the round in progress, kept inside it (pbx.runners.partial)
    return round_ is not None and last[run] is not None and int(round_.group(1)) not in (last[run], last[run] + 1)


def _last_round(history: Path) -> int | None:
    """The last finished round of a run's ``history.csv``; None without one (no file, no rows)."""
    if not history.is_file():
        return None
    rounds = [int(line.split(",")[1]) for line in history.read_text().splitlines()[1:]
              if line.count(",") > 1 and line.split(",")[1].isdigit()]
    return max(rounds) if rounds else None


def archive(work: Path, target: Path, part_mb: float, archive_mb: float, say: Callable[[str], None]) -> list[Path]:
    """``target.tar.gz.00``, ``.01``, ... in parts of ``part_mb``: ``work``'s run folders at the first of
    :data:`LEVELS` whose archive fits ``archive_mb``; ``say`` tells. An archive that does not fit even at the last
    level could not travel: it is refused in one line (exit 2), and no part is written or removed."""
    for level in LEVELS:
        packed = _packed(work, level)
        if len(packed) <= archive_mb * 1e6:
            break
        say(f"archive at level {level}: {len(packed) / 1e6:.1f} MB, over {archive_mb:g} MB")
    else:
        refuse(f"the archive is {len(packed) / 1e6:.1f} MB even at its smallest level ({LEVELS[-1]}), over "
               f"--archive-mb {archive_mb:g}: it could not travel, so none was written (fewer arms or members fit)")
    target.parent.mkdir(parents=True, exist_ok=True)
    for old in target.parent.glob(target.name + ".tar.gz.*"):
        old.unlink()
    size = int(part_mb * 1e6)
    parts = []
    for i in range(0, len(packed), size):
        parts.append(target.parent / f"{target.name}.tar.gz.{i // size:02d}")
        parts[-1].write_bytes(packed[i:i + size])
    say(f"archive at level {level}: {len(packed) / 1e6:.1f} MB in {len(parts)} part(s) of at most {part_mb:g} MB "
          f"({', '.join(p.name for p in parts)})")
    return parts


def unpack(prefix: Path, work: Path) -> list[str]:
    """Unpack an archive's parts (``prefix.tar.gz.00``, ``.01``, ...) into ``work/runs``, checkpoints expanded;
    returns the runs it held.

    Nothing is touched until the whole archive has been read: its parts decompressed, its tar listed and every
    member checked (:func:`_opened`), extracted into a folder beside ``runs`` and every checkpoint expanded there.
    Only then is ``runs`` replaced: the old one renamed away, the new one moved in, the old one deleted. A bad
    archive is one line, exit 2, with ``work`` as it was (made only once the archive has been read, and removed
    again if a checkpoint in it then fails to load)."""
    tar = _opened(prefix)
    made = next((p for p in reversed([work, *work.parents]) if not p.exists()), None)  # the outermost folder made
    work.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=".runs.unpacking.", dir=work))
    try:
        try:
            with tar:
                tar.extractall(fresh, filter="data")
        except (tarfile.TarError, OSError) as err:
            refuse(f"{prefix}: the archive's tar is damaged ({err})")
        for path in sorted(fresh.rglob("*.ckpt")):
            try:
                state = torch.load(path, map_location="cpu", weights_only=False)
            except Exception as err:  # a damaged pickle raises whatever its bytes happen to make of it
                refuse(f"{prefix}: the archive's {path.relative_to(fresh)} is not a checkpoint that loads "
                       f"({type(err).__name__}: {err})")
            torch.save(expand(state), path)
        runs = sorted(p.name for p in fresh.iterdir() if p.is_dir())
        if not runs:
            refuse(f"{prefix}: the archive holds no run folder")
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise
    old = work / "runs"
    aside = Path(tempfile.mkdtemp(prefix=".runs.replaced.", dir=work))
    if old.exists():
        old.rename(aside)  # onto the empty folder just made: a rename within one file system
    fresh.rename(old)
    shutil.rmtree(aside)
    return runs


def _opened(prefix: Path) -> tarfile.TarFile:
    """The archive ``prefix.tar.gz.NN`` read whole into memory and opened as a tar whose every member has been
    checked: regular files and folders only, each under a run folder, none reaching outside it (an absolute name,
    ``..``). A missing part, a damaged stream or an unsafe member is one line, exit 2."""
    parts = sorted((p for p in prefix.parent.glob(prefix.name + ".tar.gz.*") if p.suffix[1:].isdigit()),
                   key=lambda p: int(p.suffix[1:]))  # .100 after .99
    if not parts:
        refuse(f"no archive parts {prefix}.tar.gz.00, ... found")
    if [int(p.suffix[1:]) for p in parts] != list(range(len(parts))):
        refuse(f"{prefix}: the archive's parts are not numbered 00, 01, ... without a gap "
               f"({', '.join(p.name for p in parts)})")
    try:
        data = gzip.decompress(b"".join(p.read_bytes() for p in parts))
    except (OSError, EOFError, zlib.error) as err:
        refuse(f"{parts[0].parent}: the archive's {len(parts)} part(s) are not one whole gzip stream ({err})")
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        members = tar.getmembers()
    except tarfile.TarError as err:
        refuse(f"{prefix}: the archive's {len(parts)} part(s) are gzip but not a tar ({err})")
    for member in members:
        name = PurePosixPath(member.name)
        if not (member.isfile() or member.isdir()) or name.is_absolute() or ".." in name.parts \
                or (member.isfile() and len(name.parts) < 2):
            tar.close()
            refuse(f"{prefix}: the archive holds {member.name!r}, which is not a file or folder inside a run folder "
                   f"(an archive that gpu_campaign.py wrote holds only those)")
    return tar


RESULTS = ROOT / "docs" / "results" / "procgen_campaign"
"""Where a campaign's delivery is kept between loans (:func:`collect`): the archive the next loan resumes from, each
run's small files, one summary per loan."""


def collect(delivered: Path, into: Path = RESULTS) -> None:
    """Lay a delivery into ``into``: the archive's parts (replacing the last loan's), each run's small files, and
    the loan's summary as ``summary-<date>.md`` (its delivery's time). Committing them is the caller's."""
    parts = sorted(delivered.glob("archive.tar.gz.*"))
    if not parts or not (delivered / "results.tar.gz").is_file() or not (delivered / "summary.md").is_file():
        refuse(f"{delivered} is not a campaign's delivery (archive.tar.gz.NN, results.tar.gz, summary.md)")
    into.mkdir(parents=True, exist_ok=True)
    for old in into.glob("archive.tar.gz.*"):
        old.unlink()
    for part in parts:
        shutil.copyfile(part, into / part.name)
    with tarfile.open(delivered / "results.tar.gz") as tar:
        tar.extractall(into / "runs", filter="data")
    stamp = time.strftime("%Y-%m-%d-%H%M", time.gmtime((delivered / "summary.md").stat().st_mtime))
    shutil.copyfile(delivered / "summary.md", into / f"summary-{stamp}.md")
    print(f"{delivered} -> {into}: {len(parts)} archive part(s), runs {', '.join(sorted(p.name for p in (into / 'runs').iterdir() if p.is_dir()))}")
