"""pbx's BG-PBT and IPBT beside the authors' code, on PBT-Zoo's ToyPlain and ToyDeceptive: the runs, resumable.

For each toy, seed, algorithm (``BGPBT``, ``IPBT``) and side (``pbx``, ``reference``)
one run of population 8 at a step of 10 (IPBT's first step, 1% of 1,000; BG-PBT's
constant step too, so the two algorithms' first generations are alike):

- ``toy-plain`` (``toy_plain.py``) for 300 steps a member, a budget far from the
  toy's cap: the lowest ``lr`` from the start ends at 1.2 - 0.27^2 = 1.127, so the
  distance to the optimum 1.2 (the score ``compare.py`` reads, on a log scale)
  tells searches apart where 1,000 steps put every run within 1e-3 of 1.2;
- ``toy-deceptive-zoo`` (``toy_deceptive.py``, PBT-Zoo's ToyDeceptive to the bit) for
  1,000 steps, its ``t_max``: the target schedule falls to 0 at the run's end;
- ``toy-plain-noisy`` (``toy_plain.py``'s ToyPlain with Gaussian observation noise of
  standard deviation ``toy_plain.NOISE`` on the scores the algorithms see, the same
  noise in the reference's adapter, ``reference.py``) for :data:`NOISY_BUDGET` steps:
  the toy where both algorithms restart and the generations after a restart train.
  On the noise-free toys BG-PBT never restarts (a flat or rising best is progress to
  its rule) and IPBT's generations after a restart on ToyDeceptive cannot train;
  here the true gain of a round falls below the noise as the score nears 1.2, so the
  generation's best stalls, and ToyPlain always trains. ``compare.py`` reads the
  noise-free score (pbx's test score, the reference's ``true_fitness.jsonl``).

``--arms`` adds pbx runs with one kept departure switched on (:data:`ARMS`, the
ablation), each beside pbx's default runs of the same toy and seeds. Then
``compare.py`` prints the tables.

    .venv/bin/python benchmarks/peers/ipbt/run_side_by_side.py --dir /work/studies/ipbt_side_v2 \\
        --checkout /work/studies/ipbt-ref --reference-python /work/studies/refenv/bin/python \\
        --arms all [--seeds 8] [--commit-to docs/results/ipbt_side_v2]

The reference side runs the authors' code as they wrote it: a reference run that
stops with an error (the authors' IPBT on a flat generation, ``reference.py``) is
a finding of the reference, not a failure of the study: its marker records the exit
status, the error's last line and the last round it started (``crash``), and the
study goes on. ``--sides reference-guarded`` runs the reference with the harness's
flat-generation guard instead (pbx's rule answers for the authors' smoother there),
in a side of its own that ``compare.py`` never counts as the reference.

A run that finished (its marker ``<toy>/<side>/<ALGO>/s<seed>.json`` holds its
command, exit status and wall time) is skipped; a pbx run that stopped is resumed
(``--resume``), a reference run that stopped starts again (``run.py`` empties its
folder). Runs go one at a time, niced, the default sides' runs of a seed together
before the ablation's, so an interrupted study still has matched pairs.
``--commit-to`` copies each finished run's small files (pbx: ``config.yaml``,
``history.csv``, ``strategy.csv``; the reference: its ``*.yaml``, ``data.csv``,
IPBT's ``df_idx_at_restart.csv`` and, on the noisy toy, ``true_fitness.jsonl``; the marker)
into that folder of the repository, the large ones gzipped
(:data:`PACKED`: ``history.csv.gz``, which ``compare.py`` reads as it reads the
study's plain files), and commits them, that folder's files only
(``git commit -- <files>``).

The reference checkout (not in this repository; its code stays out of it):

    git clone https://github.com/AwesomeLemon/IPBT /work/studies/ipbt-ref    # the authors' IPBT and BG-PBT
    git clone https://github.com/AwesomeLemon/PBT-Zoo /work/studies/pbt-zoo # the toys are in PBT-Zoo only
    cp /work/studies/pbt-zoo/task/toy_{plain,deceptive}.py /work/studies/ipbt-ref/task/
    python3.11 -m venv /work/studies/refenv
    /work/studies/refenv/bin/pip install -r benchmarks/peers/ipbt/requirements-reference.txt

The first side-by-side was run at IPBT ``c307f87`` (``config/base.yaml`` at ``3e473b4``)
and PBT-Zoo ``229479f``. Before the first reference run the runner writes its
adapters into the checkout (``reference.py``: the toys with the fresh model IPBT's
restart needs, the noisy toy, the Hydra configs, the launchers that let Ray reuse
its workers on the CPU, with and without the guard); the authors' files stay as they are. Each reference run gets a
private Ray instance with one CPU and one logical GPU, so no ``ray start`` is needed.

Layout of ``--dir``: ``<toy>/pbx/<ALGO>/s<seed>/`` (pbx's run folder),
``<toy>/pbx-<arm>/<ALGO>/s<seed>/`` (an ablation arm's), ``<toy>/reference/<ALGO>/s<seed>/``
(``<toy>/reference-guarded/...`` for the guarded side)
(the reference's experiment folder: ``best_info.yaml``, ``history_fitness.yaml``,
``best_info_<t>.yaml`` per finished generation, ``data.csv``), and beside each its
log (``s<seed>.log``) and marker.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import reference

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SIDES = ("pbx", "reference")
"""The sides a study runs by default; ``reference-guarded`` (:data:`GUARDED`) only when named."""
GUARDED = "reference-guarded"
"""The reference run through the launcher with pbx's flat-generation guard (``reference.GUARDED_LAUNCHER``)."""
REFERENCE_SIDES = ("reference", GUARDED)
IDX_AT_RESTART = "df_idx_at_restart.csv"
"""The reference IPBT's record of each trial's lineage (``decisions.py`` gives it to the authors' restart)."""
NOISY_BUDGET = 1000
"""``toy-plain-noisy``'s env steps a member."""
POP_SIZE = 8
PACKED = frozenset({"history.csv", "strategy.csv", "data.csv", "history_fitness.yaml", "history_population.yaml",
                    "history_solution.yaml", reference.TRUE_SCORES, IDX_AT_RESTART})
