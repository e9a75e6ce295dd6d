"""How often pbx's IPBT stagnation verdicts agree with the authors' rule (``AwesomeLemon/IPBT`` c307f87,
``algo/ipbt.py`` ``previous-smoothed-or-slow`` and ``algo/ipbt_utils.py`` ``train_approximate_gp``), next to how
often the authors' rule agrees with itself under another seed.

Run it with the reference environment (GPyTorch 1.6 and torch on the CPU)::

    /work/studies/refenv/bin/python benchmarks/peers/ipbt/smoother_agreement.py [--seeds 0 1 2]

It re-implements the authors' rule with GPyTorch as they configure it, runs pbx's
``pbx.strategies.ipbt.stagnated`` in pbx's own environment (a subprocess of ``--pbx-python``, this file with
``--pbx``: the sequences go in on stdin, the verdicts come out on stdout), and prints, over every round of every
sequence, how often two rules' verdicts (the round failed or not) agree, and how many rounds apart their first
restarts (``patience`` failures in a row, or the slow rule) land. The sequences are the round bests of the
step-size study's IPBT runs (each generation; ``--whole-runs``: each run's rounds as one sequence too) and
seeded synthetic curves; ``--runs`` takes other pbx IPBT runs' histories instead (e.g. the noisy toy's, whose
round bests carry observation noise).

Not imported by pbx or its tests: GPyTorch is no dependency of pbx.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
RUNS = sorted((ROOT / "docs" / "results" / "step_size" / "IPBT").glob("seed*/history.csv"))
PATIENCE = 3
SLOW = 15


def run_sequences(path: Path, whole: bool) -> dict[str, list[float]]:
    """A run's round bests: each generation's (split at the restart rounds) and, with ``whole``, the whole
    run's."""
    bests: dict[int, float] = {}
    restarts: set[int] = set()
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
        for row in csv.DictReader(f):
            r, score = int(row["round"]), float(row["score"])
            if np.isfinite(score):
                bests[r] = max(bests.get(r, -np.inf), score)
            if row["restart"] == "True":
                restarts.add(r)
    rounds = sorted(bests)
    name = path.parent.name
    out = {f"{name}/all": [bests[r] for r in rounds]} if whole else {}
    starts = [0, *sorted(restarts)]
    for g, (a, b) in enumerate(zip(starts, [*starts[1:], rounds[-1] + 1])):
        out[f"{name}/gen{g}"] = [bests[r] for r in rounds if a <= r < b]
    return out


