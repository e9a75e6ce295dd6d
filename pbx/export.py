"""``python -m pbx.export RUN_DIR``: a trained member as plain Stable-Baselines3 files, to use outside pbx.

    python -m pbx.export runs/NAME                      # the best member of the last finished round
    python -m pbx.export runs/NAME --member 2 --out agents/hopper

Writes ``model.zip``, which the agent's SB3 class loads (``SAC.load``), and, for a member that
normalises observations or rewards, ``vecnormalize.pkl`` beside it (``VecNormalize.load``), into
``RUN_DIR/export/m<M>_round<R>/`` unless ``--out`` names a folder. Which checkpoint: as
:mod:`pbx.evaluate` picks it; what the files hold: :meth:`pbx.members.sb3.checkpoint.Checkpointed.export`.
Beside them ``env.yaml`` records the env the member's test episodes play, as plain SB3 builds it (the id,
its kwargs, the wrapper, the frame stack: :mod:`pbx.envs.plain`), and the command prints the code that
plays an episode with it; ProcGen has no such env outside pbx, and its IMPALA policy is pbx's class.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from pbx.envs import family, is_known
from pbx.envs.plain import PlainEnv, snippet
from pbx.errors import ArgumentParser, UsageError, command_parser
from pbx.evaluation import Target, find_target
from pbx.files import durable_write
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
    env: PlainEnv | None
    """The env to play the member in outside pbx (``env.yaml``); None for a family SB3 has no env of."""
    deterministic: bool
    """Whether the member's test episodes take the policy's most likely action."""

    def snippet(self) -> str | None:
        """Python that plays one episode of the exported member in plain SB3 (:func:`pbx.envs.plain.snippet`)."""
        if self.env is None:
            return None
        vecnormalize = self.files[1] if len(self.files) > 1 and self.files[1].name == "vecnormalize.pkl" else None
        return snippet(self.env, self.algorithm, self.files[0], vecnormalize, self.deterministic)


def export(run_dir: Path, member: str | int = "best", out: Path | None = None) -> Exported:
    """Write member ``member`` (``--member``) of the run in ``run_dir`` as SB3 files into ``out`` (default
    ``RUN_DIR/export/m<M>_round<R>``); a :class:`UsageError` for what cannot be exported."""
    target = find_target(Path(run_dir), str(member))
    out = out or Path(run_dir) / "export" / f"m{target.member}_round{target.round + 1}"
    loaded = target.load_member("cpu")
    plain = family(target.cfg.run.env).plain if is_known(target.cfg.run.env) else None  # not a member's own env
    env = None if plain is None else plain(target.cfg.run.env, target.cfg.env_settings)
    try:
        written = loaded.export(out)
        if env is not None:
            written.append(out / "env.yaml")
            durable_write(written[-1], lambda tmp: tmp.write_text(yaml.safe_dump(env.record(), sort_keys=False)))
    except OSError as err:
        raise UsageError(f"{out}: {err.strerror}") from None
    finally:
        loaded.close()
    # the SB3 class that loads the zip: pbx's own subclasses (PPO's update, DrAC's) load as the SB3 class
    algorithm = next(c for c in type(loaded.model).__mro__ if c.__module__.startswith("stable_baselines3")).__name__
    s = loaded.settings
    return Exported(list(written), target, type(loaded).name, dict(loaded.config), not s.normalize_obs, algorithm,
                    env, loaded.test_deterministic if s.eval_deterministic is None else s.eval_deterministic)


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
    if len(written) > 1 and written[1].name == "vecnormalize.pkl":
        print(f"wrote {written[1]}: " + ("its return statistics (its policy acts on raw observations)" if done.raw else
                                         "the statistics its policy normalises observations with"))
        load += f', VecNormalize.load("{written[1]}", venv) with .training = False'
    print(f"load with: {load}")
    play = done.snippet()
    if play is None:
        print(f"{target.cfg.run.env} has no env outside pbx: play the member with python -m pbx.evaluate")
    else:
        print(f"wrote {written[-1]}: the env its test episodes play; one episode in plain SB3:\n{play}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
