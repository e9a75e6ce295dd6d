"""pbx's BG-PBT and IPBT beside the authors' code, on PBT-Zoo's ToyPlain: the runs, resumable.

For each seed, algorithm (``BGPBT``, ``IPBT``) and side (``pbx``, ``reference``) one
run of population 8 for 1000 steps a member: IPBT's first step 10 (1% of the
budget, the IPBT paper's choice), BG-PBT's constant step 10 too (the IPBT paper's
BG-PBT grid has 1% as its smallest step; the same ``t_ready`` on both algorithms
keeps their first generation alike). Then ``compare.py`` prints the table.

    .venv/bin/python benchmarks/peers/ipbt/run_side_by_side.py --dir /work/studies/ipbt_side \\
        --checkout /tmp/ipbt-ref --reference-python /tmp/refenv/bin/python [--seeds 8]

A run that finished (its marker ``<side>/<ALGO>/s<seed>.json`` holds its command,
exit status and wall time) is skipped; a pbx run that stopped is resumed
(``--resume``), a reference run that stopped starts again (``run.py`` empties its
folder). Runs go one at a time, niced, pairs of a seed together.

The reference checkout (not in this repository; its code stays out of it):

    git clone https://github.com/AwesomeLemon/IPBT /tmp/ipbt-ref      # the authors' IPBT and BG-PBT
    git clone https://github.com/AwesomeLemon/PBT-Zoo /tmp/pbt-zoo   # ToyPlain is in PBT-Zoo only
    cp /tmp/pbt-zoo/task/toy_plain.py /tmp/ipbt-ref/task/
    python3.11 -m venv /tmp/refenv
    /tmp/refenv/bin/pip install -r benchmarks/peers/ipbt/requirements-reference.txt

The side-by-side was run at IPBT ``c307f87`` (``config/base.yaml`` at ``3e473b4``)
and PBT-Zoo ``229479f``. Before the first reference run the runner writes its
adapters into the checkout (``reference.py``: ToyPlain with the fresh model IPBT's
restart needs, the two Hydra configs, a launcher that lets Ray reuse its workers
on the CPU); the authors' files stay as they are. Each reference run gets a
private Ray instance with one CPU and one logical GPU, so no ``ray start`` is needed.

Layout of ``--dir``: ``pbx/<ALGO>/s<seed>/`` (pbx's run folder), ``reference/<ALGO>/s<seed>/``
(the reference's experiment folder: ``best_info.yaml``, ``history_fitness.yaml``,
``best_info_<t>.yaml`` per finished generation, ``data.csv``), and beside each its
log (``s<seed>.log``) and marker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import reference

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MEMBER = HERE / "toy_plain.py"
SIDES = ("pbx", "reference")
T_READY = 10
"""Both algorithms' step, in env steps (``t_step`` on the reference's side)."""
BUDGET = 1000
POP_SIZE = 8


@dataclass(frozen=True)
class Job:
    side: str
    algo: str
    """pbx's ``--search`` name: ``BGPBT`` or ``IPBT``."""
    seed: int

    def folder(self, root: Path) -> Path:
        return root / self.side / self.algo / f"s{self.seed}"

    def marker(self, root: Path) -> Path:
        return self.folder(root).with_suffix(".json")


def jobs(algos: list[str], seeds: list[int], sides: list[str]) -> list[Job]:
    """Every run, a seed's runs together, so an interrupted study still has matched pairs."""
    return [Job(side, algo, seed) for seed in seeds for algo in algos for side in sides]


def pbx_command(job: Job, folder: Path) -> list[str]:
    """A new pbx run into ``folder``, or the resume of a stopped one."""
    if (folder / "config.yaml").exists():
        return [sys.executable, str(MEMBER), "--resume", str(folder)]
    return [sys.executable, str(MEMBER), "--env", "toy-plain", "--search", job.algo, "--seed", str(job.seed),
            "--batchsize", str(POP_SIZE), "--t_ready", str(T_READY), "--max_budget", str(BUDGET),
            "--run-dir", str(folder)]


def run(job: Job, root: Path, checkout: Path | None, python: str | None) -> float:
    """Run ``job`` to its end, niced, its output in its log; write its marker. Returns its wall time (s)."""
    folder = job.folder(root)
    folder.parent.mkdir(parents=True, exist_ok=True)
    if job.side == "pbx":
        cmd = pbx_command(job, folder)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    else:
        assert checkout is not None and python is not None
        cmd = reference.command(python, checkout, job.algo, job.seed, folder)
        env = reference.environment(checkout)
    start = time.perf_counter()
    with open(folder.with_suffix(".log"), "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                             preexec_fn=lambda: os.nice(10))
    wall = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"{job.side} {job.algo} seed {job.seed} failed (exit {rc}): see {folder.with_suffix('.log')}")
    job.marker(root).write_text(json.dumps({"command": cmd, "rc": rc, "wall_s": wall,
                                            "finished": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--dir", type=Path, required=True, help="the study's folder (outside the repository)")
    p.add_argument("--checkout", type=Path, help="the reference checkout (AwesomeLemon/IPBT + ToyPlain)")
    p.add_argument("--reference-python", help="the Python of the reference's environment")
    p.add_argument("--seeds", type=int, default=8, help="seeds 0 .. N-1 (default 8)")
    p.add_argument("--algos", nargs="+", default=["BGPBT", "IPBT"], choices=list(reference.ALGOS))
    p.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    p.add_argument("--no-compare", action="store_true", help="run only; leave the table to compare.py")
    args = p.parse_args()
    root = args.dir.resolve()
    if root.is_relative_to(ROOT):
        p.error(f"--dir {root} is inside the repository: give a folder outside it")
    if "reference" in args.sides:
        if args.checkout is None or args.reference_python is None:
            p.error("the reference side needs --checkout and --reference-python (see the docstring)")
        reference.prepare(args.checkout.resolve())
    todo = [job for job in jobs(args.algos, list(range(args.seeds)), args.sides) if not job.marker(root).exists()]
    print(f"{len(todo)} runs to go in {root}", flush=True)
    for i, job in enumerate(todo, 1):
        wall = run(job, root, args.checkout.resolve() if args.checkout else None, args.reference_python)
        print(f"[{i}/{len(todo)}] {job.side} {job.algo} seed {job.seed}: {wall:.0f} s", flush=True)
    if not args.no_compare:
        import compare

        print(compare.report(root))


if __name__ == "__main__":
    main()
