"""EXP3 in the population setting: how fast it learns the best category, and how often it repeats one.

A synthetic population of 4 members runs the real PB2 strategy on a space with one
categorical hyperparameter and nothing else (so no GP is fit and a round takes
milliseconds): each round a member improves at its category's height plus
Gaussian noise, then PB2 decides (truncation: the worst copies the best) and the
copy's category comes from ``--cat_exp`` (EXP3, or PB2-Rand's keep-or-redraw).

- ``better``: 4 categories, one clearly better (height 1.0 against 0.5, noise 0.2).
  The table gives, after 15 / 30 / 45 / 60 rounds, the mean chance that the
  round's pick lands on the best category (EXP3: the bandit's own probability;
  PB2-Rand: ``1/2`` from keeping a donor on the best plus ``1/2 * 1/K`` from
  the redraw), and the share of member-rounds run on it.
- ``equal``: 8 categories of equal height. The table gives the share of picks
  on a category a member that keeps running already holds, beside the share a
  uniform draw would give on the same populations, and the largest chance EXP3
  gives any one arm after 60 rounds (1/8 = 0.125 is uniform).

    .venv/bin/python benchmarks/bench_exp3.py [--seeds 40] [--plays all drawn]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from pbx.history import History, Row
from pbx.space import Categorical, Space
from pbx.strategies import PB2, PB2Settings, RunContext

POP, ROUNDS, NOISE = 4, 60, 0.2
CHECKPOINTS = (15, 30, 45, 60)
"""History lengths (finished training rounds) at which a decision is read."""


@dataclass(frozen=True)
class World:
    heights: tuple[float, ...]

    @property
    def space(self) -> Space:
        return Space({"cat": Categorical(tuple(f"c{i}" for i in range(len(self.heights))))})

    @property
    def best(self) -> str:
        return f"c{int(np.argmax(self.heights))}"


BETTER = World((0.5, 0.5, 1.0, 0.5))
EQUAL = World((0.5,) * 8)


@dataclass
class Trace:
    """What one simulated run of ``ROUNDS`` rounds showed."""

    p_best: dict[int, float]
    """History length -> the chance the pick of that round's decision lands on the best category."""
    rows_best: float
    """Share of member-rounds (after round 0) on the best category."""
    repeats: list[bool]
    """Per pick: its category is held by a member that keeps running."""
    uniform_repeats: list[float]
    """Per pick: the chance a uniform draw lands on a held category."""
    p_max: float
    """The largest per-pick chance EXP3 gives one arm at the last decision (NaN for PB2-Rand)."""


def simulate(world: World, cat_exp: str, seed: int, extra: dict[str, str]) -> Trace:
    """One population of ``POP`` members for ``ROUNDS`` rounds under PB2 with ``cat_exp``."""
    space, rng = world.space, np.random.default_rng(seed)
    choices = space.params["cat"].choices  # type: ignore[union-attr]
    heights = dict(zip(choices, world.heights))
    strategy = PB2(PB2Settings(cat_exp=cat_exp, **extra), context=RunContext(rounds=ROUNDS, pop_size=POP))
    configs = strategy.initial_configs(space, POP, rng)
    scores, parents, explored = np.zeros(POP), list(range(POP)), [False] * POP
    history, p_best, rows_best = History(space.names), {}, []
    repeats, uniform_repeats, p_max = [], [], float("nan")
    for r in range(ROUNDS + 1):
        if r:
            scores = scores + [heights[c["cat"]] + rng.normal(0, NOISE) for c in configs]
            rows_best += [c["cat"] == world.best for c in configs]
        history = history.with_rows([Row(m, r, r + 1, float(r), float(scores[m]), float("nan"), parents[m],
                                         explored[m], configs[m]) for m in range(POP)])
        decisions = strategy.decide(history, space, rng)
        picks = [d for d in decisions if d.explored]
        held = {d.config["cat"] for d in decisions if not d.explored}
        for d in picks:
            repeats.append(d.config["cat"] in held)
            uniform_repeats.append(len(held) / len(choices))
        if r in CHECKPOINTS and picks:
            p_best[r] = float(np.mean([pick_chance(d.info, configs[d.donor]["cat"], world.best, len(choices))
                                       for d in picks]))
            if picks[0].info.get(f"exp3.cat.{world.best}") is not None:
                p_max = max(picks[0].info[f"exp3.cat.{c}"] for c in choices)
        if r == ROUNDS:
            break
        scores = np.array([scores[d.donor] for d in decisions])
        configs = [dict(d.config) for d in decisions]
        parents, explored = [d.donor for d in decisions], [d.explored for d in decisions]
    return Trace(p_best, float(np.mean(rows_best)), repeats, uniform_repeats, p_max)


def pick_chance(info: dict[str, float], donor_category: str, best: str, arms: int) -> float:
    """The chance this pick lands on ``best``: EXP3's recorded probability, else PB2-Rand's keep-or-redraw."""
    if f"exp3.cat.{best}" in info:
        return float(info[f"exp3.cat.{best}"])
    return 0.5 * (donor_category == best) + 0.5 / arms


def variants(plays: list[str]) -> list[tuple[str, str, dict[str, str]]]:
    """(label, cat_exp, extra settings): EXP3 per ``exp3_plays`` value (or as built, when none given), PB2-Rand."""
    exp3 = [(f"exp3 plays={p}", "exp3", {"exp3_plays": p}) for p in plays] or [("exp3", "exp3", {})]
    return exp3 + [("PB2-Rand", "random", {})]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--plays", nargs="*", default=["all", "drawn"],
                        help="exp3_plays values to compare (none: the strategy as built, for older code)")
    args = parser.parse_args()
    seeds = range(args.seeds)
    print(f"population {POP}, {args.seeds} seeds; better: heights {BETTER.heights}, noise {NOISE}")
    print(f"{'variant':>16} | " + " | ".join(f"P(best) @{c:>2}" for c in CHECKPOINTS)
          + " | rows on best | equal: repeats | uniform | max p @60 | seconds")
    for label, cat_exp, extra in variants(args.plays):
        start = time.perf_counter()
        better = [simulate(BETTER, cat_exp, s, extra) for s in seeds]
        equal = [simulate(EQUAL, cat_exp, s, extra) for s in seeds]
        cells = [f"{np.mean([t.p_best[c] for t in better if c in t.p_best]):>11.3f}" for c in CHECKPOINTS]
        repeats = np.mean([x for t in equal for x in t.repeats])
        uniform = np.mean([x for t in equal for x in t.uniform_repeats])
        print(f"{label:>16} | " + " | ".join(cells) + f" | {np.mean([t.rows_best for t in better]):>12.3f} | "
              f"{repeats:>14.3f} | {uniform:>7.3f} | {np.mean([t.p_max for t in equal]):>9.3f} | "
              f"{time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
