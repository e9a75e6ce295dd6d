"""One lent GPU, used whole: the levers measured, the ways to share the GPU measured, then long ProcGen runs.

A GPU is lent here for minutes, now and then; ProcGen's runs are 25M env steps a member. This
command spends one such loan inside ``--limit`` seconds of wall clock, and leaves what the next
loan needs to continue the same runs:

1. **bench** (``--skip-bench`` leaves it out): ``bench_gpu.py`` with the levers off (the member
   as shipped) and on (``--precision bf16 --channels-last``), each beside plain SB3: one member's
   env steps/s and where its time goes.
2. **arrangements** (``--skip-arrangements``): a population of 4 on the one device, trained by one
   process (members in turn), by 4 processes, by ``mpiexec -n 4``, and by 4 processes under NVIDIA
   MPS where ``nvidia-cuda-mps-control`` exists: total env steps/s over the rounds after the first.
   Then the image network's inference for 4 members' rollout step, in turn, on 4 CUDA streams and as
   one batched call over the members' stacked weights (``torch.func``).
3. **train**: the campaign's runs (:data:`ARMS`), all at once on the device, each a ``pbx.train``
   process at pbx's shipped ProcGen defaults (the PB2 arm a population on MPI ranks sharing the
   device, one member a rank: the arrangement ``docs/gpu.md`` measured fastest), continued from the
   archive when one is given (``--resume-from``). Each run is told to stop by the training share's
   end (``--time-limit``): it stops inside its round at a rollout boundary with the round in progress
   saved, so a loan keeps every minute it trained, and the next loan goes on inside that round.
4. **deliver**: each run's small files and the phases' outputs in ``results.tar.gz``, a
   ``summary.md``, and the archive the next loan resumes from: the run folders without their
   TensorBoard logs, each member's checkpoint made compact (``campaign_archive.py``), gzip-compressed, in
   parts of at most ``--part-mb`` MB (what a GPU machine here can send back: 8 files of 16 MiB).

The phases get fixed shares of the limit (bench 25%, arrangements 35%, the rest training, less
what delivering needs), so a slow phase cannot eat the runs' time; a phase past its share is
stopped and says so. ``--setting tiny`` shrinks everything (2 envs x 16 steps, rounds of one rollout)
for a CPU: ``tests/test_gpu_campaign.py`` runs it with a 40-second limit and resumes from its own
archive.

    python benchmarks/gpu_campaign.py --limit 540 --deliver $OUT
    python benchmarks/gpu_campaign.py --limit 540 --deliver $OUT --skip-bench --resume-from docs/results/procgen_campaign/archive
    python benchmarks/gpu_campaign.py collect DELIVERED    # back here: into docs/results/procgen_campaign/

The phases run in ``campaign_phases.py``, on the machine as ``gpu_machine.py`` finds it (its MPI, cores and
device). ``docs/gpu.md`` has the whole loan, command by command.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from pathlib import Path

import torch

from pbx.errors import ArgumentParser

from campaign_archive import collect, refuse, unpack
from campaign_phases import Arm, Campaign, arrangements, bench, deliver, train
from gpu_machine import ROOT, pick_device, pin_cores


SCORED = ("--t_ready", "262144")
"""The baselines' rounds: for ``--search none`` a round is only when members are scored, so they are scored every
262,144 steps (16 rollouts, as the first long bigfish run was) rather than at PB2's 500k: the curves are finer."""

ARMS = (
    # --search none with 3 members: 3 seeds of the fixed-hyperparameter baseline, one process
    Arm("bigfish_none", "bigfish", "none", 3, flags=SCORED),
    Arm("starpilot_none", "starpilot", "none", 3, flags=SCORED),
    # the design card's core: PB2 on ProcGen at the PB2 paper's schedule (exploit every 500k steps)
    Arm("bigfish_pb2", "bigfish", "PB2", 4, ranks=4),
)
"""The runs: pbx's shipped ProcGen defaults (the ProcGen paper's PPO, ``normalize_gamma`` 0.99, 25M steps a
member, rounds of 500k) but for what each arm's flags name (``--setting tiny`` replaces those too)."""

POPULATION = ("--t_ready", "16384", "-m", "eval_episodes=0")
"""The arrangements' runs at the paper setting: rounds of one rollout a member, no test episodes."""

TINY = ("--t_ready", "32", "--max_budget", "320000", "-m", "n_envs=2", "n_steps=16", "batch_size=16", "n_epochs=1",
        "eval_episodes=0")
"""``--setting tiny``: rounds of one 32-step rollout and one epoch, no test episodes (for a CPU and the test)."""

