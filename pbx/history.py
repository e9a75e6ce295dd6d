"""The population's memory: one row per (member, round), the single source of truth.

Row ``(m, r)`` describes member ``m``'s training in round ``r``:

- ``steps``: the member's cumulative env steps at the end of the round;
- ``wall_s``: seconds since the run started, when the round ended;
- ``score`` / ``test_score``: train and held-out score at the end of the round (no test score for
  members whose scores are not results: FIRE's parent sub-populations and evaluators)
  (``NaN`` when unknown, see the NaN policy in :mod:`pbx.strategies.selection`);
- ``score100``: the mean return of the member's last 100 finished training episodes at the end of the
  round, whenever they started (:meth:`pbx.members.Member.recent_score`): the number train-procgen logs as
  ``eprewmean``, to set beside published curves. Selection never reads it (``score`` counts only the
  round's own episodes); NaN for members without episodes (the toys) and for a diverged member;
- ``start_score``: the train score of the state the member started the round from, taken before it trained
  (:meth:`pbx.members.Member.score_state`), in a generation's first round (round 0, a restart round) of a
  strategy that asks for it (:meth:`pbx.strategies.Strategy.scores_start`: BG-PBT's and IPBT's GP learns from
  the improvement on it); NaN in every other row;
- one column per hyperparameter: the config used *during* the round;
- ``parent``: the member whose state ``m`` started the round from (``m`` itself
  unless it copied a donor after round ``r - 1``);
- ``explored``: whether the config was changed at the start of the round;
- ``role``: the member's part in the population (:meth:`pbx.strategies.Strategy.roles`):
  ``pop1`` for a member that is a result (every member of most strategies), FIRE's
  ``pop2``, ``pop3``, ... for its parent sub-populations and ``eval`` for its
  evaluators, whose scores are never results (:func:`results`);
- ``carried``: whether ``score`` is carried over from the round before: the member's state was last scored
  so (its own row, or its donor's after a copy). Either no training episode both started and ended in the
  round (a policy whose episodes outlast the round, say CartPole's 500 steps), or the member skipped the
  round, having begun it at or past the round's planned end (a rollout longer than ``t_ready``:
  :meth:`pbx.config.RunConfig.steps_due`). The steps tell the two apart, so the column keeps one meaning
  for every reader (no score of the round's own): a skipped row's ``steps`` are its parent's of the round
  before, while a round that trained always adds steps. A member that diverged scores NaN instead, the
  worst (see the NaN policy); a skipped one carries its state's score whatever it was, NaN included;
- ``restart``: whether the round began a new generation of the population (IPBT, BG-PBT: every member's
  state or config was re-made after round ``r - 1``); a strategy whose round length grows with restarts
  (IPBT) trains it, and every round after it, at the new length (:mod:`pbx.plan`).

A strategy that starts with a larger population than it keeps (BG-PBT x3, IPBT x2:
:meth:`pbx.strategies.Strategy.initial_size`) has that many rows in round 0, and one that trains extra
candidates at a restart (IPBT) that many in each restart round; every other round has ``pop_size``
(:meth:`pbx.plan.Rules.size`).

The scores each member took *within* a round (its curve) are kept beside the
history, in ``curves.csv`` (:mod:`pbx.curves`), and travel with it: :attr:`History.curves`.

So an exploit decided after round ``r`` shows up in row ``(m, r + 1)``. PB2 reads
improvement rates straight off this table, reports draw lineages from it, and
``--resume`` rebuilds a run from it.

:class:`History` is the read-only view strategies and reports get;
:class:`HistoryLog` is the append-only CSV writer the runners own.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from pbx.curves import CURVES_FILE, CurveLog, Point, points_frame
from pbx.errors import UsageError
from pbx.files import append_csv, write_csv
from pbx.space import Categorical, Integer, Space, Value

BASE_COLUMNS = ["member", "round", "steps", "wall_s", "score", "test_score", "score100", "start_score", "parent",
                "explored", "role", "carried", "restart"]
RESULT_ROLE = "pop1"
"""The role of members whose scores are results: the best member, the report and replays consider these only."""
EVALUATOR_ROLE = "eval"
"""FIRE's evaluators: they train one sub-population's weights with another's config to compare the two."""
_ADDED = {"role": ("explored", RESULT_ROLE), "carried": ("role", "False"), "score100": ("test_score", "nan"),
          "restart": ("carried", "False"), "start_score": ("score100", "nan")}
"""Columns a later pbx added, for reading older files: the column each follows, and the value every row then had
(every member was a result; no score was carried; no running mean was kept; no population restarted; no state
was scored before its round)."""
_INT_COLUMNS = ("member", "round", "steps", "parent")
_FLOAT_COLUMNS = ("wall_s", "score", "test_score", "score100", "start_score")


