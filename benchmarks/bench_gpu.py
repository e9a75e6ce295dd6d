"""Where a PPO member's time goes on a GPU (or, in a small setting, a CPU), beside plain SB3.

(a) Throughput of one member: ``PPOMember.train`` against plain SB3 ``PPO.learn`` on
    the same env (pbx's ProcGen adapter, the member's env threads, reward scaling),
    the same policy (``ImpalaPolicy``) and the same settings, alternating (ours,
    plain, plain, ours) so that load from other processes hits both alike; rates in
    env steps per wall-clock second, the ratio the median of the per-repeat ratios.
    Both sides train with one value loss (``--value-loss``): ``sb3`` (the default)
    makes the plain side SB3's own ``PPO`` class, untouched, and the member
    ``value_loss: sb3``, so that only pbx's plumbing differs; ``reference`` gives
    both the ProcGen paper's loss (pbx runs' default on ProcGen), the plain side
    through pbx's ``PPOUpdate``. ``bench_drac.py`` compares the two losses.
(b) The split of one call (``--rollouts`` rollouts and their updates) for both:
    env stepping (``env.step``: ProcGen and the reward scaling), inference (the
    policy's forward in the rollout), the rest of the rollout (observations to the
    device, actions back, the rollout buffer, callbacks, the last value and GAE);
    then the update: the rollout buffer's flatten (``swap_and_flatten``, once per
    update), the minibatch gather (``_get_samples``' fancy indexing on the host),
    its copy to the device (``to_torch``), forward and backward (from a minibatch's
    arrival to the gradient clip: ``evaluate_actions`` with the uint8-to-float
    conversion, the loss and SB3's per-minibatch ``.item()`` statistics,
    ``zero_grad``, ``loss.backward()``), the optimizer (``clip_grad_norm_`` and
    Adam's step) and the rest of ``train()``; last, what the call spends outside
    rollouts and updates (SB3's ``learn`` set-up, the logger; for the member also
    its RNG swap, the copy of its learner kept for a rollback, the finite-weights
    check and the score). The rows add up to the call's wall time. The timers
    (``call_split.py``) are wrapped around methods of the two instances (SB3 and pbx are not edited); on
    CUDA each reading of the clock first waits for the GPU
    (``torch.cuda.synchronize``), so GPU work is counted in the part that launched
    it, not where the CPU next happens to wait for it. Synchronising costs a little
    and takes away overlap of CPU and GPU work, so the split comes from calls of
    its own (``--split-calls`` per side, alternating), after and apart from the
    untimed calls that give the rates of (a). Python's full garbage collections
    (about 0.5 s each in this process on a busy CPU) land in whichever part is
    running; in the small setting one shows as a large "outside" row.
(c) A population of 4: ``pbx.train --search PBT --batchsize 4`` in one process (the
    members in turn), then under ``mpiexec -n N --runner mpi`` for each N of
    ``--ranks``, all ranks sharing the one device: total env steps per second over
    the rounds after the first (from the history's ``wall_s``: without process
    start, member building and the first round's warm-up), test episodes off.
    One run each, not alternated.

Settings: ``paper`` is the ProcGen paper's PPO (64 envs x 256 steps, 8 minibatches
of 2,048, 3 epochs), the default on CUDA; ``small`` (4 envs x 8 steps, minibatches
of 16, 3 epochs) is the default on a CPU, where the IMPALA CNN trains a few dozen env
steps per second. With the defaults and ``--cores 1`` it took 5 minutes on a 2-core
machine busy with other work (load 7-10); the test's quick run (below) takes about 50 s
of CPU time, 1-2.5 minutes there. Two torch threads on such a machine spin against each
other and train several times slower: ``--cores 1`` gives pbx one core to count.
``mpiexec`` is the one beside this Python (the mpich wheel's), else the system's. Open
MPI's is given ``--bind-to none`` (by default it binds one or two ranks to a core each,
while pbx shares the machine's cores among its ranks itself) and, run as root as on the
GPU machines, ``--allow-run-as-root``.

    .venv/bin/python benchmarks/bench_gpu.py --cores 1     # CPU: small setting
    python benchmarks/bench_gpu.py --device cuda            # GPU: paper setting, ranks 1 2 4

The test's quick run on a CPU:

    .venv/bin/python benchmarks/bench_gpu.py --device cpu --cores 1 --repeats 1 --split-calls 1 --ranks 1 --pop-rounds 2
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

# pbx first: it silences the banner that importing procgen / SB3 would print (see pbx.envs).
from pbx.envs import GAMES, make_env  # isort: skip
from pbx.envs.families import PROCGEN  # isort: skip
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecNormalize

from pbx.members.base import MemberContext
from pbx.members.ppo.impala import ImpalaPolicy
from pbx.members.ppo.ppo import PPOMember, PPOSettings
from pbx.members.ppo.update import VALUE_LOSSES, PPOUpdate
from pbx.members.sb3.process import set_precision

from call_split import Clock, Split, counted, split
from gpu_machine import AS_ROOT, ROOT, cores, launcher, open_mpi, pick_device, pin_cores, population_rate, root

CONFIG = {"ent_coef": 0.01, "learning_rate": 5e-4, "clip_range": 0.2}
"""The search space's defaults (``ppo_procgen.yaml``), the ProcGen paper's values."""
POPULATION = 4


@dataclass(frozen=True)
class Setting:
    """PPO's sizes and how much each part of the benchmark trains."""

    n_envs: int
    n_steps: int
    batch_size: int
    rollouts: int
    """Rollouts per timed call of (a) and (b)."""
    pop_rollouts: int
    """Rollouts per member per round of (c) (its ``t_ready``)."""

    @property
    def rollout(self) -> int:
        return self.n_envs * self.n_steps


