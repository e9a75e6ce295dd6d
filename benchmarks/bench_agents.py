"""The SB3 agents as members: their throughput against plain SB3's, and what a replay buffer costs a checkpoint.

(a) For SAC and TD3 on Pendulum-v1, DQN and A2C on CartPole-v1: the member's ``train`` throughput /
    plain SB3's ``learn`` on the same env and settings (target >= 0.95). The member adds its score
    callback, RNG swapping, observation statistics as learner state, episode starts (off-policy),
    hyperparameter plumbing and a row counter on the replay buffer.
(b) A SAC member with a 1,000,000-transition buffer of BipedalWalker-v3's shapes (observation 24,
    action 4), filled by rounds of ``ROUND`` random rows (no env steps) and saved after each as the
    runner saves and prunes: a round's save time while the buffer fills and once it is full and
    rolls over, the disk the member's files hold, a resume's load; and with ``copy_buffer`` (the
    whole buffer in every checkpoint) for comparison.

Contestants of (a) alternate (ours, baseline, baseline, ours) so background load hits both alike;
each ratio is the median of the per-repeat ratios. About 5 minutes on 2 idle cores.

    .venv/bin/python benchmarks/bench_agents.py [--repeats 3] [--skip-throughput] [--skip-checkpoint]
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
# pbx first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import make_env  # isort: skip
from bench_overhead import Row, train_side_by_side  # noqa: E402
from stable_baselines3 import A2C, DQN, SAC, TD3  # noqa: E402
from stable_baselines3.common.noise import NormalActionNoise  # noqa: E402

from pbx.members.a2c.a2c import A2CMember, A2CSettings  # noqa: E402
from pbx.members.base import MemberContext  # noqa: E402
from pbx.members.offpolicy.dqn import DQNMember, DQNSettings  # noqa: E402
from pbx.members.offpolicy.replay_store import FIELDS, put_rows  # noqa: E402
from pbx.members.offpolicy.sac import SACMember, SACSettings  # noqa: E402
from pbx.members.offpolicy.td3 import TD3Member, TD3Settings  # noqa: E402
from pbx.members.sb3.member import SB3Member  # noqa: E402

OFF = {"buffer_size": 100_000, "learning_starts": 100, "batch_size": 256}
NET = {"policy_kwargs": {"net_arch": [64, 64]}}
DQN_ZOO = {"buffer_size": 100_000, "learning_starts": 1_000, "batch_size": 64, "target_update_interval": 10,
           "train_freq": 256, "gradient_steps": 128, "exploration_fraction": 0.16, "exploration_final_eps": 0.04,
           "learning_rate": 2.3e-3}
# (member class, settings, env, plain SB3 class, its arguments, env steps per timed call)
AGENTS: list[tuple[type[SB3Member], Any, str, type, dict[str, Any], int]] = [
    (SACMember, SACSettings(**OFF, net_arch=[64, 64]), "Pendulum-v1", SAC, {**OFF, **NET}, 1_000),
    (TD3Member, TD3Settings(**OFF, net_arch=[64, 64]), "Pendulum-v1", TD3, {**OFF, **NET}, 1_000),
    # rl-zoo's CartPole DQN
    # rl-zoo's CartPole DQN at its final epsilon throughout (plain SB3 would restart its schedule every call)
    (DQNMember, DQNSettings(**DQN_ZOO, exploration_initial_eps=0.04, net_arch=[256, 256]), "CartPole-v1", DQN,
     {**DQN_ZOO, "exploration_initial_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]}}, 4_096),
    (A2CMember, A2CSettings(n_envs=8), "CartPole-v1", A2C, {}, 8_000),
]
ROWS = 1_000_000
OBS, ACT = 24, 4
ROUND = 50_000
"""Rows a round adds: the PB2 paper's continuous-control exploit interval, 50,000 steps of one env."""


