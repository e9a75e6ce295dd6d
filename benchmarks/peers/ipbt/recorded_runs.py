"""The recorded runs that ``decisions.py`` decides on, as pbx's history and as the authors' bookkeeping.

Both sides must decide on the same events: pbx's strategy reads a history frame, the authors' functions their
``data`` and ``df_idx_at_restart``. A pbx run's history is converted to the latter (:func:`authors_records`); a
reference run's own records are converted to the former (:func:`reference_history`), and converting that back
must give its records row for row (:func:`converter_check`): the check that the authors' code is given what it
would have recorded. pbx's strategy is built from a run's stored settings (:func:`pbx_strategy`), so a table made
from a history is made at the settings that history ran with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pbx.history import History, Row, read_csv, restart_marks
from pbx.plan import Rules
from pbx.settings import RunSettings, build
from pbx.space import Space
from pbx.strategies import ExploitRules, RunContext, make_selection, strategy_class
from pbx.strategies.generational.base import Generational

COLUMNS = ["Trial", "Time", "lr", "Reward", "config_source", "n_distills"]
"""The authors' ``self.data`` (``algo/ipbt.py``, ``algo/bgpbt.py``) for a one-hyperparameter space."""


@dataclass
class Recorded:
    """A recorded run, pbx's or the reference's, as both sides' decisions read it: pbx's history frame and the
    strategy of its settings, and the authors' bookkeeping after any round (:meth:`authors_at`)."""

    name: str
    algo: str
    frame: pd.DataFrame
    strategy: Generational
    space: Space
    ends: list[int]
    """Each round's nominal end in env steps, a larger round counted at its cost (the reference's ``Time``)."""
    reference: tuple[pd.DataFrame, pd.DataFrame, list[int], list[dict[int, str]]] | None = None
    """A reference run's own ``data``, ``df_idx_at_restart``, the row of ``data`` that ends each round's scores
    and each round's member -> trial (:func:`reference_history`); None for a pbx run."""

    def authors_at(self, upto: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, str]]:
        """The authors' ``data`` and ``df_idx_at_restart`` after round ``upto``, and each member's trial then: a
        reference run's own records, cut there; a pbx run's converted (:func:`authors_records`)."""
        if self.reference is None:
            return authors_records(self, upto)
        data, df_idx, last_row, trial_of = self.reference
        cut = data.iloc[:last_row[upto] + 1]
        return cut.reset_index(drop=True), df_idx[df_idx["Trial"].astype(int) < len(set(cut["Trial"]))], trial_of[upto]


def pbx_strategy(config: dict) -> tuple[Generational, Space, Rules]:
    """The run's strategy as ``RunConfig.build_strategy`` builds it, from the stored settings (``pbx.config``
    imports the environments, which the reference's environment lacks); the toy's prior is its ``init_sample``."""
    import toy_plain

    run = build(RunSettings, config["run"])
    cls = strategy_class(run.search)
    settings = build(cls.settings_cls, config["strategy"])
    space = Space.from_dict(config["space"])
    rules = Rules(run.max_budget, run.t_ready, run.pop_size, cls.initial_size(settings, run.pop_size),
                  cls.restart_size(settings, run.pop_size), cls.round_growth(settings), cls.last_rounds(settings))
    selection = make_selection(run.selection, run.quantile, run.sigma_k,
                               ExploitRules(run.burn_in, run.margin_rel, run.margin_abs, run.tied))
    prior = toy_plain.ToyPlainMember.prior(build(toy_plain.ToyPlainSettings, config.get("member") or {}), space)
    strategy = cls(settings, selection, RunContext(rounds=rules.fixed_rounds, pop_size=run.pop_size, rules=rules,
                                                   prior=prior))
    return strategy, space, rules


def load(folder: Path) -> Recorded:
    config = yaml.safe_load((folder / "config.yaml").read_text())
    path = folder / "history.csv"
    frame = read_csv(path if path.exists() else folder / "history.csv.gz")
    strategy, space, rules = pbx_strategy(config)
    ends = rules.plan(restart_marks(frame)).nominal_ends
    return Recorded(f"{config['run']['search']} s{config['run']['seed']}", config["run"]["search"], frame, strategy,
                    space, ends)


def read_record(folder: Path, name: str, **kwargs) -> pd.DataFrame:
    """A run's csv record, plain or gzipped (as ``--commit-to`` keeps it)."""
    plain = folder / name
    return pd.read_csv(plain if plain.exists() else folder / f"{name}.gz", **kwargs)


