"""``python -m pbx.export RUN_DIR``: a trained member as plain Stable-Baselines3 files, to use outside pbx.

    python -m pbx.export runs/NAME                      # the best member of the last finished round
    python -m pbx.export runs/NAME --member 2 --out agents/hopper

Writes ``model.zip``, which the agent's SB3 class loads (``SAC.load``), and, for a member that
normalises observations or rewards, ``vecnormalize.pkl`` beside it (``VecNormalize.load``), into
``RUN_DIR/export/m<M>_round<R>/`` unless ``--out`` names a folder. Which checkpoint: as
:mod:`pbx.evaluate` picks it; what the files hold: :meth:`pbx.members.sb3.checkpoint.Checkpointed.export`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from pbx.errors import ArgumentParser, UsageError, command_parser
from pbx.evaluation import find_target
from pbx.space import shown


def build_parser() -> ArgumentParser:
    p = command_parser("python -m pbx.export", "Write a member's checkpoint of the run's last finished round as "
                       "Stable-Baselines3 files: model.zip (and vecnormalize.pkl).", __doc__)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run whose member to export")
    p.add_member_option()
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="folder for the files (default: RUN_DIR/export/m<M>_round<R>)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        target = find_target(args.run_dir, args.member)
        out = args.out or args.run_dir / "export" / f"m{target.member}_round{target.round + 1}"
        member = target.load_member("cpu")
        try:
            written = member.export(out)
        except OSError as err:
            raise UsageError(f"{out}: {err.strerror}") from None
        finally:
            member.close()
        config, raw = dict(member.config), not member.settings.normalize_obs
        # the SB3 class that loads the zip: pbx's own subclasses (PPO's update, DrAC's) load as the SB3 class
        algorithm = next(c for c in type(member.model).__mro__ if c.__module__.startswith("stable_baselines3")).__name__
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    name = type(member).name
    hyperparameters = ", ".join(f"{k} {shown(v) if isinstance(v, float) else v}" for k, v in config.items())
    print(f"wrote {written[0]}: {name}, member {target.member} after round {target.round + 1} ({target.steps:,} "
          f"steps){f'; {hyperparameters}' if hyperparameters else ''}")
    load = f'{algorithm}.load("{written[0]}")'
    if len(written) > 1:
        print(f"wrote {written[1]}: " + ("its return statistics (its policy acts on raw observations)" if raw else
                                         "the statistics its policy normalises observations with"))
        load += f', VecNormalize.load("{written[1]}", venv) with .training = False'
    print(f"load with: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
