"""Sweeps: every variant of an experiment for each seed, as ordinary run folders in one sweep folder.

    SWEEP/sweep.yaml            experiment (the file's settings, with the command's -m overrides as flat keys),
                                seeds, variants ({name, settings}, in order), baseline (the first variant
                                with search none, or null)
    SWEEP/<variant>/variant.yaml  the variant's resolved config (a run's config.yaml less seed and name), made
                                once with the sweep folder: every seed's run starts from it
    SWEEP/<variant>/seed<k>/    an ordinary pbx run folder; its train.log holds pbx.train's round lines
    SWEEP/slurm/                the array tasks' output, with --print-slurm

An experiment file is what ``python -m pbx.train --config`` takes, plus:

- ``sweep:`` the variants. A mapping of setting -> list of values is their cross
  product (``{search: [none, PBT, PB2]}``); a list of such mappings is the union
  of their products, for variants that are not one product (a value that is not a
  list is held)::

      sweep:
        - search: [none, PBT]
        - {search: PB2, cat_exp: [random, exp3, cocabo]}

  A key is any setting ``-m key=value`` takes. A variant's name is its values
  joined with ``-`` in key order (``none``, ``PBT``, ``PB2-exp3``); an entry's
  ``name:`` replaces its held values in the names of its variants (``{name: zoo,
  search: none, n_envs: 32}`` is ``zoo``).
- ``seeds:`` N (seeds 0..N-1) or a list; ``--seeds`` overrides it.
- ``slurm:`` the resources of one run, for ``--print-slurm`` (:class:`pbx.slurm.SlurmSettings`).

Runs go seed by seed (every variant of seed 0 first), so a sweep cut short
compares variants on the same seeds. Each run is started, resumed or skipped
from what its folder holds (:func:`progress`), so rerunning the command after a
crash or a job's time limit completes the sweep; sweep.yaml makes sure the rerun
is the same sweep, and variant.yaml that it is the same experiment: a variant
that resolves differently now (an edited space file, a changed member default,
another pbx commit) is refused, naming the keys, unless ``--keep-stored`` says to
go on with the stored resolution. Each run is ``pbx.train``'s own
(:func:`execute`): the same folder, lock, runner and, under an MPI launcher,
ranks, where a failing run fails on every rank and the sweep goes on.
"""

from __future__ import annotations

import contextlib
import math
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import yaml

from pbx.config import StoredRun
from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.fingerprint import changed_keys, differing_keys
from pbx.history import complete_rounds, read_csv, restart_marks
from pbx.standings import best_rows
from pbx.run_dir import RunDir
from pbx.runners.start import announce_run, exit_code, launch, new_run, resumed_run
from pbx.runners.stopping import RunStopped, StopClock
from pbx.sweep_file import RunSpec, Sweep, Variant
from pbx.yaml_files import read_yaml

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm


def prepare(sweep: Sweep, keep_stored: bool = False) -> None:
    """Make the sweep folder with its sweep.yaml and each variant's resolution, or check the folder there holds
    this sweep (more seeds may be added: they are recorded) and that its variants resolve now as they did.

    ``keep_stored``: go on with the stored resolutions where they differ from today's.
    """
    record = sweep.record()
    path = sweep.record_path
    if path.is_file():
        stored = read_yaml(path, "sweep record")
        if not isinstance(stored, dict):
            raise UsageError(f"{path}: not a pbx sweep record")
        variants = stored.get("variants")
        if not isinstance(variants, list) or not all(isinstance(v, dict) and isinstance(v.get("name"), str)
                                                      and isinstance(v.get("settings"), dict) for v in variants):
            raise UsageError(f"{path}: not a pbx sweep record (its variants are not a list of name and settings)")
        changed = changed_keys(stored.get("experiment") or {}, record["experiment"])
        changed += _changed_variants(variants, record["variants"])
        if changed:
            raise UsageError(f"{sweep.given()} is not the experiment {sweep.out} was made for ({', '.join(changed)} "
                             f"changed since): restore it, or start a new sweep with --out DIR")
        _check_stored(sweep, keep_stored)
        record["seeds"] = sorted({*stored.get("seeds", []), *sweep.seeds})
        if record["seeds"] != stored.get("seeds"):
            _write_yaml(path, record)
    else:
        sweep.out.mkdir(parents=True, exist_ok=True)
        _write_yaml(path, record)
    for variant in sweep.variants:  # a folder made before variants were stored takes today's resolution
        if not sweep.stored_path(variant).is_file():
            sweep.stored_path(variant).parent.mkdir(exist_ok=True)
            _write_yaml(sweep.stored_path(variant), sweep.resolved[variant.name])