SHARES = {"bench": 0.25, "arrangements": 0.35}
"""The phases' shares of ``--limit``; training gets what they leave, less :data:`DELIVER_S`."""
DELIVER_S = {"paper": 60.0, "tiny": 12.0}
"""Seconds kept for stopping the runs and writing what the campaign delivers."""


def main(argv: list[str] | None = None) -> None:
    # SIGTERM as Ctrl-C: the phases' runs (in sessions of their own) are stopped on the way out, not left running
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if argv is None and sys.argv[1:2] == ["collect"]:
        if len(sys.argv) != 3:
            refuse("usage: gpu_campaign.py collect DELIVERED")
        collect(Path(sys.argv[2]))
        return
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, required=True, help="wall-clock seconds for the whole campaign")
    parser.add_argument("--work", type=Path, default=ROOT / "campaign", help="where the runs train (default campaign/)")
    parser.add_argument("--deliver", type=Path, default=None,
                        help="where results.tar.gz, summary.md and the archive's parts go (default: --work)")
    parser.add_argument("--resume-from", type=Path, default=None, metavar="PREFIX",
                        help="continue the runs of an archive: PREFIX.tar.gz.00, .01, ... as delivered")
    parser.add_argument("--setting", choices=("paper", "tiny"), default="paper",
                        help="paper: pbx's shipped ProcGen defaults; tiny: 4 envs x 16 steps, for a CPU")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--cores", type=int, default=None,
                        help="run on this many of the cores this process may use, its runs included (default all); "
                             "on a busy CPU machine 1, where two torch threads spin against each other")
    parser.add_argument("--arms", nargs="+", choices=[a.name for a in ARMS], default=[a.name for a in ARMS])
    parser.add_argument("--skip-bench", action="store_true", help="leave out phase 1 (the levers)")
    parser.add_argument("--skip-arrangements", action="store_true", help="leave out phase 2 (sharing the GPU)")
    parser.add_argument("--part-mb", type=float, default=15.0, help="the archive's part size (default 15 MB)")
    parser.add_argument("--archive-mb", type=float, default=12.0,
                        help="the archive's size at most (default 12 MB); what is sent to a GPU machine is 64 MiB "
                             "in all, the slim kit and the working tree included (docs/gpu.md has their sizes)")
    args = parser.parse_args(argv)
    check_sizes(parser, args)
    if args.work.exists() and not args.work.is_dir():
        parser.error(f"--work {args.work} is a file, not a folder: name a folder (made if missing)")
    pin_cores(parser, args.cores)
    device = pick_device(parser, args.device)
    c = Campaign(args.work.resolve(), args.setting, device, time.monotonic() + args.limit)
    where = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    c.say(f"campaign on {device} ({where}), limit {args.limit:.0f} s, setting {args.setting}, "
          f"arms {', '.join(args.arms)}, torch {torch.__version__}")
    if args.resume_from is not None:  # before --work is made: a bad archive leaves nothing behind
        c.say(f"resumed from {args.resume_from}: runs {', '.join(unpack(args.resume_from, c.work))}")
    c.work.mkdir(parents=True, exist_ok=True)
    base = list(TINY) if args.setting == "tiny" else []
    if not args.skip_bench:
        bench(c, SHARES["bench"] * args.limit)
    if not args.skip_arrangements:
        arrangements(c, SHARES["arrangements"] * args.limit, base or list(POPULATION))
    train(c, c.left() - DELIVER_S[args.setting], base, [a for a in ARMS if a.name in args.arms])
    deliver(c, (args.deliver or c.work).resolve(), args.part_mb, args.archive_mb)


def check_sizes(parser: ArgumentParser, args: argparse.Namespace) -> None:
    """Each size flag a finite number in its range, before anything is made (``nan`` is false in every comparison,
    so a range check alone lets it through, and ``inf`` would let the runs outlive any limit): one line and exit 2
    otherwise."""
    deliver = DELIVER_S[args.setting]
    ranges = (("--limit", args.limit, deliver, f"seconds, above the {deliver:.0f} s kept for delivering"),
              ("--part-mb", args.part_mb, 0.0, "MB, positive and at least one byte (0.000001)"),
              ("--archive-mb", args.archive_mb, 0.0, "MB, positive"))
    for flag, value, low, what in ranges:
        if not math.isfinite(value) or value <= low or (flag == "--part-mb" and value * 1e6 < 1):
            parser.error(f"{flag} {value:g}: must be a finite number of {what}")


if __name__ == "__main__":
    main()
