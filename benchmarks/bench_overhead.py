"""What pbx costs on top of what it drives, measured side by side in one run.

(a) PPOMember training throughput / plain SB3 PPO on the same env, policy and
    config (target >= 0.95): the member's RNG swapping, score callback,
    hyperparameter plumbing and log flushing must be noise next to PPO itself.
(b) ProcGen adapter step rate / raw ``procgen.ProcgenEnv`` (target >= 0.9).
(c) A synchronous round's wall time / the sum of its members' own work in it
    (target <= 1.05): what the runner adds (checkpoints, history fsync,
    TensorBoard, decisions, exploit loads). Members' work is train() plus
    evaluate(); the line after the table splits it.
(d) The test evaluation's share of a member's round, apart from training, at
    the README quick start (8 envs x 256 steps, t_ready 2,048, 4 test
    episodes) and at the PB2 paper setting (64 envs x 256 steps, t_ready
    500,000, 100 test episodes). Training time per round is extrapolated from
    the measured rate over whole rollouts (a paper round is 500k steps); the
    evaluation is timed whole. ``eval_every`` k divides the share's
    evaluation part by k.

Contestants alternate (ours, baseline, baseline, ours), repeatedly, so that load
from other processes hits both alike; each ratio is the median of the
per-repeat ratios. About 1-2 minutes on 2 idle cores.

    .venv/bin/python benchmarks/bench_overhead.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

import numpy as np

# pbx first: it silences the banner that importing procgen / SB3 would print (see pbx.envs).
from pbx.envs import ProcgenSettings, ProcgenVecEnv  # isort: skip
from procgen import ProcgenEnv
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecNormalize

from pbx.config import resolve
from pbx.members.base import MemberContext
from pbx.members.ppo.impala import ImpalaPolicy
from pbx.members.ppo.ppo import PPOMember, PPOSettings
from pbx.members.sb3.member import SB3Member
from pbx.run_dir import RunDir
from pbx.runners.sync import SyncRunner

GAME = "bigfish"
# Small enough for a CPU: 4 envs x 32 steps = 128-step rollouts, 2 minibatches, the paper's 3 epochs.
SETTINGS = PPOSettings(n_envs=4, n_steps=32, batch_size=64)
CONFIG = {"ent_coef": 0.01, "learning_rate": 5e-4, "clip_range": 0.2}
ROLLOUTS_PER_CALL = 1
ENV_STEP_SECONDS = 0.2
ENV_REPEATS_PER_REPEAT = 4  # env steps are fast: many short calls cancel background load better
ENV_N_ENVS = 64
EVAL_EPISODES = 4


@dataclass(frozen=True)
class Row:
    name: str
    ours: float
    baseline: float
    ratio: float
    """median over repeats of ours / baseline"""
    target: float
    unit: str = "steps/s"
    at_most: bool = False
    """The target is an upper bound (costs) rather than a lower one (rates)."""

    @property
    def verdict(self) -> str:
        met = self.ratio <= self.target if self.at_most else self.ratio >= self.target
        return f"{'<=' if self.at_most else '>='} {self.target:g} {'ok' if met else 'MISSED'}"


def timed(run: Callable[[], int]) -> float:
    """Env steps per wall-clock second of one call of ``run`` (which returns its steps)."""
    start = time.perf_counter()
    steps = run()
    return steps / (time.perf_counter() - start)


def alternate(name: str, ours: Callable[[], int], baseline: Callable[[], int], repeats: int,
              target: float) -> Row:
    """Time both side by side: one warm-up call each, then ``repeats`` times ours, baseline, baseline,
    ours, so that background load rising or falling during a repeat hits both alike."""
    ours(), baseline()
    pairs = []
    for _ in range(repeats):
        a, b, b2, a2 = timed(ours), timed(baseline), timed(baseline), timed(ours)
        pairs.append(((a + a2) / 2, (b + b2) / 2))
    return Row(name, statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
               statistics.median(p[0] / p[1] for p in pairs), target)


def member_vs_sb3(repeats: int) -> Row:
    """(a) PPOMember.train vs SB3's own learn() on the same env, policy and config."""
    s = SETTINGS
    steps = ROLLOUTS_PER_CALL * s.n_envs * s.n_steps
    member = PPOMember(MemberContext(env=GAME, index=0, seed=0, device="cpu"), s, CONFIG)
    # The member picks ProcGen's thread count; the plain run gets the same env so only pbx differs.
    env = VecNormalize(ProcgenVecEnv(GAME, s.n_envs, seed=0, num_levels=ProcgenSettings().num_levels,
                                     num_threads=member._env_threads), norm_obs=False, gamma=s.gamma)
    plain = PPO(ImpalaPolicy, env, learning_rate=CONFIG["learning_rate"], n_steps=s.n_steps,
                batch_size=s.batch_size, n_epochs=s.n_epochs, gamma=s.gamma, gae_lambda=s.gae_lambda,
                clip_range=CONFIG["clip_range"], clip_range_vf=s.clip_range_vf, ent_coef=CONFIG["ent_coef"],
                vf_coef=s.vf_coef, max_grad_norm=s.max_grad_norm, device="cpu", seed=0)
    return train_side_by_side(member, plain, steps, repeats)


