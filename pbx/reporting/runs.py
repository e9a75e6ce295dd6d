"""Reading what a report is made of: run folders and sweep folders, checked before anything is written.

Everything comes from ``config.yaml`` and ``history.csv`` (and ``curves.csv`` when the run kept one), so a report can be made
while a run is still going (a partly written last round is left out). Which rows
are results is decided in one place, :func:`pbx.standings.results`: a population may
hold members whose scores are not results (FIRE-PBT's evaluators), and every score
a report shows, the best member included, is taken from :attr:`Run.results`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from pbx.config import StoredRun
from pbx.curves import read_curves
from pbx.env_section import MOVED, SECTION
from pbx.errors import UsageError
from pbx.history import complete_rounds, read_csv, restart_marks
from pbx.standings import results
from pbx.run_dir import RunDir
from pbx.space import Categorical, Space
from pbx.yaml_files import read_yaml

SWEEP_FILE = "sweep.yaml"


@dataclass(frozen=True)
class Run:
    """One run folder: its resolved config, search space and complete rounds of history."""

    path: Path
    config: dict[str, Any]
    space: Space
    frame: pd.DataFrame
    """Every member's rows (the per-run plots draw the whole population)."""
    curves: pd.DataFrame
    """The scores taken within its rounds (:mod:`pbx.curves`; empty for a run kept without)."""

    @property
    def results(self) -> pd.DataFrame:
        """The rows whose scores are results (:func:`pbx.standings.results`)."""
        return results(self.frame)

    @property
    def name(self) -> str:
        return str(self.config["run"].get("name") or self.path.name)

    @property
    def env(self) -> str:
        return str(self.config["run"]["env"])

    @property
    def seed(self) -> int:
        return int(self.config["run"].get("seed", 0))

    @property
    def search(self) -> str:
        return str(self.config["run"]["search"])

    @property
    def selection(self) -> str:
        return str(self.config["run"].get("selection", "truncation"))

    @property
    def strategy(self) -> str:
        """``search``, with its ``cat_exp`` unless that is the default ``random`` (``PB2 exp3_dep``): PB2-Rand,
        PB2-Mult and PB2-Mix are different strategies in a comparison."""
        cat_exp = (self.config.get("strategy") or {}).get("cat_exp", "random")
        return self.search if cat_exp == "random" else f"{self.search} {cat_exp}"

    @property
    def member(self) -> dict[str, Any]:
        return self.config.get("member") or {}

    @property
    def env_settings(self) -> dict[str, Any]:
        """The env's settings as recorded (a run from before they had a section of their own: ProcGen's levels in
        its ``member`` section, :mod:`pbx.env_section`)."""
        if SECTION in self.config:
            return self.config[SECTION] or {}
        return {key: value for key, value in self.member.items() if key in MOVED}

    @property
    def finished(self) -> bool:
        """Whether the history holds every planned round."""
        return not self.frame.empty and StoredRun.read(self.config).rules.plan(restart_marks(self.frame)).done


def load_run(path: Path) -> Run:
    """Read a run folder; anything that makes it unreadable is a :class:`UsageError` naming the file."""
    run = read_run(path)
    if run.frame.empty:
        raise UsageError(f"{RunDir(path).history}: no finished round yet, nothing to report")
    return run


def read_run(path: Path) -> Run:
    """:func:`load_run`, but a run with no complete round yet is returned (with an empty frame)."""
    folder = RunDir(path)
    if not path.is_dir():
        raise UsageError(f"{path}: no such run folder")
    missing = [f.name for f in (folder.config, folder.history) if not f.is_file()]
    if missing:
        sweep = "" if folder.config.is_file() else f" nor a sweep folder (no {SWEEP_FILE})"
        raise UsageError(f"{path}: not a pbx run folder (no {' or '.join(missing)}){sweep}")
    config = _read_config(folder.config)
    space = Space.from_dict(config["space"], source=f"{folder.config}: space")
    try:
        sizes = StoredRun.read(config).rules.size
    except UsageError:  # a config this pbx cannot read settings from: the history's own rounds say
        sizes = None
    frame = complete_rounds(read_csv(folder.history, space), config["run"].get("pop_size"), str(folder.history), sizes)
    _check_columns(frame, space, folder.history)
    curves = read_curves(folder.curves, int(frame["round"].max()) if len(frame) else -1)
    return Run(path, config, space, frame, curves)


