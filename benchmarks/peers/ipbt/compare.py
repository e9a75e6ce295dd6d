"""Compare pbx's BG-PBT and IPBT with the authors' on ToyPlain: final scores over seeds (``run_side_by_side.py``).

Two answers per run, each taken the same way on both sides:

- **final population best**: the best score among the members of the run's last
  round (pbx: ``history.csv``'s last round; reference: each member's last entry in
  ``history_fitness.yaml``, the first candidate of its ``save_best``). This is
  pbx's answer for every strategy; the two sides compare directly.
- **generation-end best**: the reference's own final answer (``best_info.yaml``,
  spec section 2.9): the best of the final population and of each finished
  generation's best member at its last round (``best_info_<t>.yaml``). pbx's run
  gets the same rule from its history (``--member kept``: the best of its last round
  and of each round just before a restart round), so this column compares too; it
  differs from the first only where a restart lost the lead.

Per algorithm and side: mean ± sd over seeds and the IQM with rliable's 95%
stratified-bootstrap interval (``pbx.reporting.stats``); per algorithm,
P(pbx > reference) with its interval. Wall times come from the runner's markers
(the whole process: start-up, Ray, the run) and from each run's own clock (pbx:
``history.csv``'s ``wall_s``; reference: ``runtime.yaml``, ``algo.run()``).

    .venv/bin/python benchmarks/peers/ipbt/compare.py /work/studies/ipbt_side [--out comparison.md]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from pbx.history import generation_ends, member_row, read_csv
from pbx.reporting.stats import AGGREGATES, interval_estimates, probability_of_improvement
from pbx.reporting.tables import markdown_table

SIDES = ("pbx", "reference")
ALGOS = ("BGPBT", "IPBT")
ANSWERS = {"final": "final population best", "ends": "generation-end best"}


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


def pbx_run(folder: Path, marker: dict) -> Run:
    frame = read_csv(folder / "history.csv")
    final = member_row(frame, "best")["score"]
    return Run(float(final), float(member_row(frame, "kept")["score"]), len(generation_ends(frame)), marker["wall_s"],
               float(frame["wall_s"].max()))


def reference_run(folder: Path, marker: dict) -> Run:
    histories = yaml.safe_load((folder / "history_fitness.yaml").read_text())
    final = max(float(h[-1][1]) for h in histories)
    answer = float(yaml.safe_load((folder / "best_info.yaml").read_text())["fitness"])
    restarts = len(list(folder.glob("best_info_*.yaml")))
    return Run(final, answer, restarts, marker["wall_s"], float(yaml.safe_load((folder / "runtime.yaml").read_text())))


def load(root: Path) -> dict[str, dict[str, dict[int, Run]]]:
    """side -> algorithm -> seed -> run, for the runs whose marker says they finished."""
    runs: dict[str, dict[str, dict[int, Run]]] = {side: {algo: {} for algo in ALGOS} for side in SIDES}
    for side in SIDES:
        for algo in ALGOS:
            for marker in sorted((root / side / algo).glob("s*.json")):
                seed, folder = int(marker.stem[1:]), marker.with_suffix("")
                info = json.loads(marker.read_text())
                runs[side][algo][seed] = (pbx_run if side == "pbx" else reference_run)(folder, info)
    return runs


def interval(value: float, bounds: np.ndarray, digits: int) -> str:
    low, high = float(bounds[0]), float(bounds[1])
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]" if np.isfinite(low) else f"{value:.{digits}f}"


def score_table(runs: dict[str, dict[str, dict[int, Run]]], answer: str) -> str:
    """Rows per algorithm and side: runs, mean ± sd, IQM [95% CI], 1.2 - mean; P(pbx > reference) [95% CI]."""
    rows = []
    for algo in ALGOS:
        values = {side: np.array([getattr(r, answer) for _, r in sorted(runs[side][algo].items())])
                  for side in SIDES}
        if not all(len(v) for v in values.values()):
            continue
        for side in SIDES:
            v = values[side]
            iqm, bounds = interval_estimates(v[:, None], AGGREGATES["IQM"])
            sd = v.std(ddof=1) if len(v) > 1 else 0.0
            rows.append([algo, side, str(len(v)), f"{v.mean():.6f} ± {sd:.6f}", interval(float(iqm), bounds, 6),
                         f"{1.2 - v.mean():.2e}", ""])
        p, bounds = interval_estimates((values["pbx"][:, None], values["reference"][:, None]),
                                       probability_of_improvement)
        rows[-2][-1] = interval(float(p), bounds, 2)
    return markdown_table(["algorithm", "side", "runs", "mean ± sd", "IQM [95% CI]", "1.2 − mean",
                           "P(pbx > reference) [95% CI]"], rows)


def time_table(runs: dict[str, dict[str, dict[int, Run]]]) -> str:
    rows = []
    for algo in ALGOS:
        for side in SIDES:
            group = [r for _, r in sorted(runs[side][algo].items())]
            if not group:
                continue
            wall, own = np.array([r.wall_s for r in group]), np.array([r.own_s for r in group])
            restarts = np.array([r.restarts for r in group])
            sd = wall.std(ddof=1) if len(wall) > 1 else 0.0
            rows.append([algo, side, str(len(group)), f"{wall.mean():.0f} ± {sd:.0f}", f"{own.mean():.0f}",
                         f"{wall.sum() / 60:.1f}", f"{restarts.mean():.2f} ({restarts.min()}–{restarts.max()})"])
    return markdown_table(["algorithm", "side", "runs", "wall s/run (mean ± sd)", "run's own clock s/run",
                           "total min", "restarts/run (min–max)"], rows)


def report(root: Path) -> str:
    runs = load(root)
    lines = ["# pbx's BG-PBT and IPBT against the authors' code on ToyPlain", "",
             f"Population 8, 1000 steps a member, step 10 (IPBT's first; BG-PBT's constant), seeds 0.. per side. "
             f"Runs from `{root}`. Scores are 1.2 - theta^2 (optimum 1.2). 95% intervals: rliable's stratified "
             f"bootstrap over seeds.", ""]
    for answer, title in ANSWERS.items():
        lines += [f"## {title}", "", score_table(runs, answer), ""]
    lines += ["## restarts and wall time", "", time_table(runs), ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("root", type=Path, help="the study's folder (run_side_by_side.py --dir)")
    p.add_argument("--out", type=Path, help="also write the report here")
    args = p.parse_args()
    text = report(args.root)
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
