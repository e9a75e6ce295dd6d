"""BG-PBT's and IPBT's restart and explore decisions, pbx's against the authors' code, on the same recorded histories.

The end-to-end side-by-side (``run_side_by_side.py``) compares final scores, which
training noise blunts. Here each decision is isolated: a recorded pbx run of
``toy-plain-noisy`` (both algorithms restart there) is cut at a decision point, the
history up to it is given to pbx's decision and, converted to the authors'
bookkeeping (:func:`recorded_runs.authors_records`), to the authors' own function, each called
with many generator seeds; the two distributions of picks are compared. Decision
points per history:

- ``IPBT restart``: after the round that ends the first generation, the 16
  candidates' configs; compared on the 8 the GP across generations picks (the
  authors' ``IPBT.reinit_population_time_varying``, its meta-GP ``explore``; pbx's
  ``IPBT.restart``, :meth:`~pbx.strategies.generational.restart.RestartBO.across_generations`);
  the other 8 are prior draws on both sides;
- ``BG-PBT restart``: the 8 configs of the first global restart (the authors'
  ``BGPBT.reinit_population_global``; pbx's ``BGPBT.restart``,
  :meth:`~pbx.strategies.generational.restart.RestartBO.global_configs`);
- ``IPBT explore`` / ``BG-PBT explore``: in the middle of the first generation, the
  config the worst member gets from the best one (the authors' ``IPBT.explore`` and
  ``BGPBT.explore``, with the other members' configs as ``current`` and the trust
  region their ``adjust_tr_length`` reaches over the generation; pbx's
  ``decisions`` with that one pair).

``--reference-runs`` adds reference runs of the side-by-side as histories: their
own ``data`` (and IPBT's ``df_idx_at_restart``) go to the authors' functions, and
the same events as pbx's history (:func:`recorded_runs.reference_history`) to pbx's. For each
such run the table says whether :func:`~recorded_runs.authors_records`, given that history,
rebuilds the run's own records row for row: the check that the conversion of
pbx's histories gives the authors' code what it would have recorded.

The authors' functions are imported from their checkout at run time
(``--checkout``; the code stays out of this repository) and called on an object of
their class whose state is the converted history; their generators (NumPy's, torch's,
Python's, ConfigSpace's) are seeded per call. pbx's strategy is built from the run's
``config.yaml`` (:func:`recorded_runs.pbx_strategy`); a reference run's from its algorithm's pbx history of seed 0
(``<out>/histories/<ALGO>/s0/config.yaml``), so every row is at the settings those histories ran with.

**Test.** Per decision point, each side's calls over ``--seeds`` generator seeds; the
statistic is the energy distance between the two sides' pooled picks (``lr``,
``scipy.stats.energy_distance``), its p-value from permuting whole calls between the
sides (a call's picks are not independent), 2,000 permutations. The **control** is
the same test on two pbx seed sets (seeds ``0..K-1`` against ``K..2K-1``): it
should not reject. The **power**: the smallest shift of all of one side's picks
that the test, at the same sample size and 5%, detects in 80% of 200 simulated pairs
drawn from pbx's own calls (resampled by call, one sample shifted).

    PYTHONPATH=$PWD /work/studies/refenv/bin/python benchmarks/peers/ipbt/decisions.py \\
        --checkout /work/studies/ipbt-ref --out docs/results/ipbt_decisions

reads the histories committed under ``<out>/histories/<ALGO>/s<seed>/`` (pbx runs of ``toy-plain-noisy``,
``config.yaml`` and ``history.csv.gz``; ``--reference-runs`` folders as committed under ``docs/results/``) and
writes ``<out>/decisions.csv`` (every pick) and
``<out>/decisions.md`` (the tests). It needs the reference's environment (``requirements-reference.txt``) with
this repository on ``PYTHONPATH``: pbx's strategies import there, its run configuration (which imports the
environments) does not, so the strategy is built from the stored settings.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import energy_distance

from pbx.history import History
from pbx.strategies.generational.base import generation_start
from recorded_runs import Recorded, converter_check, load, reference_history

HERE = Path(__file__).resolve().parent
PERMUTATIONS = 2000
POWER_PAIRS = 200
POWER_PERMUTATIONS = 300
SHIFTS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3)
"""Shifts of ``lr`` (its range is [1e-4, 1.1]) at which the power is simulated."""

class Authors:
    """The authors' BG-PBT and IPBT from their checkout, as objects whose state is a converted history."""

    def __init__(self, checkout: Path, scratch: Path) -> None:
        sys.path.insert(0, str(checkout))
        from omegaconf import OmegaConf

        import algo.bgpbt
        import algo.bgpbt_utils
        import algo.ipbt
        import task.toy_plain
        from search_space.cs import ConfigSpaceSearchSpace
        from search_space.cs_int_indices import ConfigSpaceSearchSpaceIntIndices

        self.modules = algo
        hps = OmegaConf.create([{"name": "lr", "type": "Float", "distribution": "Uniform", "bounds": [1e-4, 1.1],
                                 "log": False}])
        with contextlib.redirect_stdout(io.StringIO()):
            # the spaces the side-by-side's configs give each (reference.py: BG-PBT's needs integer indices)
            self.spaces = {"IPBT": ConfigSpaceSearchSpace(hps, seed=0),
                           "BGPBT": ConfigSpaceSearchSpaceIntIndices(hps, seed=0)}
        self.task = task.toy_plain.ToyPlainTask()
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)

    def casmo(self, algo: str, ard: bool, n_init: int):
        return self.modules.bgpbt_utils._Casmo(self.spaces[algo].cs, n_init=n_init, max_evals=1, batch_size=None,
                                               verbose=False, ard=ard, acq="lcb", use_standard_gp=False,
                                               time_varying=False)

    def state(self, algo: str, data: pd.DataFrame, df_idx: pd.DataFrame, n_distills: int, t_cur: int):
        """An object of the authors' class (``IPBT``: population 8, 16 at a restart; ``BGPBT``: 8, 24 at the
        start), its ``__init__`` not run: the attributes its decisions read, from their configs' values."""
        cls = self.modules.ipbt.IPBT if algo == "IPBT" else self.modules.bgpbt.BGPBT
        obj = object.__new__(cls)
        obj.search_space, obj.task, obj.exp_dir, obj.t_cur = self.spaces[algo], self.task, self.scratch, t_cur
        obj.data, obj.n_distills, obj.pop_size_actual, obj.pop_size = data.copy(), n_distills, 8, 8
        if algo == "IPBT":
            obj.n_init, obj.verbose, obj.fraction_random_hps_on_restart = 16, False, 0.5
            obj.df_idx_at_restart = df_idx.copy()
            obj.casmo, obj.casmo_meta = self.casmo(algo, True, 16), self.casmo(algo, True, 16)
        else:
            obj.n_init, obj.verbose, obj.reinit_weights_strategy = 24, True, "copy"
            obj.casmo = self.casmo(algo, False, 24)
        obj.pop = [[0.0] for _ in range(obj.n_init)]
        return obj

    def seed(self, seed: int) -> None:
        import torch

        np.random.seed(seed)
        torch.manual_seed(seed)
        random.seed(seed)
        for space in self.spaces.values():
            space.cs.seed(seed)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table (``pbx.reporting``'s imports rliable, which the reference's environment lacks)."""
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, ["---"] * len(header), *rows])


def run_quietly(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def restart_point(rec: Recorded) -> int | None:
    """The round after which the run's first restart was decided (None: it never restarted)."""
    marked = sorted(int(r) for r in rec.frame.loc[rec.frame["restart"], "round"].unique())
    return marked[0] - 1 if marked else None


