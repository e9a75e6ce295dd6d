"""What makes two runs the same experiment: a run's fingerprint.

Statistics over seeds pool runs under one label; they mean something only when
those runs differ in nothing but the seed. A run's fingerprint is its resolved
config (``config.yaml``: run, strategy, member and the space in full) less the
settings that cannot change a result, :data:`IRRELEVANT`, plus the code that
trained it (:func:`provenance`: the version and a hash of the package's files,
:func:`code_hash`, with the hash of every other pbx that continued the run after a
resume). The git commit is recorded for the reader, not compared: two commits
that changed only docs train alike and pool, while an uncommitted edit or a new
untracked module changes the hash and never pools with the code it changed. A
record from before the hash (version and commit only) is compared on its commit. ``pbx.report`` pools runs only when their fingerprints
agree, and a sweep refuses a rerun whose fresh resolution differs from the one
it stored.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path
from typing import Any, Mapping

import pbx

PROVENANCE = "pbx"
"""The ``config.yaml`` section that records which pbx trained the run (``version``, ``commit``, ``code``, and
``continued``: the code of each other pbx that trained rounds of it after a resume)."""
CONTINUED = "continued"

IRRELEVANT = frozenset({
    "run.seed", "run.name", "run.device", "run.runner", "run.comm",
    # Deterministic GPU kernels change the bits of a run as the device does, not what it learns: like the
    # device, how it ran.
    "member.deterministic",
    # Where the space was read from; the space itself is part of the fingerprint in full.
    "run.space",
})
"""Dotted settings that cannot change what a run learns: its seed (what statistics vary), where it is
written, and how it is executed."""


@functools.cache
def provenance() -> dict[str, str | None]:
    """The pbx that is running: its version, the git commit when the package lies in a git checkout (``+dirty``
    when the package's tracked files differ from it; None from a plain install) and the hash of its code."""
    package = Path(pbx.__file__).resolve().parent
    return {"version": pbx.__version__, "commit": _commit(package), "code": code_hash(package)}


def code_hash(package: Path) -> str:
    """A hash of the code that trains: every file under ``package`` (its modules and the search spaces it
    ships), path and content, committed or not, tracked or not; compiled caches left out. 16 hex digits."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and p.suffix not in (".pyc", ".pyo")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def continued(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``record`` (a run's stored ``pbx`` section) with the running pbx's code added to the codes that trained
    the run, when it is another code: a resume under other code keeps the record of the start and says so."""
    if record is None or "code" not in record:
        return None if record is None else dict(record)
    trained = [record["code"], *record.get(CONTINUED, [])]
    code = provenance()["code"]
    return dict(record) if code in trained[-1:] else {**record, CONTINUED: [*record.get(CONTINUED, []), code]}


def _commit(package: Path) -> str | None:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    # A plain install lies in site-packages; only a checkout whose own package this is names a commit.
    if top is None or not (Path(top) / "pbx" / "__init__.py").resolve() == package / "__init__.py":
        return None
    head = git("rev-parse", "HEAD")
    if head is None:
        return None
    # Only the package's own files decide what a run learns; an edited README or test does not.
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return head + ("+dirty" if dirty else "")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``section.key`` -> value (lists and scalars are leaves; an empty section says
    nothing and leaves no key)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def changed_keys(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two nested mappings (a key one lacks differs)."""
    fa, fb = flatten(a), flatten(b)
    missing = object()
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k, missing) != fb.get(k, missing))


def fingerprint(config: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved config's (a ``config.yaml``'s) fingerprint: dotted keys -> values, without
    :data:`IRRELEVANT`; the ``pbx`` section counts by its code hashes (by its commit where it has no hash). A
    config written before pbx recorded itself has no ``pbx.*`` keys, and so differs from any that does."""
    flat = {k: v for k, v in flatten(config).items() if k not in IRRELEVANT}
    if f"{PROVENANCE}.code" in flat:
        flat.pop(f"{PROVENANCE}.commit", None)
    return flat


def differing_keys(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two configs' fingerprints (a key one lacks differs)."""
    return changed_keys(fingerprint(a), fingerprint(b))