"""The small files ``--commit-to`` commits gzipped (``<name>.gz``): a run's rows, most of its bytes."""


@dataclass(frozen=True)
class Toy:
    script: Path
    """The member's file, run as pbx's command line."""
    t_ready: int
    """Both algorithms' step, in env steps (``t_step`` on the reference's side)."""
    budget: int
    """Env steps a member (``t_max``)."""


TOYS = {"toy-plain": Toy(HERE / "toy_plain.py", 10, 300),
        "toy-deceptive-zoo": Toy(HERE / "toy_deceptive.py", 10, 1000),
        "toy-plain-noisy": Toy(HERE / "toy_plain.py", 10, NOISY_BUDGET)}
PB2_TIME_BOUNDS = {"lengthscale_floor": "0.00001", "lengthscale_cap": "1", "lengthscale_per_input": "false",
                   "decay_cap": "0.5"}
"""The time kernel's bounds BG-PBT and IPBT inherited from PB2 before (its lengthscale in [1e-5, 1], its decay at
most 0.5)."""
ARMS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "climb": (("BGPBT", "IPBT"), {"tr_search": "climb"}),
    "perturb": (("BGPBT", "IPBT"), {"tr_search": "perturb"}),
    "lowest-mean": (("BGPBT", "IPBT"), {"prior_mean": "lowest"}),
    "selection": (("BGPBT", "IPBT"), {"exploit_rule": "selection"}),
    "local-restart": (("BGPBT",), {"restart_search": "local"}),
    "tr-stay": (("BGPBT",), {"tr_collapse": "stay"}),
    "cut": (("BGPBT", "IPBT"), {"last_rounds": "cut"}),
    "space-prior": (("BGPBT", "IPBT"), {"restart_prior": "space"}),
    "latest-centre": (("IPBT",), {"restart_centre": "latest"}),
    "lineage-after": (("IPBT",), {"lineage_start": "after"}),
    "signal-cap-2": (("BGPBT", "IPBT"), {"signal_cap": "2", "signal_floor": "0.0001"}),
    "wide-noise": (("BGPBT", "IPBT"), {"noise_floor": "0.0001", "noise_cap": "10"}),
    "lowest-across": (("IPBT",), {"across_mean": "lowest"}),
    "start-time": (("BGPBT", "IPBT"), {"interval_time": "start"}),
    "latent-std": (("BGPBT", "IPBT"), {"ucb_std": "latent"}),
    "own-pending": (("BGPBT", "IPBT"), {"pending_at": "own"}),
    "places-cut": (("BGPBT", "IPBT"), {"cut_rule": "places"}),
    "tr-explored": (("IPBT",), {"tr_success": "explored"}),
    "pb2-time-bounds": (("BGPBT", "IPBT"), PB2_TIME_BOUNDS),
    "earlier-gp": (("BGPBT", "IPBT"), {"signal_cap": "2", "signal_floor": "0.0001", "noise_floor": "0.0001",
                                       "noise_cap": "10", "across_mean": "lowest", "interval_time": "start",
                                       "ucb_std": "latent", "pending_at": "own", "cut_rule": "places",
                                       "tr_success": "explored", **PB2_TIME_BOUNDS}),
}
"""An ablation arm: the algorithms it applies to and the one setting that switches a kept departure on (pbx's
choice where it departs from the authors' code, docs/algorithms.md); ``earlier-gp`` switches on together pbx's earlier
choices for the nine that the authors' code now decides (the GP's bounds, its time kernel's bounds, its time stamps
and query, UCB's std, the pending points, the mean across generations, the cut's ties, the trust region's count). ``optimizer_state: clear`` is not an arm: the toys have no optimizer
state, so it changes nothing on them."""