def explore_point(rec: Recorded) -> int:
    """A round in the middle of the first generation, where an explore is decided."""
    first = restart_point(rec)
    return (first if first is not None else int(rec.frame["round"].max())) // 2


def history_upto(rec: Recorded, upto: int) -> History:
    return History(rec.space.names, rec.frame[rec.frame["round"] <= upto].reset_index(drop=True))


def pbx_restart(rec: Recorded, seed: int) -> list[float]:
    """pbx's restart after :func:`restart_point`: IPBT's GP picks (the candidates after the prior draws), BG-PBT's
    every config."""
    history = history_upto(rec, restart_point(rec))
    strategy = rec.strategy
    decisions = strategy.restart(history, rec.space, strategy.cut(history.latest()), np.random.default_rng(seed))
    picks = [float(d.config["lr"]) for d in decisions]
    return picks[round(strategy.settings.random_configs * len(picks)):] if rec.algo == "IPBT" else picks


def authors_restart(authors: Authors, rec: Recorded, seed: int) -> list[float]:
    upto = restart_point(rec)
    data, df_idx, _ = rec.authors_at(upto)
    obj = authors.state(rec.algo, data, df_idx, int(data["n_distills"].max()) + 1, rec.ends[upto])
    authors.seed(seed)
    if rec.algo == "IPBT":
        run_quietly(obj.reinit_population_time_varying)
        return [float(p[0]) for p in obj.pop[round(obj.fraction_random_hps_on_restart * obj.n_init):]]
    run_quietly(obj.reinit_population_global)
    return [float(p[0]) for p in obj.pop[:obj.pop_size_actual]]


