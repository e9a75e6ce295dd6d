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
import dataclasses
import itertools
import math
import shlex
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import yaml

from pbx.config import StoredRun, resolve
from pbx.settings import check_seed, parse_override
from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.fingerprint import changed_keys, differing_keys
from pbx.history import complete_rounds, read_csv, restart_marks
from pbx.standings import best_rows
from pbx.run_dir import RunDir, folder_part
from pbx.runners.start import announce_run, exit_code, launch, new_run, rank_layers, resumed_run
from pbx.runners.stopping import RunStopped, StopClock, check_time_limit
from pbx.slurm import SlurmSettings, slurm_settings
from pbx.yaml_files import read_yaml

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

SWEEP_KEYS = ("sweep", "seeds", "slurm", "time_limit")
"""Top-level keys of an experiment file that describe the sweep, not a run."""
PER_RUN = ("seed", "name")
"""Settings the sweep sets for each run."""
MAX_SEEDS = 10_000
"""The most seeds a sweep takes (each is a run of every variant): ``--seeds 4294967296`` is a typo, and its list
alone would not fit in memory."""


@dataclass(frozen=True)
class Variant:
    name: str
    settings: dict[str, Any]


@dataclass(frozen=True)
class RunSpec:
    """One run of the sweep: a variant and a seed, and its place in the sweep (``--only INDEX``)."""

    index: int
    variant: Variant
    seed: int
    path: Path

    @property
    def label(self) -> str:
        return f"{self.variant.name}/seed{self.seed}"


@dataclass(frozen=True)
class Sweep:
    file: Path
    out: Path
    experiment: dict[str, Any]
    """The file's settings (no sweep keys), with the command's ``-m`` overrides as flat keys."""
    overrides: list[str]
    variants: list[Variant]
    seeds: list[int]
    baseline: str | None
    slurm: SlurmSettings
    resolved: dict[str, dict[str, Any]]
    """Each variant's config as it resolves now (less seed and name), by variant name."""
    time_limit: float | None = None
    """Seconds of wall clock for the whole sweep (the file's ``time_limit``, or ``--time-limit``): the run in
    progress then stops inside its round with everything saved, and rerunning the sweep goes on with it."""

    @property
    def runs(self) -> list[RunSpec]:
        pairs = [(v, s) for s in self.seeds for v in self.variants]
        return [RunSpec(i, v, s, self.out / v.name / f"seed{s}") for i, (v, s) in enumerate(pairs)]

    @property
    def record_path(self) -> Path:
        return self.out / "sweep.yaml"

    def stored_path(self, variant: Variant) -> Path:
        """Where the variant's resolution is stored: every seed's run starts from it."""
        return self.out / variant.name / "variant.yaml"

    def record(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "seeds": self.seeds,
                "variants": [dataclasses.asdict(v) for v in self.variants], "baseline": self.baseline,
                "file": str(self.file)}

    def given(self) -> str:
        """The experiment as the command gives it: the file, and its -m overrides."""
        return f"{self.file} with -m {' '.join(self.overrides)}" if self.overrides else str(self.file)

    def command(self, *extra: str) -> str:
        """The command line that runs this sweep (``extra``: more flags)."""
        overrides = ["-m", *self.overrides] if self.overrides else []
        return shlex.join(["python", "-m", "pbx.sweep", str(self.file), "--seeds", ",".join(map(str, self.seeds)),
                           "--out", str(self.out), *overrides, *extra])


def load_sweep(file: str | Path, seeds: str | None = None, overrides: Sequence[str] = (),
               out: str | Path | None = None, ranks: int | None = 1, time_limit: Any = None) -> Sweep:
    """Read an experiment file and resolve every variant as ``pbx.train`` would on ``ranks`` MPI ranks (None:
    the ranks of the file's Slurm tasks), before anything is written; a :class:`UsageError` names the file and
    the variant."""
    file = Path(file)
    raw = read_yaml(file, "experiment file")
    if not isinstance(raw, dict):
        raise UsageError(f"{file}: expected a mapping of settings with a sweep: section")
    if "sweep" not in raw:
        raise UsageError(f"{file}: no sweep: section (e.g. sweep: {{search: [none, PBT, PB2]}})")
    experiment = {k: v for k, v in raw.items() if k not in SWEEP_KEYS}
    items = [parse_override(item) for item in overrides]
    experiment.update(items)
    variants = expand(raw["sweep"], file)
    _refuse_per_run(file, experiment, variants)
    swept = {_name(k) for v in variants for k in v.settings}
    clash = sorted({_name(k) for k, _ in items} & swept)
    if clash:
        raise UsageError(f"-m {', '.join(clash)}: swept by {file}'s sweep: section; edit the file instead")
    seed_list = parse_seeds(seeds if seeds is not None else raw.get("seeds"), file)
    slurm = slurm_settings(raw.get("slurm"), file)
    try:
        limit = check_time_limit(time_limit if time_limit is not None else raw.get("time_limit"), "time_limit")
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None
    baseline, resolved = None, {}
    for variant in variants:
        try:
            cfg = resolve([*rank_layers(slurm.ranks if ranks is None else ranks), experiment, variant.settings])
        except UsageError as err:
            raise UsageError(f"{file}: variant {variant.name}: {err}") from None
        if baseline is None and cfg.run.search == "none":
            baseline = variant.name
        config = cfg.to_dict()
        config["run"] = {k: v for k, v in config["run"].items() if k not in PER_RUN}
        resolved[variant.name] = config
    suffix = "".join(f"-{folder_part(v)}" for _, v in items)
    return Sweep(file, Path(out) if out is not None else Path("sweeps") / f"{file.stem}{suffix}", experiment,
                 list(overrides), variants, seed_list, baseline, slurm, resolved, limit)