def member_vs_sb3(cls: type[SB3Member], settings: Any, env: str, sb3: type, kwargs: dict[str, Any], steps: int,
                  repeats: int) -> Row:
    """(a) ``member.train(steps)`` against ``plain.learn(steps)``, same env, settings and network."""
    member = cls(MemberContext(env=env, index=0, seed=0, device="cpu"), settings, {})
    kwargs = copy.deepcopy(kwargs)  # SB3 adds to policy_kwargs in place
    if sb3 is TD3:  # rl-zoo's noise, which the member adds by default
        kwargs = {**kwargs, "action_noise": NormalActionNoise(np.zeros(1), np.full(1, settings.noise_std))}
    plain = sb3("MlpPolicy", make_env(env, settings.n_envs, seed=0), device="cpu", seed=0, **kwargs)
    torch.set_num_threads(1)  # as the member does for an MLP
    return train_side_by_side(member, plain, steps, repeats, f"(a) {cls.name} member.train / SB3 {sb3.__name__}.learn")



def _fill(member: SACMember, rows: int, rng: np.random.Generator) -> None:
    """``rows`` random transitions written as SB3's ``add`` writes them, one row after another round the ring."""
    buffer = member.model.replay_buffer
    put_rows(buffer, buffer.pos, {name: rng.standard_normal((rows, *getattr(buffer, name).shape[1:]),
                                                             dtype=np.float32) for name in FIELDS})
    buffer.full = buffer.full or buffer.pos + rows >= buffer.buffer_size
    buffer.pos = (buffer.pos + rows) % buffer.buffer_size
    buffer.added += rows


def _files_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.iterdir()) / 1e6


def checkpoints(rounds: int = ROWS // ROUND + 4) -> None:
    """(b) Size and time of a SAC member's saves, round after round, as its buffer fills up and rolls over."""
    rng = np.random.default_rng(0)
    print(f"(b) SAC, BipedalWalker-v3 shapes (obs {OBS}, act {ACT}), {ROWS:,}-transition buffer filled in rounds of "
          f"{ROUND:,} steps, {rounds} rounds", flush=True)
    context = MemberContext(env="BipedalWalker-v3", index=0, seed=0, device="cpu")
    for copy_buffer in (False, True):
        settings = SACSettings(buffer_size=ROWS, copy_buffer=copy_buffer, net_arch=[400, 300])
        member = SACMember(context, settings, {})
        with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
            folder = Path(tmp)
            times, sizes = [], []
            for r in range(rounds):
                _fill(member, ROUND, rng)
                start = time.perf_counter()
                member.save(folder / f"member_0.r{r}.ckpt")
                times.append(time.perf_counter() - start)
                sizes.append(_files_mb(folder))  # round r - 1's checkpoint is still there, as in a run
                (folder / f"member_0.r{r - 1}.ckpt").unlink(missing_ok=True)  # round r is in the history: prune
            start = time.perf_counter()
            SACMember(context, settings, {}).load(folder / f"member_0.r{rounds - 1}.ckpt", own=True)
            load = time.perf_counter() - start
            checkpoint = (folder / f"member_0.r{rounds - 1}.ckpt").stat().st_size / 1e6
        full = ROWS // ROUND
        kind = "copy_buffer: the whole buffer in every checkpoint" if copy_buffer else "default: rows beside it"
        print(f"    {kind}: a round's save {np.median(times[:full]):.2f} s while filling, {np.median(times[full:]):.2f} s "
              f"full; the checkpoint file {checkpoint:.1f} MB; the member's files at most {max(sizes):.0f} MB "
              f"(full, after a save: {np.median(sizes[full:]):.0f} MB); a resume's load {load:.2f} s", flush=True)
    buffer = member.model.replay_buffer
    print(f"    the buffer in memory: {sum(getattr(buffer, name).nbytes for name in FIELDS) / 1e6:.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-checkpoint", action="store_true")
    parser.add_argument("--only", choices=[cls.algo for cls, *_ in AGENTS], help="time one agent's throughput")
    args = parser.parse_args()
    if not args.skip_throughput:
        for agent in (a for a in AGENTS if args.only in (None, a[0].algo)):
            row = member_vs_sb3(*agent, repeats=args.repeats)
            print(f"{row.name}: {row.ours:,.0f} / {row.baseline:,.0f} {row.unit} = {row.ratio:.3f} ({row.verdict})",
                  flush=True)
    if not args.skip_checkpoint:
        checkpoints()


if __name__ == "__main__":
    main()