def explore_pair(rec: Recorded, upto: int) -> tuple[int, int]:
    """The worst member of round ``upto`` as the recipient, the best as the donor."""
    latest = rec.frame[rec.frame["round"] == upto]
    order = latest.sort_values("score")["member"].astype(int).tolist()
    return order[0], order[-1]


def pbx_explore(rec: Recorded, seed: int) -> list[float]:
    upto = explore_point(rec)
    recipient, donor = explore_pair(rec, upto)
    history = history_upto(rec, upto)
    decisions = rec.strategy.decisions(history, rec.space, {recipient: donor}, np.random.default_rng(seed))
    return [float(d.config["lr"]) for d in decisions if d.member == recipient]


def authors_explore(authors: Authors, rec: Recorded, seed: int) -> list[float]:
    """The authors' explore of the worst member from the best at :func:`explore_point`, the other members'
    configs as ``current``, the trust region replayed by their ``adjust_tr_length`` over the generation."""
    upto = explore_point(rec)
    recipient, donor = explore_pair(rec, upto)
    data, df_idx, trial_of = rec.authors_at(upto)
    generation = int(data["n_distills"].max())
    obj = authors.state(rec.algo, data, df_idx, generation, rec.ends[upto])
    obj.t_step = 0
    start = generation_start(history_upto(rec, upto))
    for r in range(start, upto + 1):  # the region after each update of the generation (every row is 'bo')
        obj.data, obj.t_cur = data[data["Time"] <= rec.ends[r]], rec.ends[r]
        obj.adjust_tr_length(False)
    obj.data, obj.t_cur = data, rec.ends[upto]
    latest = rec.frame[rec.frame["round"] == upto].set_index("member")
    current = latest.drop(index=recipient)["lr"].to_numpy(float).reshape(-1, 1)
    authors.seed(seed)
    if rec.algo == "IPBT":
        values, _ = run_quietly(obj.explore, obj.casmo, obj.data, trial_of[donor], "new", current)
    else:
        values = run_quietly(obj.explore, trial_of[donor], "new", current)
    return [float(values[0])]


DECISIONS = {"restart": (pbx_restart, authors_restart), "explore": (pbx_explore, authors_explore)}


def pooled_energy(a: list[list[float]], b: list[list[float]]) -> float:
    return float(energy_distance(np.concatenate(a), np.concatenate(b)))


def permutation_p(a: list[list[float]], b: list[list[float]], permutations: int, rng: np.random.Generator) -> float:
    """The p-value of the energy distance between ``a`` and ``b`` when whole calls are exchanged between them."""
    observed = pooled_energy(a, b)
    calls = a + b
    hits = 0
    for _ in range(permutations):
        order = rng.permutation(len(calls))
        hits += pooled_energy([calls[i] for i in order[:len(a)]], [calls[i] for i in order[len(a):]]) >= observed
    return (hits + 1) / (permutations + 1)


