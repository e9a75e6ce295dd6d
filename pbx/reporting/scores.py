"""What a run scored: its headline numbers, and the one score statistics are computed on (``--score``).

The *best member* of a round is the one with the best train score (NaN ranks
last, ties go to a row whose own round earned its score, then to the lowest member id: :func:`pbx.standings.best_rows`).
Test scores are those of that member: the test set never selects. Each run has
three headline numbers, each as (train, test), and every statistic can be
computed on any of them (:data:`SCORES`):

- ``best``: the best member's scores in the last round (the papers' choice);
- ``population``: the mean over all members in the last round;
- ``last-k``: the mean of the best member's scores over the last k rounds;
- ``kept``: BG-PBT's and IPBT's answer, the best on train score of the last round's best member and each
  generation's best, kept at the restart that ended it (:func:`pbx.standings.member_row`); for a strategy
  that never restarts, ``best``;
- ``area`` and ``population-area``: the best member's and the population mean's scores over the whole run,
  each round weighted by the env steps it trained (the area under the curve per step). Where the final
  scores of schedules meet at a task's cap, the area still tells which got there sooner; it compares runs
  whose rounds differ in length (PBT at several ``t_ready``, IPBT's growing rounds) on one footing.

Only the rows whose scores are results count (:func:`pbx.reporting.runs.result_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pbx.standings import best_rows, member_row
from pbx.reporting.runs import Run

LAST_K = 5
"""Rounds averaged by the "last k" headline number: 5 smooths a lucky round yet stays near the end."""
SCORES = ("best", "population", "last-k", "kept", "area", "population-area")
"""The run scores ``--score`` picks among; the first is the default."""
BESIDE = {"best": "population", "area": "population-area"}
"""The population's score a comparison shows beside the best member's."""
FINAL_SCORE_NOTE = (
    "Best member (the final score): the train score of the member with the best train score in the last "
    "round, and that same member's test score (no selection on the test set); a maximum over noisy scores, "
    "so it overstates, and for a baseline it is the best of its seeds. Population mean: the mean over all "
    "members in the last round (for a baseline, the mean over its seeds): the like-for-like number between "
    "a baseline and a tuned population. Last k: the best-on-train member of each of the last k rounds "
    "(fewer if the run is shorter), its scores averaged over those rounds. Kept (BG-PBT, IPBT): the best on "
    "train score of the final best member and each generation's best at the restart that ended it, and that "
    "member's test score (n/a where its round took none); for other strategies the best member. Area: the "
    "best member's (or the population mean's) score per round averaged over all rounds, each weighted by "
    "the env steps it trained, over the rounds that have the score (the test one only where it was taken). "
    "A round in which no training "
    "episode both started and ended (a policy whose episodes outlast the round), or that the member skipped "
    "(it began the round at or past the round's planned steps: a rollout longer than t_ready), carries the "
    "member's last train score (history.csv's carried column), so a member too good to finish an episode keeps "
    "its score; "
    "NaN scores (a diverged member, a round without a test, no score yet to carry) are left out of the means."
)


def score_title(kind: str, k: int = LAST_K) -> str:
    """How a table names the run score ``kind`` (one of :data:`SCORES`)."""
    return {"best": "best member's final score", "population": "population mean in the last round",
            "last-k": f"best member's mean over the last {k} rounds",
            "kept": "best of the generations' best members (kept at restarts) and the final one",
            "area": "best member's mean over the run, per step trained",
            "population-area": "population mean's mean over the run, per step trained"}[kind]


@dataclass(frozen=True)
class Headline:
    """A run's headline numbers (see :data:`FINAL_SCORE_NOTE`), each as (train, test)."""

    best: tuple[float, float]
    population: tuple[float, float]
    last_k: tuple[float, float]
    k: int
    area: tuple[float, float]
    population_area: tuple[float, float]
    kept: tuple[float, float]

    def of(self, kind: str) -> tuple[float, float]:
        """The (train, test) pair of the run score ``kind`` (one of :data:`SCORES`)."""
        return {"best": self.best, "population": self.population, "last-k": self.last_k, "kept": self.kept,
                "area": self.area, "population-area": self.population_area}[kind]


def headline(run: Run, k: int = LAST_K) -> Headline:
    """The run's final score, last-round population mean, last-``k`` mean of the best member, the best
    member's and the population mean's areas, and the kept answer."""
    frame = run.results
    last = frame[frame["round"] == frame["round"].max()]
    best = best_rows(frame)
    recent = best.tail(k)
    final = recent.iloc[-1]
    population = frame.groupby("round").agg(score=("score", nanmean), test_score=("test_score", nanmean))
    length = round_lengths(frame)
    kept = member_row(frame, "kept")
    return Headline((float(final["score"]), float(final["test_score"])),
                    (nanmean(last["score"]), nanmean(last["test_score"])),
                    (nanmean(recent["score"]), nanmean(recent["test_score"])), len(recent),
                    tuple(weighted_mean(best[c], best["round"].map(length)) for _, c in COLUMNS),
                    tuple(weighted_mean(population[c], length[population.index]) for _, c in COLUMNS),
                    tuple(float(kept[c]) for _, c in COLUMNS))


def run_score(run: Run, kind: str, k: int = LAST_K) -> tuple[float, float]:
    """The run's (train, test) score of ``kind`` (one of :data:`SCORES`)."""
    return headline(run, k).of(kind)


def score_curve(run: Run, kind: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, value) per round of the score ``kind`` follows over a run: the population mean of ``column``
    for ``population``, else the best member's; rounds where it is NaN are left out."""
    frame = run.results
    if kind in BESIDE.values():
        per_round = frame.groupby("round").agg(steps=("steps", "max"), value=(column, nanmean))
    else:
        per_round = best_rows(frame).rename(columns={column: "value"})
    per_round = per_round[per_round["value"].notna()]
    return per_round["steps"].to_numpy(float), per_round["value"].to_numpy(float)


COLUMNS = (("train", "score"), ("test", "test_score"))
"""Each score a headline pair holds, in its order: its key and its history column."""


def round_lengths(frame: pd.DataFrame) -> pd.Series:
    """Env steps each round trained, by round: the rise of the members' furthest steps over the round before
    (the rounds' own lengths, which IPBT doubles at a restart; the first round's from 0)."""
    furthest = frame.groupby("round")["steps"].max().astype(float)
    return furthest.diff().fillna(furthest.iloc[0])


def weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    """The ``weights``-weighted mean of the finite ``values`` (NaN when there are none)."""
    value, weight = values.to_numpy(float), weights.to_numpy(float)
    finite = np.isfinite(value)
    return float(np.average(value[finite], weights=weight[finite])) if finite.any() else float("nan")


def nanmean(values: pd.Series) -> float:
    """The mean of the finite values, NaN when there are none (no warning, unlike ``np.nanmean``)."""
    finite = values.to_numpy(float)
    finite = finite[np.isfinite(finite)]
    return float(finite.mean()) if len(finite) else float("nan")