def _changed_variants(stored: Sequence[Mapping[str, Any]], now: Sequence[Mapping[str, Any]]) -> list[str]:
    """What differs between two sweep records' variants, as the refusal names it: ``sweep.NAME.KEY`` for a
    setting a variant changed, ``sweep.NAME (added)`` / ``(removed)``, ``sweep order`` when only their order
    moved (it numbers the runs ``--only`` and Slurm arrays pick)."""
    old = {v["name"]: v["settings"] for v in stored}
    new = {v["name"]: v["settings"] for v in now}
    changed = [f"sweep.{name} (added)" for name in new if name not in old]
    changed += [f"sweep.{name} (removed)" for name in old if name not in new]
    changed += [f"sweep.{name}.{key}" for name in new if name in old for key in changed_keys(old[name], new[name])]
    if not changed and list(old) != list(new):
        changed.append("sweep order")
    return changed


def _check_stored(sweep: Sweep, keep_stored: bool) -> None:
    """Refuse variants that resolve differently now than when the sweep folder was made, naming the keys."""
    changed = []
    for variant in sweep.variants:
        if sweep.stored_path(variant).is_file():
            keys = differing_keys(_stored(sweep, variant), sweep.resolved[variant.name])
            changed += [f"{variant.name}: {', '.join(keys)}"] if keys else []
    if changed and not keep_stored:
        raise UsageError(f"{sweep.out}'s variants resolve differently now than when the sweep was made "
                         f"({'; '.join(changed)}): a space file, a member default, pbx or the env's own module "
                         f"changed; go on with the stored settings with --keep-stored, or start a new sweep with "
                         f"--out DIR")


def _stored(sweep: Sweep, variant: Variant) -> dict[str, Any]:
    config = read_yaml(sweep.stored_path(variant), "stored variant")
    if not isinstance(config, dict) or not isinstance(config.get("run"), dict):
        raise UsageError(f"{sweep.stored_path(variant)}: not a resolved pbx config")
    return config


def _write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    text = yaml.safe_dump(dict(data), sort_keys=False)
    durable_write(path, lambda tmp: tmp.write_text(text))


@dataclass(frozen=True)
class Progress:
    """What a run folder holds: finished rounds of the planned ones, and the best member's final scores."""

    done: int
    rounds: int
    score: float = math.nan
    test_score: float = math.nan

    @property
    def finished(self) -> bool:
        return self.done >= self.rounds


def progress(path: Path) -> Progress | None:
    """The run in ``path``, or None when there is none yet (no config.yaml: start it)."""
    folder = RunDir(path)
    if not folder.config.is_file():
        return None
    config = read_yaml(folder.config, "run config")
    stored = StoredRun.read(config) if isinstance(config, dict) else None
    if stored is None or stored.run.t_ready is None or stored.run.max_budget is None:
        raise UsageError(f"{folder.config}: not a pbx run config")
    if not folder.history.is_file():
        return Progress(0, stored.rules.plan([]).rounds_estimate())
    frame = complete_rounds(read_csv(folder.history), stored.run.pop_size, str(folder.history), stored.rules.size)
    if frame.empty:
        return Progress(0, stored.rules.plan([]).rounds_estimate())
    best = best_rows(frame).iloc[-1]
    plan = stored.rules.plan(restart_marks(frame))
    return Progress(int(frame["round"].nunique()), plan.rounds_estimate(), float(best["score"]),
                    float(best["test_score"]))


def execute(sweep: Sweep, spec: RunSpec, resume: bool, comm: Intracomm | None = None,
            clock: StopClock | None = None) -> str | None:
    """Train (or resume) one run as ``pbx.train`` does (:func:`pbx.runners.start.launch`), its output appended to
    the run's train.log.

    A new run starts from the variant's stored resolution with the run's seed and
    name. Returns None when the run finished, else why not (its exit code, whose
    one line went to stderr, or the exception of a member that died, whose traceback
    goes to the run's error.txt). Raises KeyboardInterrupt when the run was
    interrupted (its finished rounds are saved), :class:`RunStopped` when ``clock`` (the sweep's: its time limit,
    a signal) stopped it inside a round with everything saved. Under MPI the other ranks are told
    a run follows (:func:`pbx.runners.start.follow_runs`), and a failure on any rank
    fails the run on all of them.
    """
    if resume:
        setup = lambda comm: resumed_run(spec.path, comm=comm)
    else:
        run = {"seed": spec.seed, "name": f"{sweep.out.name}-{spec.variant.name}-seed{spec.seed}"}
        setup = lambda comm: new_run([_stored(sweep, spec.variant), {"run": run}], run_dir=spec.path, comm=comm)
    spec.path.mkdir(parents=True, exist_ok=True)
    announce_run(comm)
    with open(spec.path / "train.log", "a", buffering=1) as log, contextlib.redirect_stdout(log):
        stopped: list[RunStopped] = []

        def start() -> None:
            try:
                launch(setup, contained=True, clock=clock)
            except RunStopped as err:  # the sweep says how to go on (rerun it), in its own line
                print(err)
                stopped.append(err)

        try:
            code = exit_code(start)
        except Exception as err:  # a member that died: the other runs go on
            (spec.path / "error.txt").write_text(traceback.format_exc())
            return f"{type(err).__name__}: {err}; traceback in {spec.path / 'error.txt'}"
    if code == 130:
        raise KeyboardInterrupt
    if stopped:
        raise RunStopped(f"{spec.label} {stopped[0].summary}")
    return None if code == 0 else f"exit {code}"
