"""Pick quality: each strategy's explore scored by the true improvement rate it would run at.

A synthetic run of population 4 whose true improvement rate is known and drifts:
a bump of width 0.2 (height 1 at its optimum, near 0 at a corner) whose optimum
moves on a closed curve inside ``[0.25, 0.75]^d`` (period 80 rounds); in the
mixed space each category has its own optimum and its own height (1.0 for the
best category, down to 0.4), so a pick's category and its continuous values both
count. The run itself is real PBT (truncation, one copy per round, its own
explore) on a real :class:`~pbx.history.History`, scores summing each round's
rate plus noise (sd 0.05). After the run's last round every strategy decides
once, on that same history, through its real class: PB2 (continuous space),
PB2-Rand (``cat_exp random``), PB2-Mult (``exp3``) and PB2-Mix (``cocabo``) on the
mixed space, beside a uniform pick, PBT's explore and keeping the donor's config.

Each pick is scored by the true rate of its config in the round it runs (at the
donor's time). Printed per cell (continuous: 2 and 4 dimensions, 40 / 200 / 1000
rows; mixed: 2 continuous and 4 or 8 categories, 15 / 30 / 45 / 60 rounds):

- the mean true rate of the picks (standard error in brackets);
- ``face``: the share of picks with a continuous coordinate within 1e-3 of a bound;
- ``bad``: the share of picks with true rate < 0.05 while the donor's config is > 0.5;
- mixed, ``bad|cat``: the same with the donor's continuous values run in the pick's category as the
  reference, so only continuous values that land badly inside the category count. ``bad`` also counts
  a category EXP3 (or PBT's resample) moves to whose own optimum is far from the donor's values: there
  the donor's values themselves may run below 0.05, and such a pick is the category's exploration,
  wasted or not whatever continuous values come with it;
- at 4 categories, EXP3's probability on the best category (``exp3.<name>.<choice>`` of
  ``Decision.info``) beside PB2-Rand's exact chance of the best category from the same donor
  (PBT's categorical explore: the donor's category kept, or resampled uniformly with probability
  :data:`~pbx.strategies.pbt.CATEGORICAL_RESAMPLE_PROB`), and the share of each strategy's picks on
  the best category. The chances compare like with like; the shares are one 0/1 per history, and
  at 30 histories their standard error is about 0.09.

A line per target of the acceptance criteria ends the output (``ok`` or the cells
that miss). ``--pb2 key=value`` overrides PB2 settings, so candidates run on the
same histories.

    .venv/bin/python benchmarks/bench_picks.py [--quick] [--seeds 30] [--pb2 key=value ...]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field

import numpy as np
import yaml

from pbx.history import History, Row
from pbx.space import Categorical, Config, Continuous, Space
from pbx.strategies import PB2, PBT, PB2Settings, RunContext, Strategy
from pbx.strategies.pbt import CATEGORICAL_RESAMPLE_PROB

POP, STEPS = 4, 100
WIDTH, AMPLITUDE, PERIOD = 0.2, 0.15, 80
"""The bump's width, how far its optimum swings around its centre, and the swing's period in rounds."""
NOISE = 0.05
"""Standard deviation of the observed rate around the true one."""
FACE, BAD_PICK, GOOD_DONOR = 1e-3, 0.05, 0.5
PLANNED_ROUNDS = 60
"""The run length EXP3's rates are set for: every mixed cell is a decision inside one such run."""
CONTINUOUS = [(d, rows) for d in (2, 4) for rows in (40, 200, 1000)]
MIXED = [(k, rounds) for k in (4, 8) for rounds in (15, 30, 45, 60)]
BASELINES = ("uniform", "PBT", "donor")
CAT_EXPS = {"PB2-Rand": "random", "PB2-Mult": "exp3", "PB2-Mix": "cocabo"}
DATA_ROWS, DATA_ROUNDS = 200, 30
"""From here on the GP has data: its picks must be at least as good as PBT's explore."""


