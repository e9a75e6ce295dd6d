"""What makes two runs the same experiment: a run's fingerprint.

Statistics over seeds pool runs under one label; they mean something only when
those runs differ in nothing but the seed. A run's fingerprint is its resolved
config (``config.yaml``: run, strategy, member and the space in full) less the
settings that cannot change a result, :data:`IRRELEVANT`, plus the code that
trained it (:func:`run_record`): the version and a hash of the package's files,
:func:`code_hash`, with the hash of every other pbx that continued the run after a
resume; for an env of the user's own (``--env module:Name-v0``) a hash of that
env's code, :func:`env_sources`, with every other such code that continued the run.
The git commit is recorded for the reader, not compared: two commits
that changed only docs train alike and pool, while an uncommitted edit or a new
untracked module changes the hash and never pools with the code it changed. A
record from before the hash (version and commit only) is compared on its commit.
The versions of the libraries that compute a run's numbers (:func:`libraries`) are
recorded beside the code and left out of the fingerprint: another release can change
the numbers, but a study spread over machines rarely has one torch build everywhere,
and refusing to pool across a patch release would leave it unreportable, so
``pbx.report`` pools runs that differ in them and says so, naming the versions
(:func:`library_versions`), for the reader to judge. ``pbx.report`` pools runs only
when their fingerprints agree, and a sweep refuses a rerun whose fresh resolution
differs from the one it stored.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterable, Mapping

import pbx
from pbx.members.toys.toy import TOY_ENVS

PROVENANCE = "pbx"
"""The ``config.yaml`` section that records what trained the run (:func:`run_record`): ``version``, ``commit``,
``code``; ``env_code`` for an env of the user's own; ``libraries``; and, after a resume under other code or
versions, ``continued``, ``env_continued`` and ``libraries_continued``."""
CONTINUED = "continued"
ENV_CODE, ENV_CONTINUED = "env_code", "env_continued"
LIBRARIES, LIBRARIES_CONTINUED = "libraries", "libraries_continued"

SB3_LIBRARIES = ("numpy", "torch", "gymnasium", "stable_baselines3")
"""The libraries an SB3 member computes with (by import name): its arrays, its networks, its envs, its agent."""
TOYS = (*TOY_ENVS, "toy-deceptive")
"""The toys (:mod:`pbx.members.toys.toy`, :mod:`pbx.members.toys.deceptive`): NumPy only."""

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
    return _digest((path.relative_to(package).as_posix(), path)
                   for path in package.rglob("*") if path.is_file() and "__pycache__" not in path.parts
                   and path.suffix not in (".pyc", ".pyo"))


def run_record(env: str) -> dict[str, Any]:
    """What trains a new run on ``env``, config.yaml's ``pbx`` section: the running pbx (:func:`provenance`),
    the hash of the env's own code where the user wrote it (``env_code``, :func:`env_sources`: a ``module:Name-v0``
    env's, a member's registered from outside pbx) and the versions of the libraries that compute the run's
    numbers (``libraries``, :func:`libraries`)."""
    record: dict[str, Any] = dict(provenance())
    own, installed = env_sources(env)
    if own:
        record[ENV_CODE] = _digest(own)
    record[LIBRARIES] = libraries(env, installed)
    return record


def env_sources(env: str) -> tuple[list[tuple[str, Path]], list[str]]:
    """The code that defines ``env`` where neither pbx nor a library pinned by version ships it: the Python
    files of a ``module:Name-v0`` env, and of a member registered for ``env`` from outside pbx
    (:func:`pbx.members.register`, the route docs/add-a-member.md teaches) (name, path), and the installed
    modules among that code (by import name).

    Two modules define such an env: the one ``--env`` names, which registers it (with the keyword arguments
    the env is built with), and the one its entry point names, which holds the env class (often the same); a
    registered member's is the module of its class. Each that lies in a library (under site-packages or the
    standard library) counts by the library's version (:func:`libraries`); each that is the user's counts by its
    source. A user's module that lies in a package counts with every Python file of its top-level package: its
    env may import helpers from anywhere in it, and pbx's own hash takes every file of ``pbx/`` for the same
    reason, at the cost of an edit to an unrelated module (a plotting script in the package) also counting as
    another env. A module in no package counts with every module imported from its folder (a ``helper.py``
    beside it that it imports). Hidden folders and compiled caches are left out. A module imported only while
    the env runs, from outside those, is not seen. An id gymnasium or ProcGen ships, and a toy, have none:
    their code is the library's or pbx's.
    """
    from pbx.members import REGISTERED

    module, _, _ = env.rpartition(":")
    names = [getattr(REGISTERED.get(env), "__module__", None)]
    if module:
        from pbx.envs.gym import env_spec

        entry = env_spec(env).entry_point
        names += [module, entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)]
    own: dict[str, Path] = {}
    installed: list[str] = []
    for name in dict.fromkeys(n for n in names if n and n.split(".")[0] != "pbx"):
        top = name.split(".")[0]
        file = getattr(importlib.import_module(name), "__file__", None)
        if file is None:  # a built-in module: the interpreter's
            continue
        if _installed(Path(file)):
            installed.append(top)
            continue
        roots = [Path(p) for p in getattr(sys.modules[top], "__path__", [])]
        if not roots:  # a module of its own, in no package: it and the modules imported from beside it
            folder = Path(file).resolve().parent
            for loaded in list(sys.modules.values()):
                path = Path(getattr(loaded, "__file__", None) or "")
                # a file given relative (a module some library compiled on the fly) is not one beside it
                if path.is_absolute() and path.suffix == ".py" and path.resolve().parent == folder:
                    own[path.name] = path
        for root in roots:
            for folder, subfolders, files in os.walk(root):
                subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "__pycache__"]
                for found in files:
                    if found.endswith(".py"):
                        path = Path(folder) / found
                        own[f"{top}/{path.relative_to(root).as_posix()}"] = path
    return sorted(own.items()), installed


def libraries(env: str, installed: Iterable[str] = ()) -> dict[str, str]:
    """The versions of the libraries that compute a run's numbers on ``env`` (import name -> version): NumPy
    for a toy; for any other run SB3's stack (:data:`SB3_LIBRARIES`), the simulator of the env's family
    (:attr:`pbx.envs.Family.simulator`) and the ``installed`` modules that define the env (:func:`env_sources`)."""
    if env in TOYS:
        return {"numpy": _version("numpy")}
    from pbx.envs import family, is_known

    names = list(SB3_LIBRARIES)
    if is_known(env):  # not a member's own env (pbx.members.register)
        simulator = family(env).simulator
        names += [simulator] if simulator is not None else []
    return {name: _version(name) for name in dict.fromkeys([*names, *installed])}


def library_versions(record: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """Each library's versions over the processes that trained a run (its ``pbx`` section): the start's, then
    each resume's under other versions; a library a process did not record counts as ``unrecorded``."""
    if record is None or LIBRARIES not in record:
        return {}
    trained = [record[LIBRARIES], *record.get(LIBRARIES_CONTINUED, [])]
    names = dict.fromkeys(name for versions in trained for name in versions)
    return {name: tuple(str(versions.get(name, "unrecorded")) for versions in trained) for name in names}