@dataclass(frozen=True)
class Job:
    toy: str
    side: str
    """``pbx``, ``reference``, ``reference-guarded`` or ``pbx-<arm>``."""
    algo: str
    """pbx's ``--search`` name: ``BGPBT`` or ``IPBT``."""
    seed: int

    def folder(self, root: Path) -> Path:
        return root / self.toy / self.side / self.algo / f"s{self.seed}"

    def marker(self, root: Path) -> Path:
        return self.folder(root).with_suffix(".json")

    @property
    def overrides(self) -> dict[str, str]:
        return ARMS[self.side.removeprefix("pbx-")][1] if self.side.startswith("pbx-") else {}


def jobs(toys: list[str], algos: list[str], seeds: list[int], sides: list[str], arms: list[str]) -> list[Job]:
    """Every run: per toy and seed the sides' runs together, then the ablation's arms, seed by seed."""
    base = [Job(toy, side, algo, seed) for toy in toys for seed in seeds for algo in algos for side in sides]
    ablation = [Job(toy, f"pbx-{arm}", algo, seed) for toy in toys for seed in seeds for arm in arms
                for algo in algos if algo in ARMS[arm][0]]
    return base + ablation


def pbx_command(job: Job, folder: Path) -> list[str]:
    """A new pbx run into ``folder``, or the resume of a stopped one."""
    toy = TOYS[job.toy]
    if (folder / "config.yaml").exists():
        return [sys.executable, str(toy.script), "--resume", str(folder)]
    extra = ["-m", *(f"{k}={v}" for k, v in job.overrides.items())] if job.overrides else []
    return [sys.executable, str(toy.script), "--env", job.toy, "--search", job.algo, "--seed", str(job.seed),
            "--batchsize", str(POP_SIZE), "--t_ready", str(toy.t_ready), "--max_budget", str(toy.budget),
            "--run-dir", str(folder), *extra]