@dataclass(frozen=True)
class Truth:
    """The true improvement rate: one drifting bump per category (one category for a continuous space)."""

    centres: np.ndarray
    """(K, d) each category's optimum, around which it swings."""
    phases: np.ndarray
    """(K, d) where on its swing each coordinate starts."""
    heights: np.ndarray
    """(K,) each category's rate at its optimum."""

    @classmethod
    def draw(cls, categories: int, d: int, rng: np.random.Generator) -> Truth:
        heights = rng.permutation(np.linspace(1.0, 0.4, categories))
        return cls(rng.uniform(0.4, 0.6, size=(categories, d)), rng.uniform(0, 2 * math.pi, size=(categories, d)),
                   heights)

    def optimum(self, category: int, r: int) -> np.ndarray:
        return self.centres[category] + AMPLITUDE * np.sin(2 * math.pi * r / PERIOD + self.phases[category])

    def rate(self, space: Space, config: Config, r: int) -> float:
        """The true rate of ``config`` in round ``r``."""
        k = category_index(space, config)
        gap = space.to_unit(config) - self.optimum(k, r)
        return float(self.heights[k] * np.exp(-np.sum(gap**2) / (2 * WIDTH**2)))

    @property
    def best(self) -> int:
        return int(np.argmax(self.heights))


def category_index(space: Space, config: Config) -> int:
    """The config's category as a choice index (0 on a space without one)."""
    if not space.categorical:
        return 0
    param = space.params[space.categorical[0]]
    assert isinstance(param, Categorical)
    return param.choices.index(config[space.categorical[0]])


def make_space(d: int, categories: int) -> Space:
    params: dict = {f"x{i}": Continuous(0.0, 1.0) for i in range(d)}
    if categories:
        params["cat"] = Categorical(tuple(f"c{i}" for i in range(categories)))
    return Space(params)


def pbt_run(space: Space, truth: Truth, rounds: int, seed: int) -> History:
    """``rounds`` rounds of real PBT on the true rate: the history every strategy then decides on."""
    rng = np.random.default_rng([seed, 0])
    strategy = PBT()
    configs = strategy.initial_configs(space, POP, rng)
    parents, scores, history = list(range(POP)), np.zeros(POP), History(space.names)
    for r in range(rounds):
        scores = np.array([scores[p] for p in parents])
        scores += [STEPS * (truth.rate(space, c, r) + rng.normal(0, NOISE)) for c in configs]
        history = history.with_rows([Row(m, r, (r + 1) * STEPS, float(r), float(scores[m]), float("nan"), parents[m],
                                         parents[m] != m, configs[m]) for m in range(POP)])
        if r < rounds - 1:
            decisions = strategy.decide(history, space, rng)
            parents, configs = [d.donor for d in decisions], [dict(d.config) for d in decisions]
    return history


