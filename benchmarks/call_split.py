"""Where one call of a PPO (pbx's member or plain SB3) spends its time: ``bench_gpu.py``'s (b).

:class:`Split` wraps timers around methods of the two instances (SB3 and pbx are not edited) and sums each part
over the calls made inside it; :func:`split` times calls of both sides alternately and prints the table. The
rows add up to the calls' wall time; on CUDA each reading of the :class:`Clock` first waits for the GPU, so GPU
work is counted in the part that launched it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from stable_baselines3.common.base_class import BaseAlgorithm

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


def counted(n: int, word: str, plural: str = "") -> str:
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


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
