"""The PB2 paper's PPO setting on BipedalWalker-v3: pbx's member against plain SB3, and 1 MPI rank against 2.

(a) PPOMember training throughput / plain SB3 PPO with ``VecNormalize`` on the same env and
    config (target >= 0.95): the paper's 4 envs, 32x32 MLP, 10 epochs of minibatches of 128,
    normalised observations, one torch thread, 4,096-step rollouts (n_steps 1,024). The member
    adds its score callback, RNG swapping, normalisation statistics as learner state and
    hyperparameter plumbing; none of it may cost more than noise.
(b) A population of 2 such members, 1 rank (synchronous) against 2 MPI ranks, and the parallel
    efficiency T1 / (2 T2) (target >= 0.85 on 2 cores).

Contestants alternate (ours, baseline, baseline, ours) so background load hits both alike; each
ratio is the median of the per-repeat ratios. About 3 minutes on 2 idle cores.

    .venv/bin/python benchmarks/bench_continuous.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
# pbx first: it silences the banner that importing SB3 would print (see pbx.envs).
from pbx.envs import make_env  # isort: skip
from bench_mpi import throughput  # noqa: E402
from bench_overhead import Row, train_side_by_side  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

from pbx.members.base import MemberContext  # noqa: E402
from pbx.members.ppo.ppo import PPOMember, PPOSettings  # noqa: E402

ENV = "BipedalWalker-v3"
SETTINGS = PPOSettings(n_envs=4, n_steps=1024, batch_size=128, n_epochs=10, gamma=0.99, net_arch=[32, 32],
                       normalize_obs=True, normalize_reward=False, value_loss="sb3", clip_range_vf=None)
CONFIG = {"learning_rate": 3e-4, "clip_range": 0.2, "gae_lambda": 0.95}
ROLLOUTS_PER_CALL = 2
RUN = ["--env", ENV, "--search", "PBT", "--seed", "0", "--device", "cpu", "--t_ready", "8192", "--max_budget",
       "16384", "-m", "n_envs=4", "n_steps=1024", "batch_size=128", "n_epochs=10", "gamma=0.99", "net_arch=[32,32]",
       "normalize_reward=false", "eval_episodes=0"]


def member_vs_sb3(repeats: int) -> Row:
    """(a) PPOMember.train vs SB3's own learn() with VecNormalize, same env, policy and config."""
    s = SETTINGS
    steps = ROLLOUTS_PER_CALL * s.n_envs * s.n_steps
    member = PPOMember(MemberContext(env=ENV, index=0, seed=0, device="cpu"), s, CONFIG)
    env = VecNormalize(make_env(ENV, s.n_envs, seed=0), norm_obs=True, norm_reward=False, gamma=s.gamma)
    plain = PPO("MlpPolicy", env, learning_rate=CONFIG["learning_rate"], n_steps=s.n_steps,
                batch_size=s.batch_size, n_epochs=s.n_epochs, gamma=s.gamma, gae_lambda=CONFIG["gae_lambda"],
                clip_range=CONFIG["clip_range"], ent_coef=s.ent_coef, vf_coef=s.vf_coef,
                max_grad_norm=s.max_grad_norm, policy_kwargs={"net_arch": [32, 32]}, device="cpu", seed=0)
    torch.set_num_threads(1)  # as the member does for an MLP
    return train_side_by_side(member, plain, steps, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    row = member_vs_sb3(args.repeats)
    print(f"{row.name}: {row.ours:,.0f} / {row.baseline:,.0f} {row.unit} = {row.ratio:.3f} ({row.verdict})",
          flush=True)
    print(f"(b) {ENV}, population 2, 16,384 steps per member: 1 rank against 2", flush=True)
    medians = throughput(RUN, 2, [1, 2], args.repeats, 16384)
    efficiency = medians[1] / (2 * medians[2])
    print(f"parallel efficiency {efficiency:.2f} ({'>= 0.85 ok' if efficiency >= 0.85 else '>= 0.85 MISSED'})")


if __name__ == "__main__":
    main()