def continued(record: Mapping[str, Any] | None, env: str) -> dict[str, Any] | None:
    """``record`` (a run's stored ``pbx`` section) with what trains its rounds from now on on ``env`` added to
    what trained them, where it is other: the running pbx's code (``continued``), the env's own code
    (``env_continued``), the library versions (``libraries_continued``). A resume keeps the record of the start
    and says so; what the record never held (it predates that entry) is not added."""
    if record is None:
        return None
    now = run_record(env)
    result = dict(record)
    for first, later, value in (("code", CONTINUED, now["code"]), (ENV_CODE, ENV_CONTINUED, now.get(ENV_CODE)),
                                (LIBRARIES, LIBRARIES_CONTINUED, now[LIBRARIES])):
        if first in record and value != [record[first], *record.get(later, [])][-1]:
            result[later] = [*record.get(later, []), value]
    return result


def _digest(files: Iterable[tuple[str, Path]]) -> str:
    """16 hex digits of a SHA-256 over the files, name and content, in the order of their names."""
    digest = hashlib.sha256()
    for name, path in sorted(files):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _installed(path: Path) -> bool:
    """Whether a module's file lies in a library: site-packages, or the standard library."""
    paths = sysconfig.get_paths()
    roots = {Path(paths[key]).resolve() for key in ("purelib", "platlib", "stdlib", "platstdlib") if key in paths}
    return any(path.resolve().is_relative_to(root) for root in roots)


def _version(name: str) -> str:
    """The version of the library imported as ``name``: its ``__version__``, else its distribution's."""
    version = getattr(importlib.import_module(name), "__version__", None)
    if isinstance(version, str):
        # torch's is a str subclass, which YAML's safe writer refuses; procgen's ends in the newline of its file
        return str(version).strip()
    dists = importlib.metadata.packages_distributions().get(name, [])
    return importlib.metadata.version(dists[0]) if dists else "unknown"


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
    :data:`IRRELEVANT`; the ``pbx`` section counts by its code hashes (by its commit where it has no hash), its
    library versions not at all (the module docstring says why; :func:`library_versions`). A config written
    before pbx recorded itself has no ``pbx.*`` keys, and so differs from any that does."""
    libraries = (f"{PROVENANCE}.{LIBRARIES}.", f"{PROVENANCE}.{LIBRARIES_CONTINUED}")
    flat = {k: v for k, v in flatten(config).items() if k not in IRRELEVANT and not k.startswith(libraries)}
    if f"{PROVENANCE}.code" in flat:
        flat.pop(f"{PROVENANCE}.commit", None)
    return flat


def differing_keys(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two configs' fingerprints (a key one lacks differs)."""
    return changed_keys(fingerprint(a), fingerprint(b))