def train_side_by_side(member: SB3Member, plain: BaseAlgorithm, steps: int, repeats: int,
                       name: str = "(a) PPOMember.train / SB3 PPO.learn") -> Row:
    """``member.train(steps)`` against ``plain.learn(steps)`` (:func:`alternate`); target >= 0.95."""
    # As the member does: without a logger of its own, SB3 makes a temp folder per learn() call.
    plain.set_logger(Logger(folder=None, output_formats=[]))

    def ours() -> int:
        member.train(steps)
        return steps

    def baseline() -> int:
        plain.learn(steps, reset_num_timesteps=False)
        return steps

    return alternate(name, ours, baseline, repeats, 0.95)


def adapter_vs_procgen(repeats: int) -> Row:
    """(b) the adapter's step vs procgen.ProcgenEnv's, same game, envs and threads."""
    ours_env = ProcgenVecEnv(GAME, ENV_N_ENVS, seed=0, num_levels=200, num_threads=0)
    raw_env = ProcgenEnv(num_envs=ENV_N_ENVS, env_name=GAME, num_levels=200, start_level=0,
                         distribution_mode="easy", rand_seed=0, num_threads=0)
    actions = np.random.default_rng(0).integers(15, size=(256, ENV_N_ENVS))

    def stepping(step: Callable[[np.ndarray], object]) -> Callable[[], int]:
        def run() -> int:
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < ENV_STEP_SECONDS:
                step(actions[n % len(actions)])
                n += 1
            return n * ENV_N_ENVS
        return run

    return alternate("(b) ProcgenVecEnv.step / ProcgenEnv.step", stepping(ours_env.step), stepping(raw_env.step),
                     ENV_REPEATS_PER_REPEAT * repeats, 0.9)


class TimedMember(PPOMember):
    """A PPOMember that logs the seconds of each train() and evaluate() call (benchmark instrumentation)."""

    calls: ClassVar[list[tuple[str, float]]] = []

    def train(self, steps: int, stop: Callable[[], bool] | None = None) -> float:
        start = time.perf_counter()
        try:
            return super().train(steps, stop=stop)
        finally:
            TimedMember.calls.append(("train", time.perf_counter() - start))

    def evaluate(self, seed: int) -> float:
        start = time.perf_counter()
        score = super().evaluate(seed)
        TimedMember.calls.append(("evaluate", time.perf_counter() - start))
        return score


def round_vs_member_work(repeats: int) -> Row:
    """(c) the sync runner's wall time per round vs its members' train() + evaluate() time in it.

    A PBT run of 2 members (one exploit after every round) for ``repeats`` rounds
    after a first one, which also pays for building the members and is left out.
    A round's wall time runs from the end of the previous round, so it holds the
    decisions and exploit loads made in between.
    """
    s = SETTINGS
    pop, rollout = 2, s.n_envs * s.n_steps
    member = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)} | {"eval_episodes": EVAL_EPISODES}
    run = {"env": GAME, "search": "PBT", "pop_size": pop, "t_ready": rollout, "max_budget": rollout * (repeats + 1),
           "device": "cpu"}
    cfg = resolve([{"run": run, "member": member}])
    cfg.member_cls = TimedMember
    TimedMember.calls.clear()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        run_dir = RunDir(Path(tmp) / "run")
        run_dir.create()
        run_dir.begin()
        frame = SyncRunner(cfg, run_dir).run().frame
    round_end = frame.groupby("round")["wall_s"].max().to_numpy()
    wall = float(round_end[-1] - round_end[0])
    later = TimedMember.calls[2 * pop:]  # the first round's train + evaluate calls left out
    train = sum(t for kind, t in later if kind == "train")
    work = sum(t for _, t in later)
    print(f"    (c) members' work per round {work / repeats:.2f} s: {train / work:.0%} train(), "
          f"{1 - train / work:.0%} evaluate() ({EVAL_EPISODES} test episodes per member)")
    return Row("(c) sync round / members' train+evaluate", wall / repeats, work / repeats, wall / work, 1.05,
               unit="s/round", at_most=True)


