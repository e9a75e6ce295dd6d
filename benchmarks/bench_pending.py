"""PB2's pending set: the earlier picks of a round only (``picks``, as Ray Tune) or with the configs
of the members that keep running, each at its own time and score (``running``, as the PB2 authors'
ProcGen code). Two measurements, both settings side by side:

(a) the toy benchmark: mean ± std over seeds of the best final Q (population 2 and 4, 200 steps,
    t_ready 4; best reachable about 1.1995);
(b) a synthetic run whose best config drifts: 4 members, 2 continuous hyperparameters, each
    round's improvement rate peaked at a point moving across the unit cube; members follow
    PB2's own decisions (truncation, one recipient per round). Reported: the mean distance of
    the picks to the peak of the round they run in, the mean final score, and the per-seed
    difference between the settings.

    .venv/bin/python benchmarks/bench_pending.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from pbx.history import History, Row
from pbx.space import Continuous, Space
from pbx.strategies import PB2, PB2Settings
from toy_runs import run_toy

SETTINGS = ("picks", "running")
SPACE = Space({"a": Continuous(0.0, 1.0), "b": Continuous(0.0, 1.0)})
ROUNDS, POP, STEPS = 40, 4, 100


def peak(r: int) -> np.ndarray:
    """The best config in round ``r``: a line from (0.2, 0.8) to (0.8, 0.2) over the run."""
    f = r / (ROUNDS - 1)
    return np.array([0.2 + 0.6 * f, 0.8 - 0.6 * f])


def rate(unit: np.ndarray, r: int, rng: np.random.Generator) -> float:
    return float(np.exp(-np.sum((unit - peak(r)) ** 2) / (2 * 0.15**2)) + rng.normal(0, 0.05))


def drifting_run(pending: str, seed: int) -> tuple[float, float]:
    """(mean distance of PB2's picks to the current peak, mean final score) of one synthetic run."""
    rng = np.random.default_rng(seed)
    strategy = PB2(PB2Settings(pending=pending))
    configs = [SPACE.sample(rng) for _ in range(POP)]
    scores, parents, history, distances = np.zeros(POP), list(range(POP)), History(SPACE.names), []
    for r in range(ROUNDS):
        scores = np.array([scores[p] for p in parents])
        scores += np.array([STEPS * rate(SPACE.to_unit(c), r, rng) for c in configs])
        history = history.with_rows([Row(m, r, (r + 1) * STEPS, float(r), float(scores[m]), float("nan"), parents[m],
                                         parents[m] != m, configs[m]) for m in range(POP)])
        decisions = strategy.decide(history, SPACE, np.random.default_rng([seed, r]))
        parents = [d.donor for d in decisions]
        configs = [dict(d.config) for d in decisions]
        distances += [float(np.linalg.norm(SPACE.to_unit(d.config) - peak(r + 1)))
                      for d in decisions if d.explored and "(PB2)" in " ".join(d.ops)]
    return float(np.mean(distances)), float(scores.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    seeds = range(parser.parse_args().seeds)
    print(f"(a) toy, 200 steps, t_ready 4, {len(seeds)} seeds: mean ± std of the best final Q")
    with tempfile.TemporaryDirectory() as tmp:
        for pending in SETTINGS:
            cells = []
            for pop in (2, 4):
                q = [float(run_toy(Path(tmp) / f"{pending}-{pop}-{s}", "PB2", pop, s, {"pending": pending})
                           .latest()["score"].max()) for s in seeds]
                cells.append(f"pop {pop} {np.mean(q):.5f} ± {np.std(q):.5f}")
            print(f"    pending {pending:<8} " + " | ".join(cells), flush=True)
    print(f"(b) drifting peak, {POP} members, {ROUNDS} rounds, {len(seeds)} seeds: mean ± std over seeds")
    runs = {}
    for pending in SETTINGS:
        runs[pending] = np.array([drifting_run(pending, s) for s in seeds])
        print(f"    pending {pending:<8} pick-to-peak distance {runs[pending][:, 0].mean():.4f} ± "
              f"{runs[pending][:, 0].std():.4f} | final mean score {runs[pending][:, 1].mean():.2f} ± "
              f"{runs[pending][:, 1].std():.2f}", flush=True)
    # Both settings see the same seeds: the per-seed difference removes the runs' common luck.
    diff = runs["running"] - runs["picks"]
    stderr = diff.std(0) / np.sqrt(len(seeds))
    print(f"    running - picks, paired by seed (mean ± standard error): distance {diff[:, 0].mean():+.4f} ± "
          f"{stderr[0]:.4f} | final mean score {diff[:, 1].mean():+.2f} ± {stderr[1]:.2f}")


if __name__ == "__main__":
    main()