SETTINGS = {
    "small": Setting(n_envs=4, n_steps=8, batch_size=16, rollouts=1, pop_rollouts=1),
    "paper": Setting(n_envs=64, n_steps=256, batch_size=2048, rollouts=2, pop_rollouts=2),
}
N_EPOCHS = 3

def build(setting: Setting, env: str, device: str, value_loss: str, precision: str = "torch",
          channels_last: bool = False) -> tuple[PPOMember, BaseAlgorithm]:
    """A member and a plain SB3 PPO of the same env, policy, settings and value loss, on the member's device; the
    member with the image network's ``precision`` and ``channels_last`` (the levers), plain SB3 as it comes."""
    s = setting
    settings = PPOSettings(n_envs=s.n_envs, n_steps=s.n_steps, batch_size=s.batch_size, n_epochs=N_EPOCHS,
                           value_loss=value_loss, eval_episodes=0, precision=precision, channels_last=channels_last)
    member = PPOMember(MemberContext(env=env, index=0, seed=0, device=device), settings, CONFIG)
    # The member picks ProcGen's thread count (and torch's); the plain run gets the same env so only pbx differs.
    venv = VecNormalize(make_env(env, s.n_envs, 0, num_threads=member._env_threads), norm_obs=False,
                        gamma=settings.gamma)
    kwargs: dict[str, Any] = dict(
        learning_rate=CONFIG["learning_rate"], n_steps=s.n_steps, batch_size=s.batch_size, n_epochs=N_EPOCHS,
        gamma=settings.gamma, gae_lambda=settings.gae_lambda, clip_range=CONFIG["clip_range"],
        ent_coef=CONFIG["ent_coef"], vf_coef=settings.vf_coef, max_grad_norm=settings.max_grad_norm,
        device=member.device, seed=0, verbose=0)
    # The member set the process's TF32 switches for its precision; plain SB3 runs under PyTorch's own.
    set_precision("torch")
    if value_loss == "sb3":
        plain: BaseAlgorithm = PPO(ImpalaPolicy, venv, clip_range_vf=settings.clip_range_vf, **kwargs)
    else:  # the reference loss clips the value with clip_range, as the member's PPOUpdate does
        plain = PPOUpdate(ImpalaPolicy, venv, clip_range_vf=None, value_loss=value_loss, **kwargs)
    # As the member does: without a logger of its own, SB3 makes a temp folder per learn() call.
    plain.set_logger(Logger(folder=None, output_formats=[]))
    return member, plain