def reference_history(folder: Path, templates: Path) -> Recorded:
    """A reference run (``run_side_by_side.py``'s folder: ``data.csv``, IPBT's ``df_idx_at_restart.csv``) as
    pbx's history and the authors' own records; pbx's strategy from ``templates/<ALGO>/s0/config.yaml``, a pbx
    run's of the same algorithm.

    The authors' ``data`` holds, per generation, the kept members' scores before its first round (new trials),
    then per round every member's score in slot order, each followed by the rows of that round's explores (a
    new trial at its donor's time and score). A member is a slot; an explored slot's parent is the slot whose
    score its explore row carries; a generation's first round is a restart round (its candidates that the cut
    dropped are not recorded: pbx's cut keeps the rest, as it would). Each round's steps are pbx's plan's."""
    algo = "IPBT" if (folder / "ipbt_state.yaml").exists() else "BGPBT"
    data = read_record(folder, "data.csv", float_precision="round_trip", dtype={"Trial": str})
    df_idx = (read_record(folder, "df_idx_at_restart.csv", dtype=str) if algo == "IPBT" else
              pd.DataFrame(columns=["Trial", "Source"]))
    seen: set[str] = set()
    rounds: list[dict] = []
    i = 0
    while i < len(data):
        generation, t0 = int(data["n_distills"].iloc[i]), data["Time"].iloc[i]
        starts = {}
        while i < len(data) and data["Trial"].iloc[i] not in seen and data["Time"].iloc[i] == t0 and \
                int(data["n_distills"].iloc[i]) == generation:
            seen.add(data["Trial"].iloc[i])
            starts[data["Trial"].iloc[i]] = float(data["Reward"].iloc[i])
            i += 1
        slots, donors, first = list(starts), {}, True
        while i + len(slots) <= len(data) and int(data["n_distills"].iloc[i]) == generation:
            block = data.iloc[i:i + len(slots)]
            if not set(block["Trial"]) <= set(slots) | set(donors):  # each explore's trial takes its recipient's slot
                raise ValueError(f"{folder}: row {i} does not start a round of the trials {slots}")
            slots, i = block["Trial"].tolist(), i + len(slots)
            rounds.append({"block": block, "last": i - 1, "start": first, "starts": starts if first else {}})
            first, donors = False, {}
            while i < len(data) and data["Trial"].iloc[i] not in seen and int(data["n_distills"].iloc[i]) == generation:
                seen.add(data["Trial"].iloc[i])
                donors[data["Trial"].iloc[i]] = block["Reward"].tolist().index(data["Reward"].iloc[i])
                i += 1
            rounds[-1]["explores"] = donors
    config = yaml.safe_load((templates / algo / "s0" / "config.yaml").read_text())
    strategy, space, rules = pbx_strategy(config)
    marks = [r["start"] and k > 0 for k, r in enumerate(rounds)]
    plan = rules.plan(marks)
    times = [int(r["block"]["Time"].iloc[0]) for r in rounds]
    if times != plan.nominal_ends[:len(times)]:
        raise ValueError(f"{folder}: the reference's round ends {times[:5]}... are not pbx's plan's")
    rows, trial_of, previous = [], [], None
    for k, r in enumerate(rounds):
        block = r["block"]
        best = int(np.argmax(previous["block"]["Reward"].to_numpy(float))) if previous is not None else 0
        for slot, (trial, lr, score) in enumerate(zip(block["Trial"], block["lr"], block["Reward"])):
            if r["start"]:
                parent, explored = (slot if algo == "BGPBT" or k == 0 else best), k > 0
            elif trial in previous["explores"]:
                parent, explored = previous["explores"][trial], True
            else:
                parent, explored = previous["block"]["Trial"].tolist().index(trial), False
            rows.append(Row(slot, k, plan.trained_ends[k], 0.0, float(score), float("nan"), parent, explored,
                            {"lr": float(lr)}, restart=marks[k], start_score=r["starts"].get(trial, float("nan"))))
        trial_of.append(dict(enumerate(block["Trial"])))
        previous = r
    frame = History(space.names).with_rows(rows).frame
    return Recorded(f"reference {algo} {folder.name}", algo, frame, strategy, space, plan.nominal_ends,
                    (data, df_idx, [r["last"] for r in rounds], trial_of))