def run(job: Job, root: Path, checkout: Path | None, python: str | None) -> float:
    """Run ``job`` to its end, niced, its output in its log; write its marker. Returns its wall time (s). A pbx
    run that fails stops the study; a reference run that stops with an error is recorded (:func:`crash`)."""
    folder = job.folder(root)
    folder.parent.mkdir(parents=True, exist_ok=True)
    toy = TOYS[job.toy]
    if job.side not in REFERENCE_SIDES:
        cmd = pbx_command(job, folder)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    else:
        assert checkout is not None and python is not None
        cmd = reference.command(python, checkout, job.algo, job.seed, folder, job.toy, toy.t_ready, toy.budget,
                                guarded=job.side == GUARDED)
        env = reference.environment(checkout)
    start = time.perf_counter()
    log_path = folder.with_suffix(".log")
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        offset = log.tell()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                             preexec_fn=lambda: os.nice(10))
    wall = time.perf_counter() - start
    if rc != 0 and job.side not in REFERENCE_SIDES:
        raise SystemExit(f"{job.toy} {job.side} {job.algo} seed {job.seed} failed (exit {rc}): see {log_path}")
    marker: dict[str, object] = {"command": cmd, "rc": rc, "wall_s": wall,
                                 "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    if job.side in REFERENCE_SIDES:
        with open(log_path, errors="replace") as log:
            log.seek(offset)
            text = log.read()
        marker["guarded"] = job.side == GUARDED
        if job.side == GUARDED:
            marker["flat_guards"] = flat_guards(text)
        if rc != 0:
            marker["crash"] = crash(text)
    job.marker(root).write_text(json.dumps(marker, indent=1))
    return wall


def flat_guards(log: str) -> int:
    """How often a guarded reference run's IPBT met a flat generation, where the launcher's guard answered for
    the authors' smoother (``reference.GUARDED_LAUNCHER``): the lines it printed in the run's log."""
    return log.count(reference.GUARD_LINE)  # the authors' prints may leave a line open before it


def crash(log: str) -> dict[str, object]:
    """Where a reference run stopped, from its log: the error (the traceback's last line), the authors' frame
    it was raised through last (``algo/...``), the last round it started (``Start tick <t>``) and how many of its
    rounds started."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)\b", line)), "")
    frames = [line for line in lines if line.startswith("File ") and "/algo/" in line]
    ticks = [int(t) for t in re.findall(r"Start tick (\d+)", log)]
    return {"error": error, "frame": frames[-1] if frames else "", "last_tick": ticks[-1] if ticks else None,
            "ticks": len(ticks)}


def small_files(job: Job, root: Path) -> list[Path]:
    """The files of a finished run that let its numbers be recomputed (no checkpoints, curves or logs)."""
    folder = job.folder(root)
    names = (["config.yaml", "history.csv", "strategy.csv"] if job.side not in REFERENCE_SIDES else
             sorted(p.name for p in folder.glob("*.yaml")) + ["data.csv", reference.TRUE_SCORES, IDX_AT_RESTART])
    return [job.marker(root)] + [folder / name for name in names if (folder / name).is_file()]


def copy_small_files(done: list[Job], root: Path, dest: Path) -> None:
    """Copy the small files of the ``done`` runs under ``dest`` where they are not yet, those in :data:`PACKED`
    gzipped (the same bytes for the same file: no name or time in the header)."""
    for job in done:
        for path in small_files(job, root):
            target = dest / path.relative_to(root)
            if path.name in PACKED:
                target = target.with_name(f"{path.name}.gz")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                if path.name in PACKED:
                    target.write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
                else:
                    shutil.copyfile(path, target)


def keep(done: list[Job], root: Path, dest: Path) -> None:
    """Copy the small files of the ``done`` runs under ``dest`` (a folder of the repository,
    :func:`copy_small_files`) and commit that folder's new or changed files (only those)."""
    copy_small_files(done, root, dest)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", str(dest)],
                            cwd=ROOT, capture_output=True, text=True).stdout
    files = [line[3:] for line in status.splitlines() if line.strip()]
    if not files:
        return
    message = (f"ipbt side-by-side: the small files of {len(done)} finished runs" if len(done) != 1 else
               f"ipbt side-by-side: {done[0].toy} {done[0].side} {done[0].algo} seed {done[0].seed} finished "
               f"(its small files)")
    for attempt in range(5):  # the index is shared: another commit may hold its lock for a moment
        ok = subprocess.call(["git", "add", "--", *files], cwd=ROOT) == 0 and subprocess.call(
            ["git", "commit", "-q", "-m", message, "--", *files], cwd=ROOT) == 0
        if ok:
            return
        time.sleep(10 * (attempt + 1))
    print(f"could not commit {len(files)} files under {dest}; they stay for the next commit", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--dir", type=Path, required=True, help="the study's folder (outside the repository)")
    p.add_argument("--checkout", type=Path, help="the reference checkout (AwesomeLemon/IPBT + PBT-Zoo's toys)")
    p.add_argument("--reference-python", help="the Python of the reference's environment")
    p.add_argument("--seeds", type=int, default=8, help="seeds 0 .. N-1 (default 8)")
    p.add_argument("--toys", nargs="+", default=list(TOYS), choices=list(TOYS))
    p.add_argument("--algos", nargs="+", default=["BGPBT", "IPBT"], choices=list(reference.ALGOS))
    p.add_argument("--sides", nargs="+", default=list(SIDES), choices=[*SIDES, GUARDED],
                   help=f"default: {' '.join(SIDES)}; {GUARDED}: the reference with pbx's flat-generation guard")
    p.add_argument("--arms", nargs="*", default=[], choices=[*ARMS, "all"],
                   help="ablation arms: pbx runs with one kept departure on (all: every arm)")
    p.add_argument("--budget", type=int, help="env steps a member on every toy (tests; default: each toy's)")
    p.add_argument("--commit-to", type=Path, help="a folder of the repository: copy and commit each finished "
                   "run's small files there")
    p.add_argument("--no-compare", action="store_true", help="run only; leave the table to compare.py")
    args = p.parse_args()
    root = args.dir.resolve()
    if root.is_relative_to(ROOT):
        p.error(f"--dir {root} is inside the repository: give a folder outside it")
    if args.budget is not None:
        for name, toy in TOYS.items():
            TOYS[name] = Toy(toy.script, toy.t_ready, args.budget)
    dest = args.commit_to.resolve() if args.commit_to else None
    if dest is not None and not dest.is_relative_to(ROOT):
        p.error(f"--commit-to {dest} is outside the repository")
    arms = list(ARMS) if "all" in args.arms else args.arms
    if set(args.sides) & set(REFERENCE_SIDES):
        if args.checkout is None or args.reference_python is None:
            p.error("the reference side needs --checkout and --reference-python (see the docstring)")
        reference.prepare(args.checkout.resolve(), tuple((t, TOYS[t].t_ready, TOYS[t].budget) for t in args.toys))
    every = jobs(args.toys, args.algos, list(range(args.seeds)), args.sides, arms)
    todo = [job for job in every if not job.marker(root).exists()]
    if dest is not None:  # runs that finished before a stop: their files may not be in the repository yet
        keep([job for job in every if job.marker(root).exists()], root, dest)
    print(f"{len(todo)} runs to go in {root}", flush=True)
    for i, job in enumerate(todo, 1):
        wall = run(job, root, args.checkout.resolve() if args.checkout else None, args.reference_python)
        print(f"[{i}/{len(todo)}] {job.toy} {job.side} {job.algo} seed {job.seed}: {wall:.0f} s", flush=True)
        if dest is not None:
            keep([job], root, dest)
    if not args.no_compare:
        import compare

        print(compare.report(root))


if __name__ == "__main__":
    main()