def _rate(steps_per_second: float) -> str:
    """A rate as printed: whole steps from 100 up, else with two decimals (the small CPU setting's)."""
    return f"{steps_per_second:,.0f}" if steps_per_second >= 100 else f"{steps_per_second:.2f}"


def rate(run: Callable[[], None], steps: int, clock: Clock) -> float:
    """Env steps per second of one call of ``run``, which trains ``steps``."""
    start = clock()
    run()
    return steps / (clock() - start)


def throughput(ours: Callable[[], None], plain: Callable[[], None], steps: int, repeats: int,
               clock: Clock) -> tuple[float, float, float]:
    """(a): medians of the member's and plain SB3's rates and of their per-repeat ratio, after a warm-up each."""
    ours(), plain()
    pairs = []
    for _ in range(repeats):
        a, b, b2, a2 = (rate(ours, steps, clock), rate(plain, steps, clock), rate(plain, steps, clock),
                        rate(ours, steps, clock))
        pairs.append(((a + a2) / 2, (b + b2) / 2))
        print(f"    repeat {len(pairs)}: member {_rate(pairs[-1][0])}, plain SB3 {_rate(pairs[-1][1])} env steps/s",
              flush=True)
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[0] / p[1] for p in pairs))


def population_run(ranks: int | None, args: list[str], folder: Path) -> float:
    """(c): env steps per second of one ``pbx.train`` run over its rounds after the first; ``ranks`` None is one
    process without MPI, else ``mpiexec -n ranks`` with the MPI runner."""
    command = [sys.executable, "-m", "pbx.train", *args, "--run-dir", str(folder)]
    env = dict(os.environ)
    if ranks is not None:
        command = [*launcher(ranks), *command, "--runner", "mpi"]
        if open_mpi() and root():
            env |= AS_ROOT
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise SystemExit(f"{command[0]} not found: install an MPI (the mpich wheel: pip install mpich), or leave "
                         f"the MPI runs out with --skip-mpi") from None
    rate = population_rate(folder) if proc.returncode == 0 else None
    if rate is None:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-4000:]}")
    return rate


