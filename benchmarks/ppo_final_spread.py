"""How far rounding alone moves the weights after one PPO iteration, beside how far pbx's departures from ppo2 do.

``tests/test_ppo_reference.py`` checks the weights after one iteration of the member against those after the
port's (``final``); PPO's update is not continuous in the weights (clipping), so its tolerance must sit above
what rounding does to them and below what every departure does. This script measures both: it records the
test's round once, then runs the port's iteration (at pbx's choices) ``--trials`` times, its initial weights each
multiplied elementwise by ``1 + scale * N(0, 1)`` and the values and log-probabilities of its rollout by
``1 + rollout_scale * N(0, 1)``, and prints the ``final`` check's value for each against the member
(``--dtype float64``: the port in float64 against the member's update replayed in float64, as the test compares
them; ``float32``: both as they ran), their min, median and max, the unperturbed member-vs-port value, and with
``--departures`` each departure's (one switch of the port back at the reference's choice).

The defaults are what differs between the two sides in float64: float64's rounding (``--scale 1e-15``) and the
rollout, which the member computed in float32 and the port in float64 (``--rollout-scale 1e-7``, float32's
rounding). ``--scale 1e-7 --rollout-scale 0`` is the float32 trial of the test's module docstring. Each
iteration of the port takes about a minute on one core (float64 the dearer), several on a loaded machine.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ppo_final_spread.py [--trials 15]
        [--scale 1e-15] [--rollout-scale 1e-7] [--dtype float64] [--departures]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import ppo2_port as port  # noqa: E402  # isort: skip
import test_ppo_reference as reference  # noqa: E402  # isort: skip


def final(rec: reference.Recording, update: reference.Update, dtype: torch.dtype) -> float:
    """The ``final`` check of ``update`` against the member's run in ``dtype``."""
    member = rec.after64 if dtype == torch.float64 else rec.after
    return reference.max_difference(reference.in_pbx_names(update.params, member), member)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--scale", type=float, default=1e-15, help="relative size of each weight's perturbation")
    parser.add_argument("--rollout-scale", type=float, default=1e-7,
                        help="relative size of the perturbation of each value and log-probability of the rollout")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--departures", action="store_true", help="also each departure's value, unperturbed")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(1)
    rec = reference.record()
    unperturbed = final(rec, reference.port_iteration(rec, reference.PBX, dtype=dtype), dtype)
    print(f"member vs port ({args.dtype}): {unperturbed:.3g}", flush=True)
    if args.departures:
        for departure in sorted(reference.DEPARTURES):
            choices = dataclasses.replace(reference.PBX, **{departure: getattr(reference.REFERENCE, departure)})
            value = final(rec, reference.port_iteration(rec, choices, dtype=dtype), dtype)
            print(f"{departure} = {getattr(reference.REFERENCE, departure)!r}: {value:.3g}", flush=True)
    generator = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    step = port.Model.step

    def perturb(value: torch.Tensor) -> torch.Tensor:
        return value * (1 + args.scale * torch.randn(value.shape, generator=generator, dtype=value.dtype))

    def perturbed_step(model: port.Model, obs: np.ndarray, actions: np.ndarray) -> tuple:
        actions, values, states, neglogpacs = step(model, obs, actions)
        noise = args.rollout_scale * rng.standard_normal((2, *values.shape))
        return actions, values * (1 + noise[0]), states, neglogpacs * (1 + noise[1])

    values = []
    with mock.patch.object(port.Model, "step", perturbed_step):
        for trial in range(args.trials):
            values.append(final(rec, reference.port_iteration(rec, reference.PBX, perturb, dtype), dtype))
            print(f"trial {trial + 1}: {values[-1]:.3g}", flush=True)
    print(f"{args.trials} trials, scale {args.scale:g}, rollout {args.rollout_scale:g}, {args.dtype}: "
          f"min {min(values):.3g}, median {statistics.median(values):.3g}, max {max(values):.3g}")


if __name__ == "__main__":
    main()
