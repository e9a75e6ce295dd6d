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
    check and the score). The rows add up to the call's wall time. The timers are
    wrapped around methods of the two instances (SB3 and pbx are not edited); on
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
import functools
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
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

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = str(Path(sys.executable).parent / "mpiexec") if (Path(sys.executable).parent / "mpiexec").exists() \
    else shutil.which("mpiexec") or "mpiexec"  # the mpich wheel's, beside this Python, else the system's
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

PARTS = (
    ("env", "env stepping (env.step)"),
    ("inference", "inference (policy forward)"),
    ("rollout_other", "rest of the rollout"),
    ("flatten", "rollout buffer flatten"),
    ("gather", "minibatch gather"),
    ("copy", "host-to-device copy"),
    ("fwd_bwd", "forward + backward"),
    ("optimizer", "optimizer (clip + step)"),
    ("update_other", "rest of the update"),
    ("outside", "outside rollout and update"),
)
"""The rows of (b): key and label; they add up to the call's wall time."""


class Clock:
    """``time.perf_counter()``, read once the device has finished the work queued on it (on CUDA)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def __call__(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


class Split:
    """Timers around one SB3 PPO's rollout and update, on the instance's own methods (see (b) above).

    Inside ``with split:`` the model's ``collect_rollouts``, ``train``, its env's ``step``, its
    policy's ``forward`` and ``parameters`` (``clip_grad_norm_`` asks for them, which marks the
    clip's start), its optimizer's ``step`` and its rollout buffer's ``swap_and_flatten``,
    ``_get_samples`` and ``to_torch`` are wrapped; afterwards the instances are as they were.
    ``seconds`` accumulates over the calls made inside; :meth:`rows` turns it into the parts.
    """

    def __init__(self, model: BaseAlgorithm, clock: Clock) -> None:
        self.model, self.clock = model, clock
        self.seconds = dict.fromkeys(("call", "rollout", "env", "inference", "update", "flatten", "samples",
                                      "copy", "fwd_bwd", "optimizer"), 0.0)
        self.minibatches = 0
        self.calls = 0
        self._rollout = self._update = self._sampling = False
        self._ready: float | None = None
        self._clip: float | None = None
        self._wrapped: list[tuple[Any, str]] = []

    def time(self, call: Callable[[], object]) -> None:
        """Run ``call`` (one member.train or plain.learn) with the timers in place, timing it whole too."""
        with self:
            start = self.clock()
            call()
            self.seconds["call"] += self.clock() - start
            self.calls += 1

    def __enter__(self) -> Split:
        model = self.model
        buffer, policy = model.rollout_buffer, model.policy
        self._wrap(model, "collect_rollouts", self._phase("rollout"))
        self._wrap(model, "train", self._phase("update"))
        self._wrap(model.env, "step", self._timed("env", lambda: self._rollout))
        self._wrap(policy, "forward", self._timed("inference", lambda: self._rollout))
        self._wrap(buffer, "swap_and_flatten", self._timed("flatten", lambda: self._update))
        self._wrap(buffer, "_get_samples", self._samples)
        self._wrap(buffer, "to_torch", self._timed("copy", lambda: self._sampling))
        self._wrap(policy, "parameters", self._parameters)
        self._wrap(policy.optimizer, "step", self._step)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._wrapped:
            owner, name = self._wrapped.pop()
            delattr(owner, name)

    def _wrap(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        if name in vars(owner):
            raise RuntimeError(f"{type(owner).__name__}.{name} is already replaced on the instance; "
                               "the split's timers would not come off cleanly")
        setattr(owner, name, make(getattr(owner, name)))
        self._wrapped.append((owner, name))

    def _phase(self, key: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A rollout or an update: timed whole, and marked as under way for the timers inside it."""
        flag = f"_{key}"

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def phase(*args: Any, **kwargs: Any) -> Any:
                setattr(self, flag, True)
                start = self.clock()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.seconds[key] += self.clock() - start
                    setattr(self, flag, False)
                    self._ready = self._clip = None
            return phase
        return make

    def _timed(self, key: str, active: Callable[[], bool]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A method whose time goes to ``key`` while ``active()`` (in the phase it belongs to)."""
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def timed(*args: Any, **kwargs: Any) -> Any:
                if not active():
                    return original(*args, **kwargs)
                start = self.clock()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.seconds[key] += self.clock() - start
            return timed
        return make

    def _samples(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A minibatch drawn: gather and copies; its arrival starts the forward and backward."""
        def samples(*args: Any, **kwargs: Any) -> Any:
            if not self._update:
                return original(*args, **kwargs)
            self._sampling = True
            start = self.clock()
            try:
                result = original(*args, **kwargs)
            finally:
                self._sampling = False
            self._ready = self.clock()
            self.seconds["samples"] += self._ready - start
            self.minibatches += 1
            return result
        return samples

    def _parameters(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The policy's parameters asked for after a minibatch's loss: the last such call before the optimizer's
        step is ``clip_grad_norm_``'s, so it ends the backward pass and starts the optimizer."""
        def parameters(*args: Any, **kwargs: Any) -> Any:
            if self._update and self._ready is not None:
                self._clip = self.clock()
            return original(*args, **kwargs)
        return parameters

    def _step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            if not (self._update and self._ready is not None and self._clip is not None):
                return original(*args, **kwargs)
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds["fwd_bwd"] += self._clip - self._ready
                self.seconds["optimizer"] += self.clock() - self._clip
                self._ready = self._clip = None
        return step

    def rows(self) -> dict[str, float]:
        """Seconds per part of :data:`PARTS`, summed over the timed calls; they add up to ``call``."""
        s = self.seconds
        return {
            "env": s["env"], "inference": s["inference"], "rollout_other": s["rollout"] - s["env"] - s["inference"],
            "flatten": s["flatten"], "gather": s["samples"] - s["copy"], "copy": s["copy"],
            "fwd_bwd": s["fwd_bwd"], "optimizer": s["optimizer"],
            "update_other": s["update"] - s["flatten"] - s["samples"] - s["fwd_bwd"] - s["optimizer"],
            "outside": s["call"] - s["rollout"] - s["update"],
        }


def build(setting: Setting, env: str, device: str, value_loss: str, precision: str = "torch",
          channels_last: bool = False) -> tuple[PPOMember, BaseAlgorithm]:
    """A member and a plain SB3 PPO of the same env, policy, settings and value loss, on the member's device; the
    member with the image network's ``precision`` and ``channels_last`` (the levers), plain SB3 as it comes."""
    s = setting
    settings = PPOSettings(n_envs=s.n_envs, n_steps=s.n_steps, batch_size=s.batch_size, n_epochs=N_EPOCHS,
                           value_loss=value_loss, eval_episodes=0, precision=precision, channels_last=channels_last)
    member = PPOMember(MemberContext(env=env, index=0, seed=0, device=device), settings, CONFIG)
    # The member picks ProcGen's thread count (and torch's); the plain run gets the same env so only pbx differs.
    venv = VecNormalize(make_env(env, s.n_envs, 0, num_levels=settings.num_levels, start_level=settings.start_level,
                                 distribution_mode=settings.distribution_mode, num_threads=member._env_threads),
                        norm_obs=False, gamma=settings.gamma)
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


def counted(n: int, word: str, plural: str = "") -> str:
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


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


def split(ours: Split, plain: Split, member_call: Callable[[], None], plain_call: Callable[[], None],
          calls: int) -> None:
    """(b): ``calls`` timed calls per side, alternating; the table of parts, summed over them."""
    for i in range(calls):
        first, second = ((ours, member_call), (plain, plain_call)) if i % 2 == 0 else \
            ((plain, plain_call), (ours, member_call))
        first[0].time(first[1])
        second[0].time(second[1])
    rows = {"member": ours.rows(), "plain SB3": plain.rows()}
    totals = {"member": ours.seconds["call"], "plain SB3": plain.seconds["call"]}
    print(f"    {'part':<30}" + "".join(f" {name + ' s':>12} {'%':>6}" for name in rows))
    for key, label in PARTS:
        print(f"    {label:<30}" + "".join(f" {rows[n][key]:12.4f} {rows[n][key] / totals[n]:6.1%}" for n in rows))
    print(f"    {'total (the calls)':<30}" + "".join(f" {totals[n]:12.4f} {1:6.1%}" for n in rows))
    for name, timed in (("member", ours), ("plain SB3", plain)):
        update = timed.seconds["update"]
        print(f"    {name}: train() {update / totals[name]:.0%} of the time, {update / timed.minibatches * 1e3:.1f} ms "
              f"per minibatch ({counted(timed.minibatches, 'minibatch', 'minibatches')} in "
              f"{counted(timed.calls, 'call')})", flush=True)


def population_rate(ranks: int | None, args: list[str], steps: int, folder: Path) -> float:
    """(c): env steps per second of one ``pbx.train`` run over its rounds after the first; ``ranks`` None is one
    process without MPI, else ``mpiexec -n ranks`` with the MPI runner."""
    command = [sys.executable, "-m", "pbx.train", *args, "--run-dir", str(folder)]
    env = dict(os.environ)
    if ranks is not None:
        command = [*launcher(ranks), *command, "--runner", "mpi"]
        if _open_mpi() and _root():
            env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise SystemExit(f"{command[0]} not found: install an MPI (the mpich wheel: pip install mpich), or leave "
                         f"the MPI runs out with --skip-mpi") from None
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-4000:]}")
    wall = pd.read_csv(folder / "history.csv").groupby("round")["wall_s"].max().sort_index()
    return steps / float(wall.iloc[-1] - wall.iloc[0])