def smallest_shift(calls: list[list[float]], size: int, rng: np.random.Generator) -> float | None:
    """The smallest shift of :data:`SHIFTS` that the test at 5% detects in 80% of :data:`POWER_PAIRS` pairs of
    ``size`` calls each resampled from ``calls`` (one of the pair shifted); None: none of them."""
    for shift in SHIFTS:
        rejected = 0
        for _ in range(POWER_PAIRS):
            a = [calls[i] for i in rng.integers(len(calls), size=size)]
            b = [[v + shift for v in calls[i]] for i in rng.integers(len(calls), size=size)]
            rejected += permutation_p(a, b, POWER_PERMUTATIONS, rng) <= 0.05
        if rejected >= 0.8 * POWER_PAIRS:
            return shift
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--checkout", type=Path, required=True, help="the authors' checkout (run_side_by_side.py)")
    p.add_argument("--out", type=Path, required=True, help="holds histories/; gets decisions.csv and decisions.md")
    p.add_argument("--seeds", type=int, default=30, help="generator seeds a side and decision point (default 30)")
    p.add_argument("--reference-runs", type=Path, nargs="*", default=[],
                   help="reference run folders (run_side_by_side.py's, committed or not) to decide on too")
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    runs = sorted((args.out / "histories").glob("*/s*"))
    if not runs:
        p.error(f"no histories under {args.out / 'histories'}")
    records = [load(f) for f in runs] + [reference_history(f, args.out / "histories") for f in args.reference_runs]
    authors = Authors(args.checkout.resolve(), Path("/tmp") / "pbx-ipbt-decisions")
    picks, rows = [], []
    rng = np.random.default_rng(0)
    k = args.seeds
    for rec in records:
        for kind, (ours, theirs) in DECISIONS.items():
            if kind == "restart" and restart_point(rec) is None:
                continue
            started = time.perf_counter()
            sides = {"authors": [theirs(authors, rec, s) for s in range(k)],
                     "pbx": [ours(rec, s) for s in range(k)],
                     "pbx-control": [ours(rec, s) for s in range(k, 2 * k)]}
            for side, calls in sides.items():
                picks += [[rec.name, kind, side, s, j, v] for s, call in enumerate(calls) for j, v in enumerate(call)]
            a, b, c = sides["authors"], sides["pbx"], sides["pbx-control"]
            shift = smallest_shift(b + c, k, rng)
            point = restart_point(rec) if kind == "restart" else explore_point(rec)
            rows.append([rec.name, f"{rec.algo} {kind} after round {point}", str(len(a[0])),
                         f"{np.mean(np.concatenate(a)):.3f} ± {np.std(np.concatenate(a)):.3f}",
                         f"{np.mean(np.concatenate(b)):.3f} ± {np.std(np.concatenate(b)):.3f}",
                         f"{pooled_energy(a, b):.4f}", f"{permutation_p(a, b, PERMUTATIONS, rng):.4f}",
                         f"{permutation_p(b, c, PERMUTATIONS, rng):.4f}", "none up to 0.3" if shift is None
                         else f"{shift}", converter_check(rec)])
            print(f"{rec.name} {kind}: {time.perf_counter() - started:.0f} s | {' | '.join(rows[-1][3:])}",
                  flush=True)
    pd.DataFrame(picks, columns=["history", "decision", "side", "seed", "pick", "lr"]).to_csv(
        args.out / "decisions.csv", index=False, float_format="%.6g")
    table = markdown_table(["history", "decision", "picks a call", "authors: lr mean ± sd", "pbx: lr mean ± sd",
                            "energy distance", "p (authors vs pbx)", "p (control: pbx vs pbx)",
                            "smallest shift detected (80%, 5%)", "a reference run's records rebuilt from its history"],
                           rows)
    refs = "".join([" --reference-runs", *(f" {f}" for f in args.reference_runs)]) if args.reference_runs else ""
    (args.out / "decisions.md").write_text(
        f"# BG-PBT's and IPBT's decisions: pbx against the authors' code on the same histories\n\n"
        f"`PYTHONPATH=$PWD <the reference's python> benchmarks/peers/ipbt/decisions.py --checkout {args.checkout} "
        f"--out {args.out} --seeds {k}{refs}`\n\n"
        f"Its docstring gives the decision points and the test. {k} generator seeds a side and decision point; "
        f"the control is pbx on seeds {k}..{2 * k - 1}. "
        f"p: energy distance of the pooled picks, whole calls permuted ({PERMUTATIONS} permutations). The "
        f"smallest shift: of every pick of one side, in lr (range [1e-4, 1.1]), that the test detects in 80% of "
        f"{POWER_PAIRS} simulated pairs of {k} calls resampled from pbx's.\n\n{table}\n")
    print(table)


if __name__ == "__main__":
    main()
