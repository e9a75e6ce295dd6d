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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pbx.errors import ArgumentParser, UsageError, command_parser
from pbx.evaluation import Target, find_target
from pbx.space import shown


def build_parser() -> ArgumentParser:
    p = command_parser("python -m pbx.export", "Write a member's checkpoint of the run's last finished round as "
                       "Stable-Baselines3 files: model.zip (and vecnormalize.pkl).", __doc__)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run whose member to export")
    p.add_member_option()
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="folder for the files (default: RUN_DIR/export/m<M>_round<R>)")
    return p


@dataclass(frozen=True)
class Exported:
    """What :func:`export` wrote, and of what: the files (``model.zip``, then ``vecnormalize.pkl`` where there is
    one), the member's place in the run and its hyperparameters, and the SB3 class that loads the zip."""

    files: list[Path]
    target: Target
    member: str
    """The member's kind (its :attr:`pbx.members.Member.name`)."""
    config: dict[str, Any]
    raw: bool
    """Whether the policy acts on raw observations (vecnormalize.pkl then holds only return statistics)."""
    algorithm: str


def export(run_dir: Path, member: str | int = "best", out: Path | None = None) -> Exported:
    """Write member ``member`` (``--member``) of the run in ``run_dir`` as SB3 files into ``out`` (default
    ``RUN_DIR/export/m<M>_round<R>``); a :class:`UsageError` for what cannot be exported."""
    target = find_target(Path(run_dir), str(member))
    out = out or Path(run_dir) / "export" / f"m{target.member}_round{target.round + 1}"
    loaded = target.load_member("cpu")
    try:
        written = loaded.export(out)
    except OSError as err:
        raise UsageError(f"{out}: {err.strerror}") from None
    finally:
        loaded.close()
    # the SB3 class that loads the zip: pbx's own subclasses (PPO's update, DrAC's) load as the SB3 class
    algorithm = next(c for c in type(loaded.model).__mro__ if c.__module__.startswith("stable_baselines3")).__name__
    return Exported(list(written), target, type(loaded).name, dict(loaded.config), not loaded.settings.normalize_obs,
                    algorithm)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        done = export(args.run_dir, args.member, args.out)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    written, target = done.files, done.target
    hyperparameters = ", ".join(f"{k} {shown(v) if isinstance(v, float) else v}" for k, v in done.config.items())
    print(f"wrote {written[0]}: {done.member}, member {target.member} after round {target.round + 1} "
          f"({target.steps:,} steps){f'; {hyperparameters}' if hyperparameters else ''}")
    load = f'{done.algorithm}.load("{written[0]}")'
    if len(written) > 1:
        print(f"wrote {written[1]}: " + ("its return statistics (its policy acts on raw observations)" if done.raw else
                                         "the statistics its policy normalises observations with"))
        load += f', VecNormalize.load("{written[1]}", venv) with .training = False'
    print(f"load with: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