def expand(spec: Any, file: Path) -> list[Variant]:
    """The variants of a ``sweep:`` section (see the module docstring)."""
    entries = [spec] if isinstance(spec, dict) else spec
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) and e for e in entries):
        raise UsageError(f"{file}: sweep: must be a mapping of setting -> list of values, or a list of such "
                         f"mappings, got {spec!r}")
    variants: list[Variant] = []
    for entry in entries:
        entry = dict(entry)
        label = entry.pop("name", None)
        axes = [values if isinstance(values, list) else [values] for values in entry.values()]
        for key, values in zip(entry, axes):
            if not values:
                raise UsageError(f"{file}: sweep: {key} has an empty list of values")
            if any(isinstance(v, (dict, list)) for v in values):
                raise UsageError(f"{file}: sweep: {key} takes plain values, got {values!r}")
        swept = [label is None or isinstance(values, list) for values in entry.values()]
        for combo in itertools.product(*axes):
            parts = ([] if label is None else [folder_part(label)]) + [folder_part(v) for v, s in zip(combo, swept) if s]
            variants.append(Variant("-".join(parts), dict(zip(entry, combo))))
    names = [v.name for v in variants]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"{file}: sweep: variant name(s) {twice} twice (a name is the values joined with '-')")
    return variants


def parse_seeds(value: Any, file: Path) -> list[int]:
    """``5`` -> seeds 0..4; ``0,3,7`` (or a YAML list) -> those seeds. Each is a run seed (:func:`check_seed`) and
    there are at most :data:`MAX_SEEDS`, checked before the list is built or anything written."""
    if value is None:
        raise UsageError(f"{file} gives no seeds: pass --seeds N (seeds 0..N-1) or --seeds 0,3,7, "
                         f"or put seeds: N in the file")
    listed = isinstance(value, list) or (isinstance(value, str) and "," in value)
    try:
        numbers = [int(str(p).strip()) for p in ((value if isinstance(value, list) else value.split(","))
                                                 if listed else [value])]
    except ValueError:
        raise UsageError(f"seeds must be a count N or a list such as 0,3,7, got {value!r}") from None
    if not listed:
        if not 1 <= numbers[0] <= MAX_SEEDS:
            raise UsageError(f"seeds must be a count from 1 to {MAX_SEEDS:,} (seeds 0..N-1) or a list such as "
                             f"0,3,7, got {value!r}")
        return list(range(numbers[0]))
    if not numbers or len(set(numbers)) < len(numbers):
        raise UsageError(f"seeds must be distinct non-negative integers, at least one, got {value!r}")
    if len(numbers) > MAX_SEEDS:
        raise UsageError(f"seeds lists {len(numbers):,} seeds, more than a sweep takes ({MAX_SEEDS:,})")
    for seed in numbers:
        check_seed(seed, f"each of seeds {value!r}" if len(repr(value)) < 40 else "each seed")
    return numbers


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


def _refuse_per_run(file: Path, experiment: Mapping[str, Any], variants: Sequence[Variant]) -> None:
    run = experiment.get("run") if isinstance(experiment.get("run"), dict) else {}
    given = [k for k in experiment if _name(k) in PER_RUN] + [k for k in run if k in PER_RUN]
    given += [k for v in variants for k in v.settings if _name(k) in PER_RUN]
    if given:
        raise UsageError(f"{file}: {', '.join(sorted(set(given)))}: a sweep sets each run's seed (from --seeds or "
                         f"seeds:) and name; take it out of the file")


def _name(key: str) -> str:
    return key.split(".")[-1]