@dataclass(frozen=True)
class Setting:
    """A member's per-round work as a run sets it up: PPO sizes, round length and test episodes."""

    name: str
    settings: PPOSettings
    t_ready: int
    rollouts: int
    """Rollouts timed to measure the training rate (a paper round is too long to time whole on a CPU)."""


EVAL_SETTINGS = (
    Setting("quick start", PPOSettings(n_envs=8, n_steps=256, batch_size=512, eval_episodes=4), 2048, 1),
    Setting("paper", PPOSettings(eval_episodes=100), 500_000, 1),
)


def evaluation_share(repeats: int, device: str = "cpu") -> None:
    """(d) Seconds of train() per round (extrapolated) and of evaluate(), and evaluate()'s share."""
    for setting in EVAL_SETTINGS:
        s = setting.settings
        member = PPOMember(MemberContext(env=GAME, index=0, seed=0, device=device), s, CONFIG)
        rollout = s.n_envs * s.n_steps
        member.train(rollout)  # warm-up: first-call costs are not a round's
        train_s, eval_s = [], []
        for r in range(max(1, repeats // 2)):
            start = time.perf_counter()
            member.train(setting.rollouts * rollout)
            train_s.append((time.perf_counter() - start) / (setting.rollouts * rollout) * setting.t_ready)
            start = time.perf_counter()
            member.evaluate(r)
            eval_s.append(time.perf_counter() - start)
        member.close()
        train, evaluate = statistics.median(train_s), statistics.median(eval_s)
        print(f"(d) {setting.name:<11} on {device}: train {train:9.1f} s/round ({setting.t_ready:,} steps), "
              f"evaluate {evaluate:6.1f} s ({s.eval_episodes} episodes): evaluation {evaluate / (train + evaluate):.1%} "
              f"of the round; with eval_every 5 {evaluate / 5 / (train + evaluate / 5):.1%}", flush=True)


MEASUREMENTS: list[Callable[[int], Row]] = [member_vs_sb3, adapter_vs_procgen, round_vs_member_work]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="alternating repeats per measurement")
    parser.add_argument("--only", choices=["ratios", "evaluation"], default=None,
                        help="run only (a)-(c) or only (d)")
    parser.add_argument("--device", default="cpu", help="device for (d): cpu or cuda")
    args = parser.parse_args()
    repeats = args.repeats
    s = SETTINGS
    print(f"{GAME} on the CPU, {repeats} repeats. (a): {s.n_envs} envs x {s.n_steps} steps, batch {s.batch_size}, "
          f"{s.n_epochs} epochs, {ROLLOUTS_PER_CALL} rollout(s) per call; (b): {ENV_N_ENVS} envs, "
          f"{ENV_STEP_SECONDS:g} s per call, {ENV_REPEATS_PER_REPEAT}x the repeats. Rates in env steps per wall-clock second.")
    if args.only != "ratios":
        evaluation_share(repeats, args.device)
    if args.only == "evaluation":
        return
    print(f"{'measurement':<44} {'pbx':>9} {'baseline':>9} {'unit':<8} {'ratio':>6}  target")
    for measure in MEASUREMENTS:
        row = measure(repeats)
        print(f"{row.name:<44} {_figure(row.ours)} {_figure(row.baseline)} {row.unit:<8} {row.ratio:>6.3f}  "
              f"{row.verdict}", flush=True)


def _figure(value: float) -> str:
    return f"{value:>9,.0f}" if value >= 100 else f"{value:>9.3f}"

if __name__ == "__main__":
    main()
