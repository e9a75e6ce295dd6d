"""What DrAC's regulariser and the reference value loss cost: their PPO updates over SB3's on the same rollout.

The reference value loss first: a plain PPO member (``value_loss: reference``) collects one
rollout of bigfish; SB3's own ``PPO.train`` (its value loss, clipped with ``clip_range_vf``
0.2) and pbx's ``PPOUpdate.train`` with the reference loss update from that buffer,
alternating (SB3, reference, SB3); the ratio is the median over repeats of the reference
update's time over the mean of the two SB3 updates around it. Both run the same forward
and backward passes; the reference adds a few element-wise operations on (batch,)
tensors and two wrapped calls per minibatch, so about 1.0x is expected.

Then DrAC: one DrAC member collects one rollout of bigfish; then SB3's plain
``PPO.train`` and ``DrACPPO.train`` (with the reference loss) with each of the eight
augmentations update from that same buffer, alternating (plain, the eight DrAC updates, plain) so that background load
hits both alike; each ratio is the median over repeats of DrAC's time over the mean
of the two plain updates around it. DrAC runs the network once more per minibatch
(forward and backward on the augmented copy), so about 2x is the cost of the method
itself; the last column is the share of DrAC's update spent drawing the
augmentations, which should stay small.

Seen on an H100 (``--device cuda``, the paper's 64x256 rollout, 3 epochs of 8
minibatches of 2048, a random-frame image env standing in for ProcGen): plain
update 0.78 s, DrAC 1.42-1.47 s, ratio 1.83-1.89, augmentation 0.3-3.2% of it
(color_jitter the dearest). That was with the augmentation generator on the GPU; it
has been on the CPU since, its draws copied to the GPU each minibatch (random_conv's
kernels, 81 floats per image, 0.66 MB a minibatch, are the largest), which no GPU has
measured yet.

    .venv/bin/python benchmarks/bench_drac.py [--repeats 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
import torch

# pbx first: it silences the banner that importing procgen / SB3 would print (see pbx.envs).
from pbx.members.ppo.drac import DrACMember, DrACSettings, DrACPPO  # isort: skip
from stable_baselines3 import PPO
from stable_baselines3.common.utils import FloatSchedule

from pbx.members.base import MemberContext
from pbx.members.ppo.augment import AUGMENTATIONS
from pbx.members.ppo.ppo import PPOMember
from pbx.members.ppo.settings import PPOSettings

GAME = "bigfish"
# 4 envs x 64 steps = 256 samples in 4 minibatches of 64, one epoch: about a second per update on 2 idle cores.
SETTINGS = DrACSettings(n_envs=4, n_steps=64, batch_size=64, n_epochs=1, eval_episodes=0)
CONFIG = {"ent_coef": 0.01, "learning_rate": 5e-4, "clip_range": 0.2, "aug_type": "crop", "aug_coef": 0.1}


def seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def augmentation_seconds(model: DrACPPO, name: str) -> float:
    """Drawing ``name`` for every minibatch of one update (all epochs), alone."""
    high = float(np.max(model.observation_space.high))
    batches = [data.observations.float() for data in model.rollout_buffer.get(model.batch_size)]
    return model.n_epochs * seconds(lambda: [AUGMENTATIONS[name](obs, high, model.augment_rng) for obs in batches])


def value_loss(device: str, repeats: int) -> None:
    """Print the time of an update with the reference value loss against SB3's own, on one rollout."""
    plain = {k: v for k, v in vars(SETTINGS).items() if k not in ("aug_type", "aug_coef")}
    member = PPOMember(MemberContext(env=GAME, index=0, seed=0, device=device), PPOSettings(**plain),
                       {k: v for k, v in CONFIG.items() if k not in ("aug_type", "aug_coef")})
    member.train(SETTINGS.n_envs * SETTINGS.n_steps)  # fills the rollout buffer
    model = member.model
    assert model.value_loss == "reference"

    def sb3() -> None:
        model.clip_range_vf = FloatSchedule(0.2)  # SB3's loss, as value_loss: sb3 trains it
        try:
            PPO.train(model)
        finally:
            model.clip_range_vf = None

    sb3(), model.train()  # warm-up
    ratios, sb3_times, reference_times = [], [], []
    for _ in range(repeats):
        before, reference, after = seconds(sb3), seconds(model.train), seconds(sb3)
        sb3_times.append((before + after) / 2)
        reference_times.append(reference)
        ratios.append(reference / sb3_times[-1])
    print(f"SB3 value loss update {statistics.median(sb3_times):.3f} s, reference value loss update "
          f"{statistics.median(reference_times):.3f} s: reference / SB3 {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    print(f"{GAME}, {SETTINGS.n_envs}x{SETTINGS.n_steps} rollout, {SETTINGS.n_epochs} epoch of "
          f"{SETTINGS.n_envs * SETTINGS.n_steps // SETTINGS.batch_size} minibatches, {args.device}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    value_loss(args.device, args.repeats)
    member = DrACMember(MemberContext(env=GAME, index=0, seed=0, device=args.device), SETTINGS, CONFIG)
    member.train(SETTINGS.n_envs * SETTINGS.n_steps)  # fills the rollout buffer
    model = member.model

    def drac(name: str) -> Callable[[], None]:
        def run() -> None:
            model.aug_type = name
            model.train()
        return run

    def plain() -> None:
        PPO.train(model)  # SB3's own update, on the same model and buffer

    plain(), drac("crop")()  # warm-up
    ratios: dict[str, list[float]] = {name: [] for name in AUGMENTATIONS}
    times: dict[str, list[float]] = {name: [] for name in AUGMENTATIONS}
    plains: list[float] = []
    for _ in range(args.repeats):
        before = seconds(plain)
        ours = {name: seconds(drac(name)) for name in AUGMENTATIONS}
        after = seconds(plain)
        plains.append((before + after) / 2)
        for name, t in ours.items():
            ratios[name].append(t / plains[-1])
            times[name].append(t)
    print(f"plain PPO update: {statistics.median(plains):.3f} s")
    print(f"{'aug_type':<14}{'DrAC s':>9}{'DrAC/PPO':>10}{'augment share':>15}")
    for name in AUGMENTATIONS:
        drac_s = statistics.median(times[name])
        share = augmentation_seconds(model, name) / drac_s
        print(f"{name:<14}{drac_s:>9.3f}{statistics.median(ratios[name]):>10.2f}{share:>15.1%}")


if __name__ == "__main__":
    main()