def launcher(ranks: int | str) -> list[str]:
    """``mpiexec -n ranks``, and for Open MPI what it needs to run pbx as pbx expects: no binding (Open MPI
    binds each of one or two ranks to a single core by default, while pbx shares a machine's cores among its
    ranks itself, see :func:`pbx.members.sb3.process.thread_budget`), and as root (the GPU machines run as root)
    the flag without which it refuses to start."""
    command = [MPIEXEC, "-n", str(ranks)]
    if _open_mpi():
        command += ["--bind-to", "none"] + (["--allow-run-as-root"] if _root() else [])
    return command


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@functools.cache
def _open_mpi() -> bool:
    """Whether ``mpiexec`` is Open MPI's (whose version line names it), not MPICH's."""
    try:
        out = subprocess.run([MPIEXEC, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = (out.stdout + out.stderr).lower()
    return "open mpi" in text or "openrte" in text or "prrte" in text or "prterun" in text


def population(setting: Setting, env: str, device: str, value_loss: str, rounds: int, ranks: list[int]) -> None:
    s = setting
    t_ready = s.pop_rollouts * s.rollout
    args = ["--env", env, "--search", "PBT", "--batchsize", str(POPULATION), "--seed", "0", "--device", device,
            "--t_ready", str(t_ready), "--max_budget", str(rounds * t_ready),
            "-m", f"n_envs={s.n_envs}", f"n_steps={s.n_steps}", f"batch_size={s.batch_size}", f"n_epochs={N_EPOCHS}",
            f"value_loss={value_loss}", "eval_episodes=0"]
    steps = POPULATION * t_ready * (rounds - 1)
    timed = "round 2" if rounds == 2 else f"rounds 2-{rounds}"
    print(f"(c) population {POPULATION} (PBT), {rounds} rounds of {t_ready:,} steps per member, test episodes off; "
          f"total env steps/s over {timed}" + (f"; launcher: {' '.join(launcher('N'))}" if ranks else ""),
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for n in [None, *ranks]:
            where = "one process, members in turn" if n is None else f"mpiexec -n {n} ({POPULATION // n} per rank)"
            r = population_rate(n, args, steps, Path(tmp) / f"n{n or 0}")
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
    if args.cores is not None:
        if not hasattr(os, "sched_setaffinity"):
            parser.error("--cores needs os.sched_setaffinity (Linux)")
        allowed = sorted(os.sched_getaffinity(0))
        if not 1 <= args.cores <= len(allowed):
            parser.error(f"--cores must be between 1 and the {len(allowed)} cores this process may use")
        os.sched_setaffinity(0, allowed[-args.cores:])  # before the member counts them; (c)'s processes inherit it
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA GPU")
    if not PROCGEN.recognises(args.env):
        parser.error(f"--env must be a ProcGen game, got {args.env!r}")
    for flag in ("repeats", "split_calls"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.pop_rounds < 2:
        parser.error("--pop-rounds must be at least 2 (the first round is not timed)")
    if any(n < 1 or POPULATION % n for n in args.ranks):
        parser.error(f"--ranks must divide the population of {POPULATION}")
    device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
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
          f"steps) per call; on {dev} ({where}), {counted(_cores(), 'core')}, torch {torch.__version__}, "
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