@dataclass
class Picks:
    """One strategy's picks in one cell."""

    rate: list[float] = field(default_factory=list)
    face: list[bool] = field(default_factory=list)
    bad: list[bool] = field(default_factory=list)
    bad_given_category: list[bool] = field(default_factory=list)
    """``bad`` with the donor's continuous values in the pick's category as the reference."""
    best: list[bool] = field(default_factory=list)
    """The pick runs the best category."""
    p_best: list[float] = field(default_factory=list)
    """The chance of the best category: EXP3's probability where the decision carries it, PB2-Rand's exact
    chance (:meth:`add_resample_chance`)."""
    gp: list[bool] = field(default_factory=list)
    """The pick came from the GP, not PB2's PBT fallback."""

    def add(self, space: Space, truth: Truth, r: int, config: Config, donor: Config,
            info: dict[str, float] | None = None) -> None:
        rate = truth.rate(space, config, r)
        unit = space.to_unit(config)
        self.rate.append(rate)
        self.face.append(bool(np.any((unit < FACE) | (unit > 1 - FACE))))
        self.bad.append(rate < BAD_PICK and truth.rate(space, donor, r) > GOOD_DONOR)
        same_category = {**donor, **{name: config[name] for name in space.categorical}}
        self.bad_given_category.append(rate < BAD_PICK and truth.rate(space, same_category, r) > GOOD_DONOR)
        self.best.append(category_index(space, config) == truth.best)
        info = info or {}
        if space.categorical:
            key = f"exp3.{space.categorical[0]}.c{truth.best}"
            if key in info:
                self.p_best.append(info[key])
        self.gp.append(info.get("gp", 0.0) == 1.0)

    def add_resample_chance(self, space: Space, truth: Truth, donor: Config) -> None:
        """PBT's categorical explore from ``donor``: its exact chance of the best category."""
        on_best = category_index(space, donor) == truth.best
        choices = len(space.params[space.categorical[0]].choices)  # type: ignore[union-attr]
        self.p_best.append((1 - CATEGORICAL_RESAMPLE_PROB) * on_best + CATEGORICAL_RESAMPLE_PROB / choices)

    def mean(self) -> float:
        return float(np.mean(self.rate))

    def cell(self) -> str:
        """Mean true rate with its standard error."""
        se = np.std(self.rate, ddof=1) / math.sqrt(len(self.rate)) if len(self.rate) > 1 else float("nan")
        return f"{self.mean():.3f} ({se:.3f})"


def strategies(space: Space, overrides: dict[str, object]) -> dict[str, Strategy]:
    """The PB2 variants that decide in ``space``, keyed by the paper's names."""
    context = RunContext(PLANNED_ROUNDS, POP)
    if not space.categorical:
        return {"PB2": PB2(PB2Settings(**overrides))}
    return {name: PB2(PB2Settings(**{"cat_exp": cat_exp, **overrides}), context=context)
            for name, cat_exp in CAT_EXPS.items()}


def cell(d: int, categories: int, rounds: int, seeds: range, overrides: dict[str, object]) -> dict[str, Picks]:
    """Every strategy's picks, one per seed, on histories of ``rounds`` rounds."""
    space = make_space(d, categories)
    picks: dict[str, Picks] = {}
    for seed in seeds:
        truth = Truth.draw(max(categories, 1), d, np.random.default_rng([seed, d, categories]))
        history = pbt_run(space, truth, rounds, seed)
        rng = np.random.default_rng([seed, 1])
        for decision in (x for x in PBT().decide(history, space, rng) if x.explored):
            donor = history.config_of(history.latest().iloc[decision.donor])
            picks.setdefault("uniform", Picks()).add(space, truth, rounds, space.sample(rng), donor)
            picks.setdefault("PBT", Picks()).add(space, truth, rounds, decision.config, donor)
            picks.setdefault("donor", Picks()).add(space, truth, rounds, donor, donor)
        for name, strategy in strategies(space, overrides).items():
            for decision in strategy.decide(history, space, np.random.default_rng([seed, 2])):
                if decision.explored:
                    donor = history.config_of(history.latest().iloc[decision.donor])
                    picks.setdefault(name, Picks()).add(space, truth, rounds, decision.config, donor,
                                                        dict(decision.info))
                    if CAT_EXPS.get(name) == "random":
                        picks[name].add_resample_chance(space, truth, donor)
    return picks


