"""A side-by-side study's runs, read from their folders (``run_side_by_side.py --dir``, or their committed
small files): each run's answers, restarts and clocks, on both sides read the same way (``compare.py``'s tables
are made of them).

**The reference is the authors' code only.** A reference run that stopped with an error (its marker's
``crash``) has no score: :class:`Crash` keeps where it stopped. A reference run that went through the harness's
flat-generation guard (``reference-guarded``, or an older marker with ``flat_guards`` above 0: pbx's rule
decided its restarts after a flat generation) counts as a side of its own, never as the reference.

A record's large files may be committed gzipped (``history.csv.gz``, ``history_fitness.yaml.gz``): each is read
from the plain file where there is one, else from its ``.gz``.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from anytime import Rounds, log_distance, pbx_rounds, reference_rounds

from pbx.history import read_csv
from pbx.standings import generation_ends, member_row


SIDES = ("pbx", "reference")
GUARDED = "reference-guarded"
"""Reference runs whose restarts after a flat generation pbx's rule decided (the harness's guard): apart."""
ALGOS = ("BGPBT", "IPBT")
TOYS = ("toy-plain", "toy-deceptive-zoo", "toy-plain-noisy")
NOISY = frozenset({"toy-plain-noisy"})
"""Toys whose strategies see noisy scores: their answers are read by the noise-free score."""
TRUE_SCORES = "true_fitness.jsonl"
"""The noisy toy's reference record of each call's noise-free and observed score (``reference.TRUE_SCORES``)."""
ANSWERS = {"final": "final population best", "ends": "generation-end best"}
"""The answers every toy reports, each read as its log distance to the optimum."""
ANYTIME = {"area": "area over the budget", "budget": "budget to the threshold"}
"""The measures of the whole run (:mod:`anytime`), where both sides record every member's noise-free score."""

@dataclass(frozen=True)
class Run:
    final: float
    """The best score of the last round's members."""
    ends: float
    """The best of that and of each generation's best at its last round (the reference's answer)."""
    restarts: int
    wall_s: float
    """The whole process, from the runner's marker."""
    own_s: float
    """The run's own clock: pbx's last ``wall_s``, the reference's ``runtime.yaml``."""
    restart_at: tuple[int, ...] = ()
    """The budget spent when each restart began (its generation's last round's end)."""
    flat_guards: int = 0
    """A guarded reference run's flat generations, where the launcher's guard answered for the authors' smoother
    (which stops with a traceback there; ``reference.GUARDED_LAUNCHER``)."""
    rounds: Rounds | None = None
    """Its rounds' best noise-free scores on the budget's clock (:mod:`anytime`), where both sides record them."""

    def measure(self, name: str) -> float:
        """``name`` on the comparison's scale: an answer's log distance, the area, or the budget's share."""
        if name in ANSWERS:
            return float(log_distance(np.array([getattr(self, name)]))[0])
        assert self.rounds is not None, f"{name} needs the rounds' noise-free scores"
        return self.rounds.area() if name == "area" else self.rounds.budget_to_threshold()


@dataclass(frozen=True)
class Crash:
    """A reference run that stopped with an error: a finding of the authors' code, with no score."""

    error: str
    frame: str
    last_tick: int | None
    wall_s: float


def record(folder: Path, name: str) -> Path:
    """``folder / name``, or its gzipped copy ``name.gz`` where only that is there (a committed record)."""
    plain = folder / name
    packed = folder / f"{name}.gz"
    return packed if not plain.exists() and packed.exists() else plain


def record_text(folder: Path, name: str) -> str:
    path = record(folder, name)
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def pbx_run(folder: Path, marker: dict, noisy: bool) -> Run:
    """A pbx run's answers: the members its scores pick, read by their score, or on a noisy toy by their
    noise-free test score."""
    frame = read_csv(record(folder, "history.csv"))
    column = "test_score" if noisy else "score"
    config = yaml.safe_load(record_text(folder, "config.yaml"))
    rounds = pbx_rounds(frame, config)  # its plan's round ends date the restarts on every toy
    return Run(float(member_row(frame, "best")[column]), float(member_row(frame, "kept")[column]),
               len(generation_ends(frame)), marker["wall_s"], float(frame["wall_s"].max()),
               tuple(int(rounds.ends[r]) for r in generation_ends(frame)), rounds=rounds if noisy else None)