@dataclass(frozen=True)
class Row:
    """One member's result for one round (see the module docstring for the meaning of each field)."""

    member: int
    round: int
    steps: int
    wall_s: float
    score: float
    test_score: float
    parent: int
    explored: bool
    config: Mapping[str, Value]
    role: str = RESULT_ROLE
    carried: bool = False
    curve: tuple[Point, ...] = ()
    """The scores taken within the round (:mod:`pbx.curves`), finite ones only."""
    score100: float = math.nan
    restart: bool = False
    start_score: float = math.nan

    def as_record(self, hp_names: Sequence[str]) -> dict[str, object]:
        record: dict[str, object] = {
            "member": self.member, "round": self.round, "steps": self.steps, "wall_s": self.wall_s,
            "score": self.score, "test_score": self.test_score, "score100": self.score100,
            "start_score": self.start_score, "parent": self.parent,
            "explored": self.explored, "role": self.role, "carried": self.carried, "restart": self.restart,
        }
        record.update({name: self.config[name] for name in hp_names})
        return record


class History:
    """A read-only table of rows, as a pandas DataFrame plus the queries strategies need, and the curves
    within its rounds (``curves``: one row per point, :mod:`pbx.curves`; empty for a history kept without)."""

    def __init__(self, hp_names: Sequence[str], frame: pd.DataFrame | None = None,
                 curves: pd.DataFrame | None = None) -> None:
        self.hp_names = list(hp_names)
        self.frame = frame if frame is not None else _empty_frame(self.hp_names)
        self.curves = curves if curves is not None else points_frame()

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def last_round(self) -> int:
        """The last finished round, or -1 before the first."""
        return int(self.frame["round"].max()) if len(self.frame) else -1

    def round(self, r: int) -> pd.DataFrame:
        """Rows of round ``r``, one per member, sorted by member."""
        return self.frame[self.frame["round"] == r].sort_values("member").reset_index(drop=True)

    def latest(self) -> pd.DataFrame:
        return self.round(self.last_round)

    def config_of(self, row: pd.Series) -> dict[str, Value]:
        """The hyperparameters of a row, as plain Python values."""
        return {name: _plain(row[name]) for name in self.hp_names}

    def with_rows(self, rows: Sequence[Row]) -> History:
        """A new history with ``rows`` appended (the original is unchanged)."""
        # object columns keep each value as given (pandas would turn a None choice into NaN)
        new = pd.DataFrame([r.as_record(self.hp_names) for r in rows], columns=self.frame.columns, dtype=object)
        points = points_frame(_points(rows))
        curves = points if not len(self.curves) else pd.concat([self.curves, points], ignore_index=True)
        typed = _typed(new)
        if not len(self.frame):
            return History(self.hp_names, typed, curves)
        if all(a == b for a, b in zip(typed.dtypes, self.frame.dtypes)):
            # each column's type is what typing the whole would give (its values' kinds did not change): only
            # the new rows are typed, not the whole history again each round
            return History(self.hp_names, pd.concat([self.frame, typed], ignore_index=True), curves)
        # both sides as objects: pandas 2 warns when an all-NaN column of ``new`` meets a typed one
        frame = pd.concat([self.frame.astype(object), new], ignore_index=True)
        return History(self.hp_names, _typed(frame), curves)


class HistoryLog:
    """The append-only ``history.csv`` of a run: every round flushed and fsynced as it finishes.

    A round is on disk only when every one of its rows (``sizes(round, restart)`` of them) is, each ending
    in a newline: on reopen a torn last line (a kill inside a write, even inside its
    last field) and a last round with fewer rows than members are dropped, and the
    file is rewritten to hold exactly the rounds kept. The rows' curves go to
    ``curves.csv`` beside it (:class:`pbx.curves.CurveLog`), each round's before its rows.
    """

    def __init__(self, path: Path, space: Space, pop_size: int,
                 sizes: Callable[[int, bool], int] | None = None) -> None:
        self.path = Path(path)
        self.space = space
        self.pop_size = pop_size
        self.sizes = sizes
        self.columns = BASE_COLUMNS + space.names
        frame = None
        if self.path.exists():
            frame = self._read_complete_rounds()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_csv(self.path, [self.columns])
        last = int(frame["round"].max()) if frame is not None and len(frame) else -1
        self.curves = CurveLog(self.path.with_name(CURVES_FILE), last)
        self.history = History(space.names, frame, self.curves.frame)

    def append(self, rows: Sequence[Row]) -> History:
        """Append one finished round (its curves first); it is on disk when this returns."""
        self.curves.append(_points(rows))
        append_csv(self.path, [_csv_fields(r.as_record(self.history.hp_names), self.columns) for r in rows])
        self.history = self.history.with_rows(rows)
        return self.history

    def _read_complete_rounds(self) -> pd.DataFrame:
        """Read the file, dropping a torn last line or a partly written last round (a kill mid-write)."""
        frame = read_csv(self.path, self.space)
        if list(frame.columns) != self.columns:
            raise UsageError(f"{self.path}: columns {list(frame.columns)} do not match the run's {self.columns}")
        frame = complete_rounds(frame, self.pop_size, name=str(self.path), sizes=self.sizes)
        # Rewrite so the file holds exactly the rounds we keep; later appends then follow whole rounds.
        write_csv(self.path, [self.columns] + [_csv_fields(rec, self.columns) for rec in frame.to_dict("records")])
        return frame


