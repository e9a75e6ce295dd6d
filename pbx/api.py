"""Runs from Python: :func:`run` starts one and :func:`resume` continues one, as ``python -m pbx.train`` does.

    import pbx

    result = pbx.run(env="CartPole-v1", search="PBT", pop_size=4, seed=0, run_dir="runs/cartpole")
    result.history          # history.csv as a DataFrame: one row per member and round
    result.best             # the best member of the last round (train score), as its history row
    result.export()         # its SB3 files (model.zip), the path of model.zip
    result.report()         # python -m pbx.report's plots and tables of the run
    pbx.resume("runs/cartpole", max_budget=200_000)   # continue it to a larger budget
    pbx.run(env="bigfish", search="PB2", time_limit=3500)  # stops inside a round by then: pbx.RunStopped

A setting is named as in a run's config.yaml, which is the command line's flag
without its dashes (``pop_size``, the PB2 code's ``--batchsize``; ``t_ready``,
``max_budget``, ``quantile`` for ``--pbt_thresh``, ``resample_prob`` for
``--pbt_resample``, ``cat_exp``) or any ``-m`` key (``n_envs``, ``lr``); bad input
raises one :class:`~pbx.errors.UsageError` naming it, the command's one line. The
run is the command's: the same folder, history, seeds and, under an MPI launcher
(``mpiexec -n 4 python script.py``), ranks: rank 0 returns the result, the others
train their members and return None.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from pbx.errors import UsageError
from pbx.export import export
from pbx.standings import member_row
from pbx.reporting.build import Options, generate
from pbx.runners.start import Setup, config_layers, launch, new_run, resumed_run
from pbx.runners.stopping import RunStopped, StopClock, check_time_limit
from pbx.settings import RunSettings, check_run_dir

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

__all__ = ["Result", "RunStopped", "resume", "run"]

RUN_KEYS = {f.name for f in dataclasses.fields(RunSettings)}


@dataclass(frozen=True)
class Result:
    """A run's finished rounds, as its folder holds them."""

    path: Path
    """The run folder (:class:`pbx.run_dir.RunDir`)."""
    history: pd.DataFrame
    """``history.csv``: one row per member and round (score, test score, steps, hyperparameters, lineage)."""

    @property
    def best(self) -> pd.Series:
        """The best member of the last finished round on train score (the test set never selects), as its
        history row; ``python -m pbx.evaluate`` and :meth:`export` take this member by default."""
        return member_row(self.history, "best")

    def export(self, out: str | Path | None = None, member: str | int = "best") -> Path:
        """Write ``member`` (default the best) as Stable-Baselines3 files (``python -m pbx.export``) into ``out``
        (default ``<run>/export/m<M>_round<R>``); the path of ``model.zip``."""
        return export(self.path, member, Path(out) if out is not None else None).files[0]

    def report(self, out: str | Path | None = None) -> list[Path]:
        """Write ``python -m pbx.report``'s plots and tables of this run into ``out`` (default
        ``<run>/report``); the files written."""
        return list(generate([self.path], Options(out=Path(out) if out is not None else None)))


def run(env: str | None = None, search: str | None = None, *, config: str | Path | None = None,
        run_dir: str | Path | None = None, time_limit: float | None = None, **settings: Any) -> Result | None:
    """Train a population as ``python -m pbx.train`` does: ``env`` and ``search`` as ``--env`` and ``--search``
    (None: their defaults), ``config`` an experiment YAML (``--config``), ``run_dir`` the folder (default
    ``runs/<name>``), ``time_limit`` seconds from the call after which it stops inside a round with everything
    saved (``--time-limit``; :class:`RunStopped` says where, :func:`resume` goes on), ``settings`` the rest by
    their config names. The result, or None on an MPI rank other than 0."""
    named = {"env": env, "search": search}
    layer: dict[str, Any] = {"run": {k: v for k, v in {**named, **settings}.items()
                                     if k in RUN_KEYS and (k not in named or v is not None)}}
    layer.update({k: v for k, v in settings.items() if k not in RUN_KEYS})
    return _start(lambda comm: new_run([*config_layers(_path(config, "config")), layer],
                                       run_dir=check_run_dir(run_dir), comm=comm), time_limit)


def resume(path: str | Path, *, time_limit: float | None = None, **changes: Any) -> Result | None:
    """Continue the stopped run in ``path`` (a finished one: its result, nothing trained) with the changes a
    resume allows (:data:`pbx.runners.start.RESUMABLE`: ``max_budget=...`` extends it); ``time_limit`` as for
    :func:`run`."""
    return _start(lambda comm: resumed_run(_path(path, "pbx.resume(path)", required=True), changes, comm=comm),
                  time_limit)


def _path(value: Any, what: str, required: bool = False) -> Any:
    """``value`` where it is a path (a str or os.PathLike), or None where not ``required``; else
    :class:`~pbx.errors.UsageError`. Checked inside the setup :func:`_start` runs, so that under MPI the other ranks
    hear of the refusal."""
    if (value is not None or required) and not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{what} must be a path (a str or pathlib.Path), got {type(value).__name__} {value!r}")
    return value


def _start(setup: Callable[[Intracomm | None], Setup], time_limit: float | None) -> Result | None:
    """Launch the run under a clock of ``time_limit`` seconds from now (checked first: bad input writes nothing)."""
    done = launch(setup, clock=StopClock(check_time_limit(time_limit, "time_limit")))
    return Result(done[0].path, done[1].frame) if done is not None else None