def synthetic(count: int = 6, seed: int = 0) -> dict[str, list[float]]:
    """Learning curves of 12 to 30 rounds: rising, rising then flat, flat, with noise of several sizes."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(count):
        n = int(rng.integers(12, 31))
        t = np.arange(n, dtype=float)
        knee = rng.uniform(0.2, 1.5) * n
        curve = np.minimum(t, knee) * rng.uniform(0.5, 2.0) + rng.normal(0, rng.uniform(0.2, 3.0), n)
        out[f"synthetic{i}"] = np.maximum.accumulate(curve).tolist() if i % 3 == 0 else curve.tolist()
    return out


def reference_failed(bests: np.ndarray, seed: int) -> bool:
    """The authors' verdict on a generation's round bests (the before-training score already left out): the
    slow rule, then ``train_approximate_gp_and_gauge_improvement`` (its plot left out)."""
    import gpytorch
    import torch

    if not np.std(bests) > 0:
        return True  # their z-scores are NaN and their fit raises on them; pbx's rule counts the round failed
    train_y = torch.tensor(bests)  # float64, as theirs (a pandas Series' values)
    train_y = (train_y - train_y.mean()) / train_y.std()
    failed = False
    if len(bests) >= SLOW:
        diff = train_y.max() - train_y[:-SLOW + 1].max()
        failed = bool(diff < 1)
    train_x = torch.linspace(0, 1, len(bests))  # float32, as theirs

    class ApproximateGPModel(gpytorch.models.ApproximateGP):
        def __init__(self, inducing_points):
            distribution = gpytorch.variational.CholeskyVariationalDistribution(inducing_points.size(-1))
            strategy = gpytorch.variational.VariationalStrategy(self, inducing_points, distribution,
                                                                learn_inducing_locations=True)
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    torch.manual_seed(seed)  # the variational mean's initial jitter (mean_init_std 1e-3) is the fit's only draw
    model = ApproximateGPModel(train_x)
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    objective = gpytorch.mlls.PredictiveLogLikelihood(likelihood, model, num_data=train_y.numel())
    optimizer = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()), lr=0.2)
    iterations = 50
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=iterations)
    model.train()
    likelihood.train()
    for _ in range(iterations):
        loss = -objective(model(train_x), train_y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    model.eval()
    likelihood.eval()
    with torch.no_grad():
        mean = model(train_x).mean  # at the original inputs: the strategy learns a clone of them
    return failed or not bool(mean[-1] > mean[-2])


def verdicts(bests: list[float], failed) -> list[bool]:
    """``failed(prefix)`` for each prefix of two or more rounds; a prefix of one round never fails."""
    return [False] + [failed(np.asarray(bests[:end], float)) for end in range(2, len(bests) + 1)]


def first_restart(bests: list[float], fails: list[bool]) -> int:
    """The round whose decisions restart (``patience`` failures in a row, or the slow rule), or the sequence's
    length when none does."""
    run = 0
    for end, failed in enumerate(fails, start=1):
        slow = end >= SLOW and failed and _slow(np.asarray(bests[:end], float))
        run = PATIENCE if slow else run + 1 if failed else 0
        if run >= PATIENCE:
            return end - 1
    return len(bests)


def _slow(bests: np.ndarray) -> bool:
    z = (bests - bests.mean()) / bests.std(ddof=1)
    return bool(z.max() - z[:-SLOW + 1].max() < 1)


def pbx_main() -> None:
    """In pbx's environment: the verdicts of ``pbx.strategies.generational.stagnation.stagnated`` with each of its
    smoothers
    for the sequences on stdin."""
    from pbx.strategies.generational.stagnation import SMOOTHERS, stagnated

    sequences = json.load(sys.stdin)
    json.dump({smoother: {name: verdicts(seq, lambda b, s=smoother: stagnated(b, SLOW, s)[0])
                          for name, seq in sequences.items()} for smoother in SMOOTHERS}, sys.stdout)


def compare(sequences: dict[str, list[float]], a: dict[str, list[bool]], b: dict[str, list[bool]]) -> str:
    same = total = 0
    distances = []
    for name, seq in sequences.items():
        same += sum(x == y for x, y in zip(a[name][1:], b[name][1:]))
        total += len(seq) - 1
        distances.append(abs(first_restart(seq, a[name]) - first_restart(seq, b[name])))
    return (f"verdicts agree {100 * same / total:5.1f}% of {total} rounds; first restart "
            f"{np.mean(distances):.2f} rounds apart on average, {max(distances)} at most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pbx", action="store_true", help="internal: pbx's verdicts, stdin to stdout")
    parser.add_argument("--pbx-python", default=str(ROOT / ".venv" / "bin" / "python")
                        if (ROOT / ".venv").exists() else "/work/main/.venv/bin/python")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--synthetic", type=int, default=6, help="how many synthetic curves")
    parser.add_argument("--whole-runs", action="store_true", help="each run's rounds as one sequence too")
    parser.add_argument("--runs", type=Path, nargs="+", default=RUNS,
                        help="pbx IPBT runs' history.csv (or history.csv.gz) files (default: the step-size study's)")
    args = parser.parse_args()
    if args.pbx:
        pbx_main()
        return
    sequences: dict[str, list[float]] = {}
    for path in args.runs:
        sequences |= run_sequences(path, args.whole_runs)
    sequences |= synthetic(args.synthetic)
    sequences = {k: v for k, v in sequences.items() if len(v) >= 2}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([args.pbx_python, __file__, "--pbx"], input=json.dumps(sequences), env=env,
                          capture_output=True, text=True, check=True)
    pbx = json.loads(done.stdout)
    refs = {s: {k: verdicts(v, lambda b, s=s: reference_failed(b, s)) for k, v in sequences.items()}
            for s in args.seeds}
    print(f"{len(sequences)} sequences ({len(args.runs)} runs' generations{' and whole runs' * args.whole_runs}, "
          f"{args.synthetic} synthetic curves)")
    for i, s in enumerate(args.seeds):
        for t in args.seeds[i + 1:]:
            print(f"reference seed {s} vs reference seed {t}: {compare(sequences, refs[s], refs[t])}")
    for smoother, ours in pbx.items():
        for s in args.seeds:
            print(f"pbx ({smoother}) vs reference seed {s}: {compare(sequences, ours, refs[s])}")


if __name__ == "__main__":
    main()
