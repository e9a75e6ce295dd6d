"""Run settings: the ``run`` section every run has, and typed settings from YAML and command-line text.

:class:`RunSettings` is the first of a run config's three sections (:mod:`pbx.config`
merges the layers and resolves the others, which depend on the strategy and the
member); :func:`build` makes any settings dataclass from raw values, coercing each
to its field's type with one clear error for a value that is not one
(:func:`coerce`), and :func:`parse_override` reads a ``-m key=value`` item. Reports
and sweeps read stored settings through these without resolving a whole run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from pbx.errors import UsageError
from pbx.yaml_files import read_yaml

RUNNERS = ("auto", "sync", "mpi")
COMM_MODES = ("p2p", "collective")
MAX_MEMBERS = 10_000
"""The most members a round trains (``pop_size``, or a larger first population): each is a learner of its own,
and a population past this is a typo (``pop_size=1e6``) that would exhaust memory rather than a run."""


def check_seed(seed: int, name: str) -> None:
    """Raise :class:`UsageError` unless ``seed`` is one of NumPy's seeds (0 to 2**32 - 1): the run seed, from
    which every member's and decision's stream derives, and the seeds of a replay and of ``pbx.evaluate``'s
    levels (gymnasium refuses a negative one with a traceback)."""
    if not 0 <= seed < 2**32:
        raise UsageError(f"{name} must be a whole number from 0 to 2**32 - 1, got {seed}")


def check_name(name: str | None) -> None:
    """Raise :class:`UsageError` unless ``name`` (a run's ``--name``) is None or names a folder inside ``runs/``:
    the run folder is ``runs/<name>``, so ``''`` would make ``runs/`` itself the run, and ``../x`` or ``/x`` a
    folder elsewhere. A name may hold a ``/`` (a folder inside ``runs/``, as the default name of ``--env ALE/Pong-v5``
    did before it became ``ALE-Pong-v5-...``: such a run's config.yaml still resumes)."""
    if name is None:
        return
    inside = os.path.normpath(os.path.join("runs", name))
    if not name.strip() or "\0" in name or ".." in Path(name).parts or not inside.startswith("runs" + os.sep):
        raise UsageError(f"name must name a folder inside runs/ (the run folder is runs/<name>), got {name!r}: give "
                         f"a name such as pbt-toy-1, or the folder itself with --run-dir")


def check_run_dir(run_dir: object) -> Path | None:
    """``--run-dir`` (:func:`pbx.run`'s ``run_dir``) as a path, None where none is given; raise :class:`UsageError`
    for what cannot be a new run's folder: not a path, ``''`` (which would be the working folder), or a file (or
    a path under one)."""
    if run_dir is None:
        return None
    if not isinstance(run_dir, (str, os.PathLike)):
        raise UsageError(f"run_dir must be a folder path (a str or pathlib.Path), got {type(run_dir).__name__} "
                         f"{run_dir!r}")
    if not str(os.fspath(run_dir)).strip():
        raise UsageError("--run-dir '' names no folder (it would train into the working folder): give a folder "
                         "path, or leave --run-dir out for runs/<name>")
    path = Path(run_dir)
    found = next((p for p in (path, *path.parents) if p.exists()), None)
    if found is not None and not found.is_dir():
        where = "is a file" if found == path else f"is under {found}, a file"
        raise UsageError(f"--run-dir {path} {where}, not a folder: give a folder path")
    return path


def check_choices(settings: object, **choices: Sequence[str]) -> None:
    """Raise :class:`UsageError` for the first of ``settings``' fields named in ``choices`` whose value is not one
    of its choices: the one message, naming them, of every setting that takes a word."""
    for name, allowed in choices.items():
        value = getattr(settings, name)
        if value not in allowed:
            raise UsageError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


@dataclass
class RunSettings:
    """Settings every run has (the ``run`` section)."""

    env: str = "bigfish"
    """``toy``, ``toy-cat`` (the toy with a categorical optimiser), ``toy-deceptive``, a ProcGen game
    (``bigfish``) or a gymnasium id (``CartPole-v1``)."""
    algo: str = "ppo"
    """The Stable-Baselines3 agent a member trains: a name :data:`pbx.members.ALGOS` holds (``python -m pbx.train
    --help`` lists them); toys and registered members train their own."""
    search: str = "PBT"
    """Strategy: a name :data:`pbx.strategies.STRATEGIES` holds, any case (``python -m pbx.train --help`` lists
    them; ``replay`` is a stored schedule, :mod:`pbx.replay`)."""
    selection: str = "truncation"
    """Exploit rule: ``truncation`` (bottom quantile copies top quantile), ``wta`` (all copy the best) or
    ``sigma`` (members below mean - k std copy members above mean + k std)."""
    quantile: float = 0.25
    """Fraction of the population in the top and in the bottom group for truncation selection."""
    sigma_k: float = 1.0
    """``sigma`` selection: leaders score above mean + k std of the population, underperformers below mean - k std."""
    burn_in: int = 0
    """Env steps every member trains before the first exploit (0: exploit from the first round on)."""
    margin_rel: float = 0.0
    """A donor must beat the recipient by more than this fraction of the recipient's absolute score."""
    margin_abs: float = 0.0
    """... and by more than this many score units (0 and 0: any better donor)."""
    tied: str = "keep"
    """A recipient whose donor has exactly its score: ``keep`` going unchanged, or ``explore`` its own config."""
    pop_size: int = 4
    """Number of members (``--batchsize`` in the PB2 code)."""
    t_ready: int | None = None
    """Env steps each member trains between two exploit/explore steps (None: the member's default)."""
    max_budget: int | None = None
    """Env steps each member trains in total (None: the member's default)."""
    seed: int = 0
    """Seeds the strategy's decisions and, derived per member, every member's learner."""
    space: str | None = None
    """Search-space YAML: a path, or a file name under ``search_spaces/`` (None: the member's default)."""
    device: str = "auto"
    """``auto`` (a GPU when there is one), ``cpu`` or ``cuda``."""
    name: str | None = None
    """Run name; the folder is ``runs/<name>`` unless ``--run-dir`` says otherwise."""
    eval_every: int = 1
    """Evaluate the test score every this many rounds (and always in the last round)."""
    runner: str = "auto"
    """``auto`` (MPI when started by an MPI launcher with several ranks, else synchronous), ``sync`` or ``mpi``."""
    comm: str = "p2p"
    """How the MPI runner moves a donor's checkpoint: ``p2p`` (send to each rank that needs it) or
    ``collective`` (one broadcast per donor; suits winner-takes-all)."""
    checkpoint_minutes: float = 5.0
    """Minutes between two saves of a round in progress, by the member training it at a rollout boundary (0:
    none): what a ``kill -9``, which gives no warning, can lose of a round. A signal or a time limit saves anyway
    (:mod:`pbx.runners.stopping`). A bigfish member's save at the shipped setting took 0.04 s and 12.8 MB on a
    2-core CPU (``benchmarks/bench_stops.py``): every 5 minutes, 0.013% of the time."""

    def __post_init__(self) -> None:
        self.algo = self.algo.lower()
        if not 1 <= self.pop_size <= MAX_MEMBERS:
            raise UsageError(f"pop_size must be at least 1 and at most {MAX_MEMBERS:,} members, got {self.pop_size:,}")
        # Checked whatever the selection, so a run whose --selection changes later (a sweep's variant) never
        # holds a value its rule would refuse only then.
        if not 0 < self.quantile <= 0.5:
            raise UsageError(f"quantile must be in (0, 0.5], got {self.quantile}")
        if not self.sigma_k > 0:
            raise UsageError(f"sigma_k must be > 0 (leaders above mean + k std, underperformers below mean - k std; "
                             f"1 is one standard deviation), got {self.sigma_k}")
        check_name(self.name)
        if self.t_ready is not None and self.t_ready <= 0:
            raise UsageError(f"t_ready must be a positive number of steps, got {self.t_ready}")
        if self.max_budget is not None and self.t_ready is not None and self.max_budget < self.t_ready:
            raise UsageError(f"max_budget ({self.max_budget}) must be at least t_ready ({self.t_ready})")
        check_seed(self.seed, "seed")
        if self.eval_every < 1:
            raise UsageError(f"eval_every must be a positive number of rounds, got {self.eval_every}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise UsageError(f"device must be auto, cpu or cuda, got {self.device!r}")
        check_choices(self, runner=RUNNERS, comm=COMM_MODES)
        if not 0 <= self.checkpoint_minutes < float("inf"):  # NaN fails too
            raise UsageError(f"checkpoint_minutes must be a finite number of minutes, 0 or more (0: no saves inside "
                             f"a round), got {self.checkpoint_minutes}")


def parse_override(item: str) -> tuple[str, Any]:
    """``key=value`` of a ``-m`` item, the value read as YAML (``1e-4``, ``true``, ``null``)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"-m takes key=value items, got {item!r} (e.g. -m n_envs=16; "
                         f"the reference code's -mb, -tr, -b, -s, -sd are --max_budget, --t_ready, --batchsize, "
                         f"--search, --seed here)")
    try:
        return key.strip(), yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError as err:  # "env_kwargs={x:" (a mapping a shell split at its space)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UsageError(f"-m {item!r}: the value is not YAML ({problem}); quote an item with spaces, e.g. "
                         f"-m \"env_kwargs={{continuous: true}}\"") from None


def build(cls: type, raw: Mapping[str, Any]) -> Any:
    """Instantiate a settings dataclass from raw (YAML or string) values, coercing to the field types."""
    hints = typing.get_type_hints(cls)
    values = {name: coerce(name, value, hints[name]) for name, value in raw.items()}
    try:
        return cls(**values)
    except TypeError as err:
        raise UsageError(str(err)) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    data = read_yaml(path, "config file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def coerce(name: str, value: Any, hint: Any) -> Any:
    """Convert ``value`` to the type ``hint`` (int, float, str, bool or Optional of one).

    A float must be finite, whichever setting it is: nan slips past a range check written as ``value < low``,
    and inf past one with no upper end, to fail later in training (IPBT's ``step_factor ** restarts``). Each
    settings class checks its own ranges; what no setting ever takes is refused here, once for all of them.
    """
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        hint = next(a for a in args if a is not type(None))
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if hint is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)
        if hint is float:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
            if math.isfinite(number):
                return number
        if hint is str:
            if isinstance(value, (dict, list)):
                raise ValueError
            return str(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int() of an infinite float (1e400)
        raise UsageError(f"{name} must be {getattr(hint, '__name__', hint)}, got {value!r}") from None
    if hint is float:  # the float branch returns finite numbers only
        raise UsageError(f"{name} must be a finite number, got {value!r}")
    return value
