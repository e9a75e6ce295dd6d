"""What ``python -m pbx.report`` makes of the folders it is given, checked in full before anything is written.

- Run folders: each gets its own report (:mod:`pbx.reporting.run_report`); several
  of them (or ``--out``) also a comparison, one group per strategy label
  (:func:`pbx.reporting.pooling.run_labels`), the ``none`` strategy the baseline.
- One sweep folder (``SWEEP/sweep.yaml``, from :mod:`pbx.sweep`): its variants are
  the strategies, in the sweep's order, its finished runs the seeds, its
  ``baseline`` the baseline; written into ``SWEEP/report/``. Its runs get no
  report of their own.
- Several sweep folders (one per game), or a sweep with ``env`` among its swept
  keys: a comparison across games, each strategy named by its variant without
  the env.

Runs under one label are pooled only when they are one experiment
(:func:`pbx.reporting.pooling.pool`); where they were trained with other library
versions the command says so on stderr, and the comparison's files above their
list of runs.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from pbx.errors import UsageError
from pbx.reporting import stats
from pbx.reporting.comparison import write_comparison
from pbx.reporting.games import Ranges
from pbx.reporting.pooling import pool, run_labels, with_member_kind
from pbx.reporting.run_report import write_run_report
from pbx.reporting.runs import SWEEP_FILE, Run, load_run, load_sweep
from pbx.reporting.scores import LAST_K, SCORES
from pbx.reporting.study import make_study
from pbx.run_dir import RunDir, folder_part


@dataclass(frozen=True)
class Options:
    """How a report is made (``python -m pbx.report``'s flags)."""

    out: Path | None = None
    k: int = LAST_K
    baseline: str | None = None
    reps: int = stats.REPS
    score: str = SCORES[0]
    split: bool = False
    ranges: tuple[str, ...] = ()
    """``GAME=MIN,MAX`` normalisation ranges."""
    variants: tuple[str, ...] = ()
    """The sweep variants to report (all when empty)."""


@dataclass(frozen=True)
class Inputs:
    """The runs to report, each one's strategy label, the default baseline and where the comparison goes."""

    runs: list[Run]
    labels: list[str]
    baseline: str | None
    out: Path | None
    own_reports: bool
    """Whether each run also gets its own report (loose run folders, not a sweep's runs)."""


def generate(run_dirs: Sequence[Path], options: Options = Options()) -> Iterator[Path]:
    """Check every input first (so bad input writes nothing), then yield each file as it is written."""
    if options.k < 1:
        raise UsageError(f"--last-k must be at least 1, got {options.k}")
    if options.reps < 1:
        raise UsageError(f"--reps must be at least 1, got {options.reps}")
    if options.score not in SCORES:
        raise UsageError(f"--score must be one of {', '.join(SCORES)}, got {options.score!r}")
    ranges = Ranges.parse(options.ranges)
    sweeps = [path for path in run_dirs if (path / SWEEP_FILE).is_file()]
    if options.variants and not sweeps:
        raise UsageError("--variants picks variants of sweep folders: give a sweep folder (SWEEP/sweep.yaml)")
    inputs = _read_sweeps(sweeps, run_dirs, options.out, options.variants) if sweeps \
        else _read_runs(run_dirs, options.out)
    study = None
    if inputs.out is not None:
        labels = with_member_kind(inputs.runs, inputs.labels)
        pooled = pool(inputs.runs, labels, options.split, names=inputs.labels)
        for note in pooled.notes:
            print(f"note: {note}", file=sys.stderr)
        study = make_study(pooled, ranges, options.baseline if options.baseline is not None else inputs.baseline,
                           options.k, options.reps)
    if inputs.own_reports:
        for run in inputs.runs:
            yield from write_run_report(run, options.k)
    if study is not None and inputs.out is not None:
        yield from write_comparison(study, inputs.out, options.score)


def _read_sweeps(sweeps: list[Path], given: Sequence[Path], out: Path | None, variants: Sequence[str]) -> Inputs:
    """One or more sweep folders: their finished runs, labelled by variant without the env."""
    if len(sweeps) < len(given):
        loose = next(path for path in given if path not in sweeps)
        raise UsageError(f"{loose}: sweep folders are reported together, not beside run folders")
    _refuse_twice(sweeps)
    runs, labels, baselines = [], [], set()
    for path in sweeps:
        sweep = load_sweep(path, variants)
        names = {variant: _strategy(variant, settings) for variant, settings in sweep.settings.items()}
        runs += sweep.runs
        labels += [names[variant] or run.strategy for variant, run in zip(sweep.variants, sweep.runs)]
        if sweep.baseline is not None:
            baselines.add(names[sweep.baseline] or next(run.strategy for variant, run in
                                                        zip(sweep.variants, sweep.runs) if variant == sweep.baseline))
    if len(baselines) > 1:
        raise UsageError(f"the sweeps name different baselines ({', '.join(sorted(baselines))}): give --baseline")
    default = sweeps[0] / "report" if len(sweeps) == 1 else default_out(sweeps)
    return Inputs(runs, labels, next(iter(baselines), None), out if out is not None else default, False)


def _strategy(variant: str, settings: dict[str, object]) -> str:
    """A variant's name without its env (``coinrun-PBT`` -> ``PBT``; a named variant keeps its name,
    ``zoo``); empty when only the env is swept."""
    env = [value for key, value in settings.items() if key.rsplit(".", 1)[-1] == "env"]
    if not env:
        return variant
    part = re.escape(folder_part(env[0]))
    return re.sub(rf"(^|-){part}(?=-|$)", "", variant, count=1).lstrip("-")


def _read_runs(run_dirs: Sequence[Path], out: Path | None) -> Inputs:
    """Loose run folders: each run, labelled by its strategy; ``none`` is the baseline when present.

    Folders this command wrote (``comparison.md``, no ``config.yaml``) are skipped
    with a note, so ``python -m pbx.report runs/*`` works again after the first time.
    """
    run_dirs = [path for path in run_dirs if not _is_report_folder(path)]
    if not run_dirs:
        raise UsageError("no run folders left after skipping report folders")
    _refuse_twice(run_dirs)
    runs = [load_run(path) for path in run_dirs]
    labels = run_labels(runs)
    compare = out is not None or len(runs) > 1
    return Inputs(runs, labels, "none" if "none" in labels else None,
                  (out if out is not None else default_out(run_dirs)) if compare else None, True)


def _refuse_twice(paths: Sequence[Path]) -> None:
    seen: dict[Path, Path] = {}
    for path in paths:
        if seen.setdefault(path.resolve(), path) is not path:
            raise UsageError(f"{path}: given more than once (it would count twice in the comparison)")


def _is_report_folder(path: Path) -> bool:
    skip = (path / "comparison.md").is_file() and not RunDir(path).config.exists()
    if skip:
        print(f"note: skipping {path}: a pbx report folder, not a run", file=sys.stderr)
    return skip


def default_out(paths: Sequence[Path]) -> Path:
    """``report/`` in the folders' common parent folder, or ``./report`` when they share none but the root."""
    common = Path(os.path.commonpath([path.parent.resolve() for path in paths]))
    if common == Path(common.anchor):
        return Path("report")
    cwd = Path.cwd().resolve()
    return (common.relative_to(cwd) if common.is_relative_to(cwd) else common) / "report"