def _points(rows: Sequence[Row]) -> list[tuple[int, int, int, float]]:
    return [(r.member, r.round, steps, score) for r in rows for steps, score in r.curve]


def complete_rounds(frame: pd.DataFrame, pop_size: int | None = None, name: str = "history",
                    sizes: Callable[[int, bool], int] | None = None) -> pd.DataFrame:
    """Drop a last round with fewer rows than members (a run killed, or still writing, mid-round).

    ``pop_size`` is the run's population and ``sizes(round, restart)`` the members each round trains
    (:meth:`pbx.plan.Rules.size`; None: ``pop_size`` in every round). Without ``pop_size`` (a
    report of a folder whose config says nothing else) the members seen in the file count, round 0 and restart
    rounds apart. An earlier round that is not whole means the file was damaged, not torn: that is an error.
    """
    if not len(frame):
        return frame.reset_index(drop=True)
    counts = frame.groupby("round")["member"].nunique()
    restarts = frame.groupby("round")["restart"].first() if "restart" in frame else counts.astype(bool) & False
    if sizes is not None:
        expected = pd.Series([sizes(int(r), bool(restarts[r])) for r in counts.index], index=counts.index)
    elif pop_size is not None:
        expected = pd.Series(pop_size, index=counts.index)
    else:  # no config to say: each kind of round (the first, a restart, any other) holds as many as its largest
        kinds = pd.Series([f"{int(r) > 0}-{bool(restarts[r])}" for r in counts.index], index=counts.index)
        expected = counts.groupby(kinds).transform("max")
    last = int(frame["round"].max())
    if counts[last] < expected[last]:
        frame = frame[frame["round"] < last]
        counts, expected = counts.drop(last), expected.drop(last)
    broken = counts[counts != expected]
    if len(broken) or (len(counts) and list(counts.index) != list(range(len(counts)))):
        raise UsageError(f"{name}: rounds {list(broken.index) or 'numbering'} do not hold their members once each "
                         f"({pop_size if pop_size is not None else 'the'} population, round 0's and restarts' "
                         f"candidates): the file is damaged (restore it, or start a new run)")
    return frame.reset_index(drop=True)


def restart_marks(frame: pd.DataFrame) -> list[bool]:
    """Each round's ``restart`` mark, oldest first (the rounds' plan is built on them: :mod:`pbx.plan`)."""
    return [bool(v) for v in frame.groupby("round", sort=True)["restart"].first()] if len(frame) else []


def steps_trained(frame: pd.DataFrame) -> int:
    """Env steps the rows' rounds trained over all members: each row's steps less those of the row it began the
    round from (its parent's of the round before; none in round 0), so a candidate that reuses an id, or a
    member that copied a donor, counts what it trained itself."""
    if not len(frame):
        return 0
    before = frame[["member", "round", "steps"]].rename(columns={"member": "parent", "steps": "before"})
    merged = frame[["parent", "round", "steps"]].merge(before.assign(round=before["round"] + 1),
                                                       on=["parent", "round"], how="left")
    return int((merged["steps"] - merged["before"].fillna(0)).sum())


def skipped(frame: pd.DataFrame) -> pd.Series:
    """Whether each row is of a round its member skipped (:meth:`pbx.config.RunConfig.steps_due`): its score
    carried and its steps its parent's of the round before (a round that trained always adds steps), so its
    state, and the score it carries, are exactly its parent's then."""
    before = frame[["member", "round", "steps"]].rename(columns={"member": "parent", "steps": "before"})
    before = before.assign(round=before["round"] + 1)
    merged = frame[["parent", "round"]].merge(before, on=["parent", "round"], how="left")
    same = merged["before"].to_numpy(float) == frame["steps"].to_numpy(float)
    return pd.Series(frame["carried"].to_numpy(bool) & same, index=frame.index)