def population(setting: Setting, env: str, device: str, value_loss: str, rounds: int, ranks: list[int]) -> None:
    s = setting
    t_ready = s.pop_rollouts * s.rollout
    args = ["--env", env, "--search", "PBT", "--batchsize", str(POPULATION), "--seed", "0", "--device", device,
            "--t_ready", str(t_ready), "--max_budget", str(rounds * t_ready),
            "-m", f"n_envs={s.n_envs}", f"n_steps={s.n_steps}", f"batch_size={s.batch_size}", f"n_epochs={N_EPOCHS}",
            f"value_loss={value_loss}", "eval_episodes=0"]
    timed = "round 2" if rounds == 2 else f"rounds 2-{rounds}"
    print(f"(c) population {POPULATION} (PBT), {rounds} rounds of {t_ready:,} steps per member, test episodes off; "
          f"total env steps/s over {timed}" + (f"; launcher: {' '.join(launcher('N'))}" if ranks else ""),
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for n in [None, *ranks]:
            where = "one process, members in turn" if n is None else f"mpiexec -n {n} ({POPULATION // n} per rank)"
            r = population_run(n, args, Path(tmp) / f"n{n or 0}")
            print(f"    {where:<34} {_rate(r):>12} env steps/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="auto: cuda when there is a GPU, else cpu")
    parser.add_argument("--env", default="bigfish", choices=sorted(GAMES), metavar="GAME",
                        help="a ProcGen game (default bigfish)")
    parser.add_argument("--setting", choices=sorted(SETTINGS), default=None,
                        help="small: 4 envs x 8 steps, minibatch 16; paper: 64 envs x 256 steps, minibatch 2,048 "
                             "(both 3 epochs). Default: paper on cuda, small on cpu")
    parser.add_argument("--rollouts", type=int, default=None,
                        help="rollouts per call in (a) and (b) (default: small 1, paper 2)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats of (a)")
    parser.add_argument("--split-calls", type=int, default=2, help="timed calls per side for (b)")
    parser.add_argument("--value-loss", choices=VALUE_LOSSES, default="sb3",
                        help="the value loss of both sides and of (c): sb3 (plain SB3 untouched) or reference")
    parser.add_argument("--precision", choices=("torch", "bf16"), default="torch",
                        help="the member's image-network precision: bf16 autocast in its IMPALA CNN, or torch "
                             "(the default). fp32 and tf32 switch the whole process, plain SB3 included, so they are "
                             "not offered here")
    parser.add_argument("--channels-last", action="store_true",
                        help="the member's IMPALA CNN in the channels-last memory format")
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2, 4],
                        help="MPI rank counts of (c) (default 1 2 4; none: only the one-process run)")
    parser.add_argument("--skip-mpi", action="store_true", help="(c) without the mpiexec runs")
    parser.add_argument("--skip-population", action="store_true", help="leave (c) out")
    parser.add_argument("--pop-rounds", type=int, default=3, help="rounds of (c)'s runs (the first is not timed)")
    parser.add_argument("--cores", type=int, default=None,
                        help="run on this many of the cores this process may use (default all); pbx gives torch "
                             "and ProcGen threads by the cores it sees. On a busy CPU machine, 1")
    args = parser.parse_args()
    pin_cores(parser, args.cores)
    device = pick_device(parser, args.device)
    if not PROCGEN.recognises(args.env):
        parser.error(f"--env must be a ProcGen game, got {args.env!r}")
    for flag in ("repeats", "split_calls"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.pop_rounds < 2:
        parser.error("--pop-rounds must be at least 2 (the first round is not timed)")
    if any(n < 1 or POPULATION % n for n in args.ranks):
        parser.error(f"--ranks must divide the population of {POPULATION}")
    name = args.setting or ("paper" if device == "cuda" else "small")
    s = SETTINGS[name]
    if args.rollouts is not None:
        if args.rollouts < 1:
            parser.error("--rollouts must be at least 1")
        s = Setting(s.n_envs, s.n_steps, s.batch_size, args.rollouts, s.pop_rollouts)
    steps = s.rollouts * s.rollout

    member, plain = build(s, args.env, device, args.value_loss, args.precision, args.channels_last)
    dev = member.device
    clock = Clock(dev)
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    print(f"{args.env}, {name} setting: {s.n_envs} envs x {s.n_steps} steps, minibatch {s.batch_size}, {N_EPOCHS} "
          f"epochs, {args.value_loss} value loss on both sides; member precision {args.precision}"
          f"{', channels-last' if args.channels_last else ''}; {counted(s.rollouts, 'rollout')} ({steps:,} env "
          f"steps) per call; on {dev} ({where}), {counted(cores(), 'core')}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads, {member._env_threads} ProcGen threads", flush=True)

    def member_call() -> None:
        member.train(steps)

    def plain_call() -> None:
        plain.learn(steps, reset_num_timesteps=False)

    print(f"(a) one member against plain SB3, {counted(args.repeats, 'repeat')} (untimed inside)", flush=True)
    ours, base, ratio = throughput(member_call, plain_call, steps, args.repeats, clock)
    print(f"    member {_rate(ours)} env steps/s, plain SB3 {_rate(base)} env steps/s, member / plain {ratio:.3f}",
          flush=True)
    print(f"(b) split of a call, {counted(args.split_calls, 'timed call')} per side, alternating"
          + (" (timers synchronise with the GPU)" if dev.type == "cuda" else ""), flush=True)
    split(Split(member.model, clock), Split(plain, clock), member_call, plain_call, args.split_calls)

    member.close()
    plain.env.close()
    del member, plain
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()  # the ranks of (c) get the GPU's memory
    if not args.skip_population:
        population(s, args.env, device, args.value_loss, args.pop_rounds, [] if args.skip_mpi else args.ranks)


if __name__ == "__main__":
    main()
