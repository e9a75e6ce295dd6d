"""``python -m pbx.evaluate RUN_DIR``: score a trained member on test or training levels, and film it.

    python -m pbx.evaluate runs/NAME                                  # best member, 100 test episodes
    python -m pbx.evaluate runs/NAME --member 2 --levels train --episodes 20
    python -m pbx.evaluate runs/NAME --video best.mp4 --video-episodes 3

Prints the mean, std and count of the episode returns of the sampled and of
the deterministic policy, marking the one the run's test score plays (PPO's and
A2C's sampled, SAC's, TD3's and DQN's deterministic), and writes them, with
every return, to ``RUN_DIR/report/evaluate_m<M>_<levels>_seed<S>.json`` (a checkpoint
``--member kept`` takes from an earlier generation: ``evaluate_m<M>_kept_r<R>_...``). What
is played and why: :mod:`pbx.evaluation`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from pbx.errors import ArgumentParser, UsageError, command_parser
from pbx.evaluation import LEVELS, check_options, describe, evaluate, find_target, result_path


def build_parser() -> ArgumentParser:
    p = command_parser("python -m pbx.evaluate", "Score a member's checkpoint of the run's last finished round with "
                       "the sampled and the deterministic policy, and record episodes as a video.", __doc__)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run whose checkpoint to score")
    p.add_member_option()
    p.add_argument("--episodes", type=int, default=100, help="episodes per policy, one env each (default: 100)")
    p.add_argument("--levels", choices=LEVELS, default="test",
                   help="test: ProcGen's unrestricted levels, as the run's test score (default); train: the run's "
                        "num_levels from start_level")
    p.add_argument("--video", type=Path, default=None, metavar="FILE",
                   help="record the sampled policy's first episodes to FILE (.mp4 or .gif)")
    p.add_argument("--video-episodes", "--video_episodes", dest="video_episodes", type=int, default=3, metavar="K",
                   help="episodes in the video (default: 3)")
    p.add_argument("--max-steps", "--max_steps", dest="max_steps", type=int, default=None, metavar="N",
                   help="cut each episode off after N steps, counting its return so far (default: the member's "
                        "eval_max_steps)")
    p.add_argument("--seed", type=int, default=0, help="seeds the levels and the action sampling (default: 0)")
    p.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"), help="default: the run's")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_options(args.episodes, args.levels, args.max_steps, args.video, args.video_episodes, args.seed)
        target = find_target(args.run_dir, args.member)
        print(describe(target, args.levels, args.episodes, args.seed), flush=True)
        result = evaluate(target, episodes=args.episodes, levels=args.levels, seed=args.seed, device=args.device,
                          max_steps=args.max_steps, video=args.video, video_episodes=args.video_episodes)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for policy, score in result.scores.items():
        mark = " <- the run's test score plays this policy" if policy == result.test_policy else ""
        print(score.line(policy, result.max_steps) + mark)
    out = result_path(target, args.levels, args.seed)
    out.parent.mkdir(exist_ok=True)
    result.write(out)
    print(f"wrote {out}")
    if result.video_size is not None:
        width, height = result.video_size
        print(f"wrote {result.video} ({result.video_frames} frames, {width}x{height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