def reference_run(folder: Path, marker: dict, noisy: bool) -> Run:
    """A reference run's answers (see the module's docstring); on a noisy toy by their noise-free scores."""
    histories = yaml.safe_load(record_text(folder, "history_fitness.yaml"))
    final = max(float(h[-1][1]) for h in histories)
    info = yaml.safe_load(record_text(folder, "best_info.yaml"))
    answer = float(info["test"] if noisy else info["fitness"])
    if noisy:
        final = true_score(folder, final)
    restart_at = tuple(sorted(int(p.stem.rsplit("_", 1)[1]) for p in folder.glob("best_info_*.yaml")))
    rounds = (reference_rounds(record_text(folder, TRUE_SCORES), yaml.safe_load(record_text(folder, "config.yaml")))
              if noisy else None)
    return Run(final, answer, len(restart_at), marker["wall_s"],
               float(yaml.safe_load(record_text(folder, "runtime.yaml"))), restart_at, int(marker.get("flat_guards", 0)),
               rounds)


def true_score(folder: Path, observed: float) -> float:
    """The noise-free score of the last round's member whose observed score is ``observed`` (the reference's
    ``true_fitness.jsonl``: each training call of the round that ends at the run's end)."""
    calls = [json.loads(line) for line in record_text(folder, TRUE_SCORES).splitlines() if line.strip()]
    trained = [c for c in calls if not c["eval"]]
    end = max(c["t"] + c["t_step"] for c in trained)
    match = [c["true"] for c in trained if c["t"] + c["t_step"] == end and c["observed"] == observed]
    if len(match) != 1:
        raise ValueError(f"{folder}: {len(match)} calls of the last round observed {observed!r} in {TRUE_SCORES}")
    return float(match[0])


Runs = dict[str, dict[str, dict[str, dict[int, "Run | Crash"]]]]
"""toy -> side (``pbx``, ``reference``, ``reference-guarded``, ``pbx-<arm>``) -> algorithm -> seed -> run, or
the crash of a reference run (:func:`crashes`; every other reader skips them)."""


def side_of(folder_side: str, info: dict) -> str:
    """The side a run counts as: a reference run through the flat-generation guard is ``reference-guarded``
    whichever folder holds it (older markers say so only by their count)."""
    guarded = info.get("guarded", False) or int(info.get("flat_guards", 0)) > 0
    return GUARDED if folder_side in ("reference", GUARDED) and guarded else folder_side


def load(*roots: Path, seeds: int | None = None) -> Runs:
    """Every run whose marker says it finished, and every reference run that crashed, under any of ``roots``
    (a run found under two is an error); ``seeds``: those of seeds 0 .. seeds - 1 only."""
    runs: Runs = {}
    for root in roots:
        for marker in sorted(root.glob("*/*/*/s*.json")):
            if seeds is not None and int(marker.stem[1:]) >= seeds:
                continue
            algo_dir = marker.parent
            folder_side, toy = algo_dir.parent.name, algo_dir.parent.parent.name
            info = json.loads(marker.read_text())
            side = side_of(folder_side, info)
            if "crash" in info:
                c = info["crash"]
                run: Run | Crash = Crash(c["error"], c["frame"], c["last_tick"], info["wall_s"])
            else:
                read = reference_run if folder_side in ("reference", GUARDED) else pbx_run
                run = read(marker.with_suffix(""), info, toy in NOISY)
            by_seed = runs.setdefault(toy, {}).setdefault(side, {}).setdefault(algo_dir.name, {})
            if int(marker.stem[1:]) in by_seed:
                raise ValueError(f"{marker.relative_to(root)} is in more than one of {[str(r) for r in roots]}")
            by_seed[int(marker.stem[1:])] = run
    return runs


def runs_by_seed(runs: Runs, toy: str, side: str, algo: str) -> dict[int, Run]:
    """The finished runs of one toy, side and algorithm, by seed (crashed reference runs left out)."""
    return {k: r for k, r in runs.get(toy, {}).get(side, {}).get(algo, {}).items() if isinstance(r, Run)}


def crashes(runs: Runs, toy: str, side: str, algo: str) -> dict[int, Crash]:
    """The reference runs of one toy, side and algorithm that stopped with an error, by seed."""
    return {k: r for k, r in runs.get(toy, {}).get(side, {}).get(algo, {}).items() if isinstance(r, Crash)}


def toy_budget(runs: Runs, toy: str) -> int | None:
    """The budget of the toy's runs where they record their rounds (:mod:`anytime`), else None."""
    found = {r.rounds.budget for sides in runs.get(toy, {}).values() for by_seed in sides.values()
             for r in by_seed.values() if isinstance(r, Run) and r.rounds is not None}
    if len(found) > 1:
        raise ValueError(f"{toy}'s runs have budgets {sorted(found)}: one study, one budget")
    return found.pop() if found else None