def share(values: list[bool]) -> str:
    return f"{np.mean(values):.2f}" if values else "  - "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30, help="histories (so picks) per cell")
    parser.add_argument("--quick", action="store_true", help="5 seeds, for a look in about a minute")
    parser.add_argument("--only", choices=("continuous", "mixed"), help="one half of the cells")
    parser.add_argument("--pb2", nargs="*", default=[], metavar="KEY=VALUE", help="PB2 settings to override")
    args = parser.parse_args()
    seeds = range(5 if args.quick else args.seeds)
    overrides = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.pb2)}
    start = time.perf_counter()
    misses: dict[str, list[str]] = {"above uniform": [], "at least PBT (with data)": [], "bad < 5%": [],
                                    "bad given the category < 5%": [], "EXP3 grows, at least PB2-Rand from 30": []}

    def check(label: str, picks: dict[str, Picks], names: list[str], with_data: bool) -> None:
        for name in names:
            if picks[name].mean() <= picks["uniform"].mean():
                misses["above uniform"].append(f"{name} {label}")
            if with_data and picks[name].mean() < picks["PBT"].mean():
                misses["at least PBT (with data)"].append(f"{name} {label}")
            if np.mean(picks[name].bad) >= 0.05:
                misses["bad < 5%"].append(f"{name} {label}")
            if np.mean(picks[name].bad_given_category) >= 0.05:
                misses["bad given the category < 5%"].append(f"{name} {label}")

    print(f"population {POP}, {len(seeds)} histories per cell, one pick each; PB2 settings {overrides or 'default'}")
    print("mean true rate of the picks (standard error); face: share on a face; bad: true < 0.05 while the "
          "donor's config > 0.5")
    print(f"\ncontinuous | {'uniform':>13} | {'PBT explore':>13} | {'keep donor':>13} | {'PB2':>13} | face | bad  | GP")
    for d, rows in CONTINUOUS if args.only != "mixed" else []:
        picks = cell(d, 0, rows // POP, seeds, overrides)
        check(f"d{d}/{rows}", picks, ["PB2"], rows >= DATA_ROWS)
        pb2 = picks["PB2"]
        print(f"d {d} {rows:>4} r | " + " | ".join(picks[n].cell() for n in (*BASELINES, "PB2"))
              + f" | {share(pb2.face)} | {share(pb2.bad)} | {share(pb2.gp)}", flush=True)
    print(f"\nmixed, 2 continuous | {'uniform':>13} | {'PBT explore':>13} | {'keep donor':>13} | "
          + " | ".join(f"{n:>13}" for n in CAT_EXPS) + " | face R/Mt/Mx  | bad R/Mt/Mx    | bad|cat R/Mt/Mx | GP R/Mt/Mx")
    exp3_rows = []
    for k, rounds in MIXED if args.only != "continuous" else []:
        picks = cell(2, k, rounds, seeds, overrides)
        check(f"K{k}/{rounds}", picks, list(CAT_EXPS), rounds >= DATA_ROUNDS)
        print(f"K {k} {rounds:>2} rounds      | " + " | ".join(picks[n].cell() for n in (*BASELINES, *CAT_EXPS))
              + " | " + " ".join(share(picks[n].face) for n in CAT_EXPS)
              + " | " + " ".join(share(picks[n].bad) for n in CAT_EXPS)
              + " | " + " ".join(share(picks[n].bad_given_category) for n in CAT_EXPS)
              + " | " + " ".join(share(picks[n].gp) for n in CAT_EXPS), flush=True)
        if k == 4:
            exp3_rows.append((rounds, picks))
    print("\n4 categories: the chance of the best category (EXP3's probability; PB2-Rand's exact chance from "
          "the same donor), and the share of picks on it")
    names = ["uniform", "PBT", *CAT_EXPS]
    print("rounds | P(best) Mult | P(best) Mix | P(best) Rand | " + " | ".join(f"{n:>8}" for n in names))
    previous = 0.0
    for rounds, picks in exp3_rows:
        exp3, rand = (float(np.mean(picks[n].p_best)) for n in ("PB2-Mult", "PB2-Rand"))
        print(f"{rounds:>6} | {exp3:>12.2f} | {np.mean(picks['PB2-Mix'].p_best):>11.2f} | {rand:>12.2f} | "
              + " | ".join(f"{np.mean(picks[n].best):>8.2f}" for n in names))
        if exp3 <= previous or (rounds >= DATA_ROUNDS and exp3 < rand):
            misses["EXP3 grows, at least PB2-Rand from 30"].append(f"{rounds} rounds")
        previous = exp3
    print()
    for target, cells in misses.items():
        print(f"target {target}: " + ("ok" if not cells else f"missed in {', '.join(cells)}"))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
