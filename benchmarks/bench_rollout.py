"""PPO's direct rollout (``pbx/members/ppo/rollout.py``) beside SB3's own, on the CPU: env steps per second.

Two PPO members of the same env, settings and seed; one collects with SB3's ``RolloutBuffer`` and
``collect_rollouts`` (what pbx ran before the direct rollout), the other with the direct rollout.
Both train the same numbers (``tests/test_rollout.py`` checks them bit for bit), so only the
plumbing differs. Calls alternate (direct, SB3, SB3, direct) over ``--repeats`` so that load
from other processes hits both alike; each call is one round of ``--rollouts`` rollouts and their
updates. Printed per env: the rollout's rate alone (``collect_rollouts``, timed inside the call),
the whole round's rate, and each ratio direct / SB3 (the median of the per-repeat ratios).

    .venv/bin/python benchmarks/bench_rollout.py                  # CartPole-v1 and bigfish, 3 repeats
    .venv/bin/python benchmarks/bench_rollout.py --repeats 1 --rollouts 1 --envs CartPole-v1

Settings: CartPole-v1 at its shipped PPO defaults but for a CPU-sized rollout (8 envs x 256 steps, minibatches
of 256; the SB3 loss, an MLP),
bigfish at 16 envs x 64 steps, minibatches of 256, 3 epochs, the IMPALA CNN and the reference loss
(the paper's network and loss on a CPU-sized rollout). Threads are the member's own choice, alike on both sides
(torch: one for an MLP, the cores for a CNN).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from pbx.members.base import MemberContext
from pbx.members.ppo.ppo import PPOMember
from pbx.members.ppo.rollout import use_sb3_rollout
from pbx.members.ppo.settings import PPOSettings

SETTINGS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {"n_envs": 8, "n_steps": 256, "batch_size": 256, "eval_episodes": 0},
    "bigfish": {"n_envs": 16, "n_steps": 64, "batch_size": 256, "eval_episodes": 0},
}
CONFIG = {"learning_rate": 5e-4, "ent_coef": 0.01, "clip_range": 0.2}


def build(env: str, sb3: bool) -> PPOMember:
    """A member of ``env``; with ``sb3`` collecting through SB3's own buffer and ``collect_rollouts``."""
    settings = PPOSettings(**(PPOMember.setting_defaults(env) | SETTINGS[env]))
    member = PPOMember(MemberContext(env=env, index=0, seed=0, device="cpu"), settings, dict(CONFIG))
    if sb3:
        use_sb3_rollout(member.model)
    return member


class Timed:
    """One member's calls: the whole call's seconds, and those spent in ``collect_rollouts`` during it."""

    def __init__(self, member: PPOMember, steps: int) -> None:
        self.member, self.steps = member, steps
        self.rollout = 0.0
        collect = member.model.collect_rollouts

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return collect(*args, **kwargs)
            finally:
                self.rollout += time.perf_counter() - start

        member.model.collect_rollouts = timed  # type: ignore[method-assign]

    def __call__(self) -> tuple[float, float]:
        """One call: (whole-call env steps/s, rollout env steps/s)."""
        self.rollout = 0.0
        start = time.perf_counter()
        self.member.train(self.steps)
        whole = time.perf_counter() - start
        return self.steps / whole, self.steps / self.rollout


def compare(env: str, rollouts: int, repeats: int) -> None:
    direct, sb3 = build(env, sb3=False), build(env, sb3=True)
    steps = rollouts * direct.settings.n_envs * direct.settings.n_steps
    ours, theirs = Timed(direct, steps), Timed(sb3, steps)
    ours(), theirs()  # warm-up
    rows: list[tuple[tuple[float, float], tuple[float, float]]] = []
    for _ in range(repeats):
        a, b, b2, a2 = ours(), theirs(), theirs(), ours()
        rows.append((_mean(a, a2), _mean(b, b2)))
    print(f"{env}: {direct.settings.n_envs} envs x {direct.settings.n_steps} steps, {steps:,} env steps a call, "
          f"{repeats} repeats", flush=True)
    for i, part in ((1, "rollout (collect_rollouts)"), (0, "whole round (rollouts + updates)")):
        mine = statistics.median(r[0][i] for r in rows)
        base = statistics.median(r[1][i] for r in rows)
        ratio = statistics.median(r[0][i] / r[1][i] for r in rows)
        print(f"    {part:<34} direct {mine:>10,.0f}  SB3 {base:>10,.0f} env steps/s  direct / SB3 {ratio:.3f}",
              flush=True)
    direct.close(), sb3.close()


def _mean(x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float]:
    return (x[0] + y[0]) / 2, (x[1] + y[1]) / 2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--rollouts", type=int, default=2, help="rollouts (and updates) per timed call")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats (direct, SB3, SB3, direct)")
    args = parser.parse_args(argv)
    for flag in ("rollouts", "repeats"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1")
    for env in args.envs:
        compare(env, args.rollouts, args.repeats)


if __name__ == "__main__":
    main()
