"""A sweep file read: the experiment, its variants and seeds, each variant resolved as ``pbx.train`` would,
before anything is written.

:mod:`pbx.sweeps` makes the sweep's folder from it and runs each :class:`RunSpec`; the file's keys are in
:mod:`pbx.sweeps`'s docstring, which describes the sweep as a user meets it.
"""

from __future__ import annotations

import dataclasses
import itertools
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from pbx.config import resolve
from pbx.settings import check_seed, parse_override
from pbx.errors import UsageError
from pbx.run_dir import folder_part
from pbx.runners.start import rank_layers
from pbx.runners.stopping import check_time_limit
from pbx.slurm import SlurmSettings, slurm_settings
from pbx.yaml_files import read_yaml

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


def _refuse_per_run(file: Path, experiment: Mapping[str, Any], variants: Sequence[Variant]) -> None:
    run = experiment.get("run") if isinstance(experiment.get("run"), dict) else {}
    given = [k for k in experiment if _name(k) in PER_RUN] + [k for k in run if k in PER_RUN]
    given += [k for v in variants for k in v.settings if _name(k) in PER_RUN]
    if given:
        raise UsageError(f"{file}: {', '.join(sorted(set(given)))}: a sweep sets each run's seed (from --seeds or "
                         f"seeds:) and name; take it out of the file")


def _name(key: str) -> str:
    return key.split(".")[-1]
