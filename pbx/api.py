"""Runs from Python: :func:`run` starts one, :func:`resume` continues one, as ``python -m pbx.train`` does, and
:func:`load` reads one back without touching it.

    import pbx

    result = pbx.run(env="CartPole-v1", search="PBT", pop_size=4, seed=0, run_dir="runs/cartpole")
    result                  # one line: the folder, strategy, env, rounds done of planned, state, best member
    result.history          # history.csv as a DataFrame: one row per member and round
    result.best             # the best member of the last round (train score), as its history row
    result.schedules        # each member's hyperparameters in each round, indexed by (member, round)
    result.export()         # its SB3 files (model.zip), the path of model.zip
    result.report()         # python -m pbx.report's plots and tables of the run
    pbx.resume("runs/cartpole", max_budget=200_000)   # continue it to a larger budget
    pbx.load("runs/cartpole")                         # read it back, finished, stopped or still training
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

from pbx.config import StoredRun
from pbx.console import format_score
from pbx.errors import UsageError
from pbx.export import export
from pbx.history import BASE_COLUMNS, restart_marks
from pbx.standings import member_row
from pbx.reporting.build import Options, generate
from pbx.reporting.runs import SWEEP_FILE, read_run
from pbx.run_dir import RunDir
from pbx.runners.start import Setup, config_layers, launch, new_run, resumed_run
from pbx.runners.stopping import RunStopped, StopClock, check_time_limit
from pbx.settings import RunSettings, check_run_dir

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

__all__ = ["Result", "RunStopped", "load", "resume", "run"]

RUN_KEYS = {f.name for f in dataclasses.fields(RunSettings)}


@dataclass(frozen=True, repr=False, eq=False)
class Result:
    """A run as its folder held it when read: its finished rounds, what it trains and how far it is."""

    path: Path
    """The run folder (:class:`pbx.run_dir.RunDir`)."""
    history: pd.DataFrame
    """``history.csv``: one row per member and finished round (score, test score, steps, hyperparameters,
    lineage)."""
    config: dict[str, Any]
    """``config.yaml`` as the run keeps it (``config["run"]["env"]``, the ``strategy``, ``member`` and ``space``
    sections)."""
    rounds: int
    """The rounds the run is planned to take (:meth:`pbx.plan.Rules.planned`: exact once finished; a BG-PBT or IPBT
    run's restarts to come may change it)."""
    state: str
    """``finished`` (every planned round is in the history), ``training`` (a process on this machine holds the
    folder: more rounds are coming) or ``stopped`` (neither: stopped, killed or failed; :func:`resume` goes on)."""

    @property
    def best(self) -> pd.Series:
        """The best member of the last finished round on train score (the test set never selects), as its
        history row; ``python -m pbx.evaluate`` and :meth:`export` take this member by default."""
        if self.history.empty:
            raise UsageError(f"{RunDir(self.path).history}: no finished round yet, so no best member")
        return member_row(self.history, "best")

    @property
    def schedules(self) -> pd.DataFrame:
        """Each member's hyperparameters in each finished round (those it trained with during the round), one
        column per hyperparameter, indexed by (member, round): ``schedules.loc[2]`` is member 2's, and
        ``schedules["lr"].unstack("member")`` one hyperparameter by round and member. Whose weights a member
        trained on after an exploit is the history's ``parent``."""
        names = [c for c in self.history.columns if c not in BASE_COLUMNS]
        return self.history.set_index(["member", "round"])[names].sort_index()

    def export(self, out: str | Path | None = None, member: str | int = "best") -> Path:
        """Write ``member`` (default the best) as Stable-Baselines3 files (``python -m pbx.export``) into ``out``
        (default ``<run>/export/m<M>_round<R>``); the path of ``model.zip``. It takes the folder's last finished
        round as it is then (a run still training may have finished more)."""
        return export(self.path, member, Path(out) if out is not None else None).files[0]

    def report(self, out: str | Path | None = None) -> list[Path]:
        """Write ``python -m pbx.report``'s plots and tables of this run into ``out`` (default
        ``<run>/report``) from the folder as it is then; the files written."""
        return list(generate([self.path], Options(out=Path(out) if out is not None else None)))

    def __repr__(self) -> str:
        """``<pbx.Result runs/x: PBT on toy, 4/10 rounds, training; best m2 score 0.71 (test 0.7)>``."""
        run = self.config["run"]
        done = int(self.history["round"].max()) + 1 if len(self.history) else 0
        best = "no round finished yet"
        if done:
            row = self.best
            test = f" (test {format_score(float(row['test_score']))})" if pd.notna(row["test_score"]) else ""
            best = f"best m{int(row['member'])} score {format_score(float(row['score']))}{test}"
        return f"<pbx.Result {self.path}: {run['search']} on {run['env']}, {done}/{self.rounds} rounds, " \
               f"{self.state}; {best}>"


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


def load(path: str | Path) -> Result:
    """The run in ``path`` as its folder holds it now, read without taking its lock or writing anything: a
    finished run, a stopped one (:func:`resume` goes on) or one another process is training, whose finished
    rounds come back (a round or a line still being written is left out) while it trains on undisturbed. A
    folder that holds no run, or a damaged one, is one :class:`~pbx.errors.UsageError` naming the file."""
    if isinstance(path, str) and not path.strip():
        raise UsageError("pbx.load(path): '' names no folder")
    folder = RunDir(Path(_path(path, "pbx.load(path)", required=True)))
    if (folder.path / SWEEP_FILE).is_file():
        raise UsageError(f"{folder.path} is a sweep folder ({SWEEP_FILE}): load one of its runs, "
                         f"{folder.path}/<variant>/seed<k>")
    run = read_run(folder.path)
    try:
        rounds = StoredRun.read(run.config).rules.planned(restart_marks(run.frame)).rounds
    except UsageError as err:
        raise UsageError(f"{folder.config}: {err}") from None
    state = "finished" if run.finished else "training" if folder.holder() is not None else "stopped"
    return Result(folder.path, run.frame, run.config, rounds, state)


def _path(value: Any, what: str, required: bool = False) -> Any:
    """``value`` where it is a path (a str or os.PathLike), or None where not ``required``; else
    :class:`~pbx.errors.UsageError`. Checked inside the setup :func:`_start` runs, so that under MPI the other ranks
    hear of the refusal."""
    if (value is not None or required) and not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{what} must be a path (a str or pathlib.Path), got {type(value).__name__} {value!r}")
    return value


def _start(setup: Callable[[Intracomm | None], Setup], time_limit: float | None) -> Result | None:
    """Launch the run under a clock of ``time_limit`` seconds from now (checked first: bad input writes nothing);
    its result as :func:`load` reads it from the folder, so that every :class:`Result` is made one way."""
    done = launch(setup, clock=StopClock(check_time_limit(time_limit, "time_limit")))
    return load(done[0].path) if done is not None else None
