"""``python -m pbx.replay RUN_DIR``: train a fresh agent with one member's discovered schedule.

    python -m pbx.replay runs/NAME                      # the best member of the last round
    python -m pbx.replay runs/NAME --member 2 --seed 1  # member 2's schedule, another learner seed
    python -m pbx.report runs/NAME runs/NAME-replay-m2 runs/BASELINE

The replay is an ordinary run folder (default ``runs/<name>-replay-m<M>``) of
``--search replay`` with one member, so ``python -m pbx.train --resume`` continues
it and the report labels it ``replay`` beside the original population and a
baseline. What it keeps of the original, and why: :mod:`pbx.schedule`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from pbx.errors import ArgumentParser, UsageError, command_parser
from pbx.runners.start import exit_code, launch, new_run, resumed_run
from pbx.schedule import Replay, plan_replay
from pbx.settings import check_seed


def build_parser() -> ArgumentParser:
    p = command_parser("python -m pbx.replay", "Train one fresh member with the configs along member M's lineage, "
                       "switched at the same step counts (Ray Tune's PBT replay), into a new run folder.", __doc__)
    p.add_argument("source", metavar="RUN_DIR", type=Path, help="the run whose member's schedule to replay")
    p.add_member_option()
    p.add_argument("--run-dir", "--run_dir", dest="run_dir", type=Path, default=None,
                   help="the replay's run folder (default: runs/<original name>-replay-m<M>)")
    p.add_argument("--seed", type=int, default=None,
                   help="run seed of the replay (default: the original's: its member 0's learner seed and its "
                        "test levels every round)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.seed is not None:  # before the plan line, which would otherwise precede the refusal
            check_seed(args.seed, "--seed")
        replay = plan_replay(args.source, args.member, args.seed)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(_plan_line(replay, args.source), flush=True)
    run_dir = args.run_dir if args.run_dir is not None else Path("runs") / replay.name
    code = exit_code(lambda: launch(lambda comm: new_run([replay.layer], run_dir=run_dir, comm=comm)))
    for budget in replay.budgets:  # the original's resumes to a larger max_budget, each where it made one
        if code != 0:
            break
        code = exit_code(lambda: launch(lambda comm: resumed_run(run_dir, {"max_budget": budget}, comm=comm)))
    return code


def _plan_line(replay: Replay, source: Path) -> str:
    """``replay: member 2 of runs/X, lineage m1 > m3 > m2, 6 config changes in 50 rounds``."""
    owners = replay.lineage["member"].tolist()
    chain = " > ".join(f"m{m}" for i, m in enumerate(owners) if i == 0 or m != owners[i - 1])
    done = len(replay.lineage)
    rest = "" if done == replay.rounds else (f" (the run has {done} of its {replay.rounds} rounds: the last config "
                                              f"holds for the rest)")
    if replay.budgets:
        budgets = " then ".join(f"{b:,}" for b in replay.budgets)
        rest += (f"; trained to max_budget {replay.layer['run']['max_budget']:,}, then resumed to {budgets}, as the "
                 f"run was")
    return (f"replay: member {replay.member} of {source}, lineage {chain}, {replay.changes} config changes in "
            f"{done} rounds{rest}")


if __name__ == "__main__":
    sys.exit(main())