def read_csv(path: Path | str, space: Space | None = None) -> pd.DataFrame:
    """Read a ``history.csv`` exactly as written.

    Floats round-trip bit for bit and, given the run's ``space``, categorical
    values come back as the choices they were (``None``, ``"NA"``, ``1``), not as
    pandas' guesses (NaN, ``"1"``). A last line without its newline is a write
    still in progress (a report of a live run) or torn by a kill, and is left
    out; any other row that does not hold one parsable field per column means the
    file is damaged. A ``.gz`` path is read through gzip (a committed record kept
    compressed, such as ``history.csv.gz``).
    """
    try:
        text = (gzip.decompress(Path(path).read_bytes()).decode() if str(path).endswith(".gz")
                else Path(path).read_text())
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: not a readable pbx history file ({err})") from None
    rows = list(csv.reader(io.StringIO(text[:text.rfind("\n") + 1])))
    missing = [c for c in BASE_COLUMNS if c not in _ADDED and c not in (rows[0] if rows else [])]
    if missing:
        raise UsageError(f"{path}: not a pbx history file (missing columns {missing})")
    header, body = rows[0], rows[1:]
    for column, (after, value) in _ADDED.items():  # a file written before the column: its value then
        if column not in header:
            at = header.index(after) + 1
            header = [*header[:at], column, *header[at:]]
            body = [[*row[:at], value, *row[at:]] for row in body]
    for number, row in enumerate(body, start=1):
        if len(row) != len(header):
            raise UsageError(f"{path}: row {number} has {len(row)} fields, not {len(header)}: the file is damaged "
                             f"(restore it, or start a new run)")
    try:
        return _typed(pd.DataFrame(body, columns=header, dtype=object), space)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path}: a value does not parse ({err}); the file is damaged") from None


def _typed(frame: pd.DataFrame, space: Space | None = None) -> pd.DataFrame:
    """Columns as their types; text columns (a file just read) are parsed exactly (``float(repr(x)) == x``)."""
    frame = frame.copy()
    for col in _INT_COLUMNS:
        frame[col] = frame[col].astype(np.int64)
    for col in _FLOAT_COLUMNS:
        # an empty field is NaN, as pandas writes it (a history saved back with DataFrame.to_csv)
        frame[col] = frame[col].replace("", "nan").astype(np.float64)
    frame["explored"] = frame["explored"].map(_bool).astype(bool)
    frame["carried"] = frame["carried"].map(_bool).astype(bool)
    frame["restart"] = frame["restart"].map(_bool).astype(bool)
    frame["role"] = frame["role"].astype(str)
    for col in frame.columns[len(BASE_COLUMNS):]:
        if pd.api.types.is_numeric_dtype(frame[col]) or pd.api.types.is_bool_dtype(frame[col]):
            continue
        param = space.params.get(col) if space is not None else None
        if isinstance(param, Categorical):
            choices = {str(c): c for c in param.choices}
            unknown = sorted(set(frame[col].map(str)) - set(choices))
            if unknown:
                raise ValueError(f"{col} takes {unknown}, not among its choices {list(param.choices)}")
            frame[col] = pd.Series([choices[str(v)] for v in frame[col]], index=frame.index, dtype=object)
        elif isinstance(param, Integer):
            frame[col] = _whole_column(frame[col], col)
        elif param is not None:
            frame[col] = frame[col].astype(np.float64)
        else:
            frame[col] = _untyped_column(frame[col].astype(object))
    return frame


def _whole_column(values: pd.Series, name: str) -> pd.Series:
    """An integer parameter's column as int64, so a config read back (a resume, a replay) holds ``512``, as the
    run's members were given, not ``512.0``."""
    numbers = values.astype(np.float64)
    fractional = numbers[~numbers.map(float.is_integer)]
    if len(fractional):
        raise ValueError(f"{name} is an integer parameter, but takes {fractional.iloc[0]!r}")
    return numbers.astype(np.int64)


def _untyped_column(values: pd.Series) -> pd.Series:
    """A hyperparameter column with no space to say its type: numbers of one kind become a numeric
    column, anything else (mixed choices, ``None``) stays as the Python values it holds."""
    kinds = {type(v) for v in values}
    if kinds == {str}:  # text just read from a file: floats parse exactly (float(repr(x)) == x)
        try:
            return values.astype(np.float64)
        except ValueError:
            return values
    if kinds and (kinds <= {float, np.float64} or kinds <= {int, np.int64}):
        return pd.to_numeric(values)
    return values


def _bool(value: object) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value not in ("True", "False"):  # text read from a file: exactly what _format writes
        raise ValueError(f"explored, carried and restart take True or False, not {value!r}")
    return value == "True"


def _empty_frame(hp_names: Sequence[str]) -> pd.DataFrame:
    return _typed(pd.DataFrame(columns=BASE_COLUMNS + list(hp_names)))


def _csv_fields(record: Mapping[str, object], columns: Sequence[str]) -> list[str]:
    return [_format(record[c]) for c in columns]


def _format(value: object) -> str:
    # repr() of a float is its shortest exact form, so a resumed run reads back the same bits.
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (float, np.floating)):
        return "nan" if math.isnan(value) else repr(float(value))
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


def _plain(value: object) -> Value:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value  # type: ignore[return-value]