def _read_config(path: Path) -> dict[str, Any]:
    config = read_yaml(path, "run config")
    if not isinstance(config, dict) or not isinstance(config.get("run"), dict) or "space" not in config:
        raise UsageError(f"{path}: not a pbx run config (needs a 'run' mapping and a 'space')")
    absent = [key for key in ("env", "search") if key not in config["run"]]
    if absent:
        raise UsageError(f"{path}: 'run' has no {' or '.join(absent)}")
    return config


def _check_columns(frame: pd.DataFrame, space: Space, path: Path) -> None:
    absent = [name for name in space.names if name not in frame.columns]
    if absent:
        raise UsageError(f"{path}: no column for hyperparameter(s) {absent} of the run's space")
    for name, param in space.params.items():
        if not isinstance(param, Categorical):
            continue
        choices = {str(c) for c in param.choices}
        unknown = sorted({str(v) for v in frame[name]} - choices)
        if unknown:
            raise UsageError(f"{path}: {name} takes values {unknown} outside its choices {sorted(choices)}")


@dataclass(frozen=True)
class SweepRuns:
    """A sweep folder's finished runs with their variant names (in the sweep's order), and its baseline."""

    runs: list[Run]
    variants: list[str]
    """Each run's variant, aligned with ``runs``."""
    settings: dict[str, dict[str, Any]]
    """Each variant's swept settings (``{"env": "coinrun", "search": "PBT"}``)."""
    baseline: str | None


def load_sweep(path: Path, only: Sequence[str] = ()) -> SweepRuns:
    """Read ``SWEEP/sweep.yaml`` and the finished runs ``SWEEP/<variant>/seed<k>/`` of its variants and seeds.

    Runs not started or not finished are left out with a note (a report made while
    the sweep goes on compares the seeds done); a variant with no finished run is an
    error, since the sweep names it and the comparison would silently lack it. ``only``
    names the variants to read (the rest are left out by the user's choice, so a
    report can be made while a sweep's last variant has not started); the sweep's
    baseline is kept only when it is among them.
    """
    file = path / SWEEP_FILE
    record = read_yaml(file, "sweep file")
    if not isinstance(record, dict) or not isinstance(record.get("variants"), list) \
            or not isinstance(record.get("seeds"), list):
        raise UsageError(f"{file}: not a pbx sweep (needs 'variants' and 'seeds' lists)")
    variants = record["variants"]
    names = [variant.get("name") if isinstance(variant, dict) else None for variant in variants]
    if not names or not all(isinstance(name, str) and name for name in names):
        raise UsageError(f"{file}: 'variants' must be a non-empty list of mappings with a 'name'")
    baseline = record.get("baseline")
    if baseline is not None and baseline not in names:
        raise UsageError(f"{file}: baseline {baseline!r} is not one of its variants ({', '.join(names)})")
    unknown = [name for name in only if name not in names]
    if unknown:
        raise UsageError(f"--variants {unknown[0]!r} is not a variant of {path} ({', '.join(names)})")
    if only:
        names = [name for name in names if name in only]
        variants = [variant for variant in variants if variant["name"] in only]
        baseline = baseline if baseline in only else None
    runs, labels = [], []
    for name in names:
        finished = []
        for seed in record["seeds"]:
            folder = path / name / f"seed{seed}"
            run = read_run(folder) if RunDir(folder).config.is_file() else None
            if run is not None and run.finished:
                finished.append(run)
            else:
                print(f"note: leaving out {folder}: {'not finished' if run else 'not started'}", file=sys.stderr)
        if not finished:
            raise UsageError(f"{path / name}: no finished run of variant {name!r} (seeds {record['seeds']})")
        runs += finished
        labels += [name] * len(finished)
    settings = {name: dict(variant.get("settings") or {}) for name, variant in zip(names, variants)}
    return SweepRuns(runs, labels, settings, baseline)