def converter_check(rec: Recorded) -> str:
    """Whether :func:`authors_records`, given a reference run as pbx's history, rebuilds that run's own ``data``
    and ``df_idx_at_restart`` (after its last round, row for row)."""
    if rec.reference is None:
        return ""
    last = int(rec.frame["round"].max())
    own, own_idx, _ = rec.authors_at(last)
    rebuilt, rebuilt_idx, _ = authors_records(rec, last)
    if own.shape != rebuilt.shape:
        return f"rebuilt {len(rebuilt)} rows of its {len(own)}"
    differ = np.flatnonzero(~(own.astype(str).to_numpy() == rebuilt.astype(str).to_numpy()).all(axis=1))
    idx_same = rec.algo != "IPBT" or own_idx.astype(str).equals(rebuilt_idx.astype(str))
    return (f"rebuilds its {len(own)} rows" + ("" if rec.algo != "IPBT" else " and its sources")
            if not len(differ) and idx_same else f"differs from row {differ[0] if len(differ) else 'of the sources'}")


def authors_records(rec: Recorded, upto: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[int, str]]:
    """The authors' ``data`` and ``df_idx_at_restart`` after round ``upto`` of ``rec``, and each member's trial id
    then: what their code records for the same events (``_schedule_all_populations``, ``update_bayesian_dataset``,
    ``_exploit_and_explore``).

    A generation's first round (round 0, a restart round) records, for the candidates its cut keeps (the best
    ``pop_size`` by score; all of them at BG-PBT's restart, which keeps its population), each one's score before the
    round as a new trial at the generation's start (BG-PBT's at ``Time`` 0, as its code writes it), then the round's
    scores. A later round records an explored member as a new trial at its donor's last time and score, then every
    member's score. ``Time`` is the round's nominal end, a larger round counted at its cost, as the authors' ``t_step``
    is multiplied for it.

    ``n_distills`` counts the generations and, in BG-PBT, the trust region's collapses (its ``_restart``, after
    which the round's explores find no data of the new count and draw from the prior, ``'random'``): a round that
    begins a BO segment of pbx's (:meth:`~pbx.strategies.generational.trust_region.TrustRegionBO.segments`) moves
    it on (a collapse in the round before a restart moves it twice, as the reference's ``_restart`` and its global
    restart each do)."""
    pop_size = rec.strategy.pop_size
    segment = rec.strategy.segments(rec.frame)
    rows: list[list] = []
    sources: list[list[str]] = []
    trial_of: dict[int, str] = {}
    for r in range(upto + 1):
        generation = int(segment[r])
        round_rows = rec.frame[rec.frame["round"] == r].sort_values("member")
        members = round_rows["member"].astype(int).tolist()
        scores = round_rows["score"].to_numpy(float)
        lrs = round_rows["lr"].to_numpy(float)
        start = r == 0 or bool(round_rows["restart"].iloc[0])
        end = rec.ends[r]
        if start:
            t_start = 0 if r == 0 or rec.algo == "BGPBT" else rec.ends[r - 1]
            kept = set(np.argsort(scores)[-pop_size:].tolist()) if len(members) > pop_size else set(range(len(members)))
            new: dict[int, str] = {}
            for i in sorted(kept):
                trial = str(len(sources))
                sources.append([trial, trial])
                rows.append([trial, t_start, lrs[i], float(round_rows["start_score"].iloc[i]),
                             "random" if r == 0 else "bo", generation])
                new[members[i]] = trial
            trial_of = new
            rows += [[new[members[i]], end, lrs[i], scores[i], "bo", generation] for i in sorted(kept)]
            continue
        before = rec.frame[rec.frame["round"] == r - 1].set_index("member")["score"]
        collapsed = bool(segment[r] != segment[r - 1])
        new = {}
        for i, m in enumerate(members):
            parent = int(round_rows["parent"].iloc[i])
            if bool(round_rows["explored"].iloc[i]):
                trial = str(len(sources))
                sources.append([trial, sources[int(trial_of[parent])][1]])
                rows.append([trial, rec.ends[r - 1], lrs[i], float(before[parent]), "random" if collapsed else "bo",
                             generation])
                new[m] = trial
            else:
                new[m] = trial_of[parent]
        trial_of = new
        rows += [[new[m], end, lrs[i], scores[i], "bo", generation] for i, m in enumerate(members)]
    data = pd.DataFrame(rows, columns=COLUMNS)
    data["Trial"] = data["Trial"].astype(str)
    return data, pd.DataFrame(sources, columns=["Trial", "Source"]), trial_of

