"""One whole PPO iteration of pbx's member against a PyTorch port of the reference (baselines ``ppo2``).

The member trains one rollout and one update on a real ProcGen game from its initial weights, and spies that
change nothing record what the port needs: the raw rewards and dones, the observations and actions, the values
and log-probabilities the rollout computed, the reward normaliser's state before the round, NumPy's RNG state
where SB3 draws the minibatch order, and the weights and clipped gradient of every optimizer step.
``tests/ppo2_port.py`` then runs the same iteration as ppo2 and train-procgen's ``VecNormalize`` do, its
network starting from the member's weights and its shuffle from the member's NumPy state.

With every switch of the port at pbx's choice (``ppo2_port.PBX``) the two agree: the normalised rewards bit
for bit, the rollout's values, log-probabilities and returns, the minibatches, each step's gradient at the
member's weights, Adam's steps on the member's gradients, and the weights after the iteration. With any one
switch back at the reference's choice they do not: each departure that ``docs/algorithms.md`` lists is real,
and with all of them at pbx's choice nothing else differs.

Why the comparison works step by step as well as end to end, and end to end in float64: PPO's update is not
continuous in the weights (a sample whose probability ratio or value crosses the clip range stops contributing to
the gradient), and the value clip binds on most samples here. Perturbing the initial weights by 1e-7 of their
size, float32 rounding, moved the weights after the iteration by 2e-5 to 1.05e-3 (15 trials; in float64, 6.2e-7
to 1.2e-3 in 9), so the member's float32 iteration and the port's agree only to ~1e-3 (8.9e-5 on one machine,
9.8e-4 on another), within 2x of the departures' 5e-3 to 1.15e-2. The ``final`` check therefore compares the
two in float64: the member's update replayed by SB3's own ``train()`` from its rollout buffer and initial weights
(:func:`replay_in_float64`), the port's whole iteration with float64 variables (:func:`port_iteration`). Both start
from the same weights; what differs is the rollout (the member's values and log-probabilities computed in
float32, the port's in float64, both stored in float32) and float64 rounding, which cross no clip: 2.1e-8 apart,
and 2.6e-8 to 7.2e-8 with the port's rollout values and log-probabilities perturbed by 1e-7 of their size and its
weights by 1e-15 (see :data:`TOLERANCE`; ``benchmarks/ppo_final_spread.py`` redoes the trials). The per-step
comparisons start each step from the member's own state, so nothing compounds, and they hold to float32 rounding.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import torch

from pbx.members.base import MemberContext
from pbx.members.ppo.ppo import PPOMember, PPOSettings

import ppo2_port as port
from ppo2_port import PBX, REFERENCE, AdamOptimizer, Choices, Model, RecordedVecEnv, Update, sf01

# dodgeball, seed 1: in 8 envs x 32 steps three rewards, one of them clipped at 10 by the normaliser, and three
# episode ends; 8 minibatches of 32 in 3 epochs (train-procgen's), the member's defaults otherwise.
GAME, SEED = "dodgeball", 1
# Its only rewarded episode ends on the rollout's last step, where the return normaliser's reset at an episode end
# changes nothing after it: a normaliser that kept its returns across episode ends passed. jumper, seed 1: a
# rewarded episode ends in env 6's first step, and a reward in a later step is scaled by return statistics that
# the reset changed.
ENDS_GAME, ENDS_SEED = "jumper", 1
SETTINGS = {"n_envs": 8, "n_steps": 32, "batch_size": 32, "n_epochs": 3, "eval_episodes": 0}
CONFIG = {"ent_coef": 0.01, "learning_rate": 5e-4, "clip_range": 0.2}
ROLLOUT = SETTINGS["n_envs"] * SETTINGS["n_steps"]
NMINIBATCHES = ROLLOUT // SETTINGS["batch_size"]
BATCH_KEYS = ("obs", "returns", "masks", "actions", "values", "neglogpacs")

ROLLOUT_RTOL, ROLLOUT_ATOL = 1e-5, 1e-6
"""For the rollout's values, log-probabilities and returns. Seen: values 8e-8 apart (of up to 0.06),
log-probabilities 5e-7 (of 2.7, 2e-7 relative), returns 1.4e-6 (of up to 10; GAE sums 32 steps of values)."""
TOLERANCE = {
    "rewards": 0.0,
    "rollout": 1.0,
    "minibatches": 0,
    "gradients": 1e-6,
    "adam": 1e-8,
    "final": 1e-5,
}
"""The most each check (:class:`Comparison`) may measure. ``rewards``: the normalised rewards, max difference
(the same numpy operations in the same order: equal). ``rollout``: values, log-probabilities and returns, the
largest ``|a - b| / (ROLLOUT_ATOL + ROLLOUT_RTOL |b|)``. ``minibatches``: minibatches whose indices differ.
``gradients``: each step's clipped gradient of the port at the member's weights before that step, on the port's
minibatch, against the member's, ``|g_port - g_member| / |g_member|`` at its largest over the 24 steps (seen:
4.4e-7, float32 sums in other orders). ``adam``: the port's optimizer fed the member's gradients, the largest
difference from the member's weights after any step (seen: 0, the same elementwise operations). ``final``:
the weights after the iteration in float64 (the member's update replayed, the port's iteration), the largest
difference. Measured on the shared 2-core CPU machine: 2.1e-8; with the port's rollout perturbed (1e-7 of each
value and log-probability) and its weights (1e-15), min 2.6e-8, median 4.5e-8, max 7.2e-8 over 6 trials; the
departures that must fail it 5.0e-3 (shuffle), 8.5e-3 (adam), 1.15e-2 (max_pool). 1e-5 sits 140x above the
largest trial and 500x below the nearest departure (the module docstring says why not in float32, where the
two were 2x)."""


@dataclass
class Step:
    """One optimizer step of the member's update."""

    grads: dict[str, torch.Tensor]
    """The gradient it applied (after SB3's gradient clipping)."""
    weights: dict[str, torch.Tensor]
    """The weights after it."""


@dataclass
class Recording:
    """One round of the member as the port needs it, and the member's weights before, during and after it."""

    obs: np.ndarray
    """(n_steps + 1, n_envs, H, W, C) uint8: the observations the policy saw, then the bootstrap's."""
    actions: np.ndarray
    raw_rewards: np.ndarray
    dones: np.ndarray
    """(n_steps, n_envs): ProcGen's ``first`` after each step (the episode ended with it)."""
    ret: np.ndarray
    ret_rms: tuple[Any, Any, Any]
    numpy_state: tuple
    """NumPy's global state as SB3's ``RolloutBuffer.get`` began (before its first ``np.random.permutation``)."""
    buffer: dict[str, np.ndarray]
    """The rollout buffer as the update began, (n_steps, n_envs, ...): observations, actions, rewards (as
    normalised), values, log_probs, returns."""
    minibatches: list[np.ndarray]
    """The flat indices of each minibatch SB3 trained on, in order."""
    before: dict[str, torch.Tensor]
    steps: list[Step]
    after64: dict[str, torch.Tensor] | None
    """The weights after SB3's own update replayed in float64 (:func:`replay_in_float64`), if asked for."""

    @property
    def after(self) -> dict[str, torch.Tensor]:
        return self.steps[-1].weights


def policy_weights(member: PPOMember) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in member.model.policy.named_parameters()}


def record(game: str = GAME, seed: int = SEED, replay: bool = True) -> Recording:
    """Build the member, train it one rollout and one update, record what the spies saw, and (``replay``) replay
    the update in float64."""
    context = MemberContext(env=game, index=0, seed=seed, device="cpu", log_dir=None)
    member = PPOMember(context, PPOSettings(**SETTINGS), dict(CONFIG))
    model, norm, venv = member.model, member._norm, member._venv
    buffer, optimizer = model.rollout_buffer, model.policy.optimizer
    env_steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    got: dict[str, Any] = {}
    minibatches: list[np.ndarray] = []
    steps: list[Step] = []
    parameters = list(model.policy.named_parameters())
    start_obs = np.array(model._last_obs)

    step_wait = venv.step_wait

    def step_wait_spy() -> Any:
        obs, rew, first, infos = step_wait()
        env_steps.append((np.array(obs), np.array(rew), np.array(first)))
        return obs, rew, first, infos

    get = buffer.get

    def get_spy(batch_size: int | None = None) -> Iterator[Any]:
        if not got:
            got["numpy_state"] = np.random.get_state()
            got["buffer"] = {name: np.array(getattr(buffer, name)) for name in (
                "observations", "actions", "rewards", "values", "log_probs", "returns")}
        yield from get(batch_size)

    get_samples = buffer._get_samples

    def get_samples_spy(batch_inds: np.ndarray, env: Any = None) -> Any:
        minibatches.append(np.array(batch_inds))
        return get_samples(batch_inds, env)

    optimizer_step = optimizer.step

    def optimizer_step_spy(*args: Any, **kwargs: Any) -> Any:
        grads = {name: p.grad.detach().clone() for name, p in parameters}
        result = optimizer_step(*args, **kwargs)
        steps.append(Step(grads=grads, weights={name: p.detach().clone() for name, p in parameters}))
        return result

    before = policy_weights(member)
    ret = np.array(norm.returns)
    ret_rms = (np.copy(norm.ret_rms.mean), np.copy(norm.ret_rms.var), norm.ret_rms.count)
    venv.step_wait = step_wait_spy  # type: ignore[method-assign]
    buffer.get = get_spy  # type: ignore[method-assign]
    buffer._get_samples = get_samples_spy  # type: ignore[method-assign]
    optimizer.step = optimizer_step_spy  # type: ignore[method-assign]
    try:
        member.train(ROLLOUT)
    finally:
        del venv.step_wait, buffer.get, buffer._get_samples, optimizer.step
    after64 = replay_in_float64(member, before, got["numpy_state"]) if replay else None
    member.close()

    assert len(env_steps) == SETTINGS["n_steps"]
    assert len(minibatches) == len(steps) == SETTINGS["n_epochs"] * NMINIBATCHES
    # ProcGen's frames are channels last; pbx's adapter hands SB3 a channels-first view of them
    frames = np.stack([start_obs] + [obs for obs, _, _ in env_steps]).transpose(0, 1, 3, 4, 2)
    return Recording(
        obs=np.ascontiguousarray(frames),
        actions=got["buffer"]["actions"][..., 0].astype(np.int64),
        raw_rewards=np.stack([rew for _, rew, _ in env_steps]),
        dones=np.stack([first for _, _, first in env_steps]),
        ret=ret, ret_rms=ret_rms, numpy_state=got["numpy_state"], buffer=got["buffer"],
        minibatches=minibatches, before=before, steps=steps, after64=after64)


def replay_in_float64(member: PPOMember, before: dict[str, torch.Tensor],
                      numpy_state: tuple) -> dict[str, torch.Tensor]:
    """The member's update once more, SB3's own ``train()`` on the rollout buffer it just trained on, from the
    weights ``before`` and NumPy's state as the update began (so the same minibatches), in float64: the policy
    and Adam's moments in float64, the buffer's float32 values, log-probabilities, advantages and returns cast
    up, the observations scaled by SB3 in float32 and cast up as the network takes them. Returns the weights
    after it. The member is left in float64: close it after."""
    model = member.model
    policy, buffer = model.policy, model.rollout_buffer
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            parameter.copy_(before[name])
    policy.double()  # in place: the optimizer holds the same parameters
    policy.optimizer.state.clear()  # Adam's moments and step count start afresh, in the parameters' dtype
    buffer._flat = {name: t.double() if t.is_floating_point() else t for name, t in buffer._flat.items()}
    cast = policy.features_extractor.register_forward_pre_hook(lambda module, args: (args[0].double(),))
    np.random.set_state(numpy_state)
    try:
        model.train()
    finally:
        cast.remove()
    return policy_weights(member)


# --- pbx's parameters and the port's TF variables --------------------------------------------------------------

def tf_name(name: str) -> str:
    """The TF variable (``build_impala_cnn``'s ``layer_N``, the ``pi`` and ``vf`` heads) of a pbx parameter."""
    match = re.fullmatch(r"features_extractor\.stacks\.(\d)\.(conv|res(\d)\.conv(\d))\.(weight|bias)", name)
    if match:  # per stack: its conv, then two residual blocks of two convs, numbered in that order
        stack, _, block, conv, kind = match.groups()
        layer = 5 * int(stack) + (0 if block is None else 1 + 2 * int(block) + int(conv))
        return f"ppo2_model/pi/layer_{layer}/{'kernel' if kind == 'weight' else 'bias'}"
    match = re.fullmatch(r"(features_extractor\.fc|action_net|value_net)\.(weight|bias)", name)
    assert match, name
    module, kind = match.groups()
    if module == "features_extractor.fc":
        return f"ppo2_model/pi/layer_15/{'kernel' if kind == 'weight' else 'bias'}"
    return f"ppo2_model/{'pi' if module == 'action_net' else 'vf'}/{'w' if kind == 'weight' else 'b'}"


FLAT = (32, 8, 8)
"""The IMPALA CNN's last feature map on 64x64 frames (channels, height, width)."""


def to_tf(name: str, value: torch.Tensor) -> torch.Tensor:
    """A pbx parameter (or its gradient) in TF's layout: conv (out, in, h, w) -> (h, w, in, out); linear
    (out, in) -> (in, out), the dense layer's inputs from PyTorch's (c, h, w) flattening to TF's (h, w, c)."""
    if value.dim() == 4:
        value = value.permute(2, 3, 1, 0)
    elif name == "features_extractor.fc.weight":
        value = value.reshape(-1, *FLAT).permute(2, 3, 1, 0).reshape(-1, value.shape[0])
    elif value.dim() == 2:
        value = value.t()
    return value.clone(memory_format=torch.contiguous_format)  # a copy always (the port trains in place)


def from_tf(name: str, value: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`to_tf`."""
    if value.dim() == 4:
        value = value.permute(3, 2, 0, 1)
    elif name == "features_extractor.fc.weight":
        channels, height, width = FLAT
        value = value.reshape(height, width, channels, -1).permute(3, 2, 0, 1).reshape(value.shape[1], -1)
    elif value.dim() == 2:
        value = value.t()
    return value.clone(memory_format=torch.contiguous_format)


def port_params(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """pbx's weights (or gradients) as the port's variables, in ``tf.trainable_variables`` order."""
    by_tf = {tf_name(name): to_tf(name, value) for name, value in weights.items()}
    shapes = port.variable_shapes((64, 64, 3), ncat=15)
    assert set(by_tf) == set(shapes)
    assert all(tuple(by_tf[name].shape) == shape for name, shape in shapes.items())
    return {name: by_tf[name] for name in shapes}


def in_pbx_names(params: dict[str, torch.Tensor], like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: from_tf(name, params[tf_name(name)]) for name in like}


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[name] - b[name]).abs().max()) for name in a)


def numpy_random(rec: Recording) -> np.random.RandomState:
    """NumPy's global RandomState as the member's update began (ppo2 shuffles with the global one)."""
    random = np.random.RandomState()
    random.set_state(rec.numpy_state)
    return random


def recorded_env(rec: Recording) -> RecordedVecEnv:
    return RecordedVecEnv(rec.obs, rec.actions, rec.raw_rewards, rec.dones)


@dataclass
class Rollout:
    """The port's rollout and minibatch order, without its training."""

    rewards: np.ndarray
    """The rewards as its VecNormalize normalised them, (n_steps, n_envs)."""
    batch: dict[str, np.ndarray]
    minibatches: list[np.ndarray]


class Comparison:
    """The port's iteration with ``choices``, measured against the member's, one check at a time (see
    :data:`TOLERANCE` for what each measures). The port runs as far as the checks asked for need: its rollout
    and minibatch order (``rewards``, ``rollout``, ``minibatches``, ``gradients``), its whole update
    (``final``), or neither (``adam``)."""

    def __init__(self, rec: Recording, choices: Choices, stop_past_tolerance: bool = False) -> None:
        self.rec, self.choices = rec, choices
        self.stop_past_tolerance = stop_past_tolerance
        """Stop a check that goes step by step at the first step past its tolerance (enough to fail it)."""
        self.checks: dict[str, Callable[[], float]] = {
            "rewards": self.rewards, "rollout": self.rollout, "minibatches": self.minibatches,
            "gradients": self.gradients, "adam": self.adam, "final": self.final}

    @functools.cached_property
    def port_rollout(self) -> Rollout:
        runner = port.make_runner(env=recorded_env(self.rec), params=port_params(self.rec.before), ret=self.rec.ret,
                                  ret_rms=self.rec.ret_rms, choices=self.choices)
        batch = dict(zip(BATCH_KEYS, runner.run()))
        minibatches = port.minibatch_order(numpy_random(self.rec), ROLLOUT, self.choices, NMINIBATCHES,
                                           SETTINGS["n_epochs"])
        return Rollout(rewards=runner.mb_rewards, batch=batch, minibatches=minibatches)

    @functools.cached_property
    def port_update(self) -> Update:
        """The port's whole iteration with its variables in float64, to set beside the member's update replayed
        in float64 (:attr:`Recording.after64`)."""
        return port_iteration(self.rec, self.choices)

    def measure(self, check: str) -> float:
        return self.checks[check]()

    def rewards(self) -> float:
        return float(np.abs(self.port_rollout.rewards - self.rec.buffer["rewards"]).max())

    def rollout(self) -> float:
        batch, buffer = self.port_rollout.batch, self.rec.buffer
        pairs = [(batch["values"], sf01(buffer["values"])), (batch["neglogpacs"], -sf01(buffer["log_probs"])),
                 (batch["returns"], sf01(buffer["returns"]))]
        return max(float((np.abs(a - b) / (ROLLOUT_ATOL + ROLLOUT_RTOL * np.abs(b))).max()) for a, b in pairs)

    def minibatches(self) -> int:
        ours, sb3 = self.port_rollout.minibatches, self.rec.minibatches
        return sum(not np.array_equal(a, b) for a, b in zip(ours, sb3)) + abs(len(ours) - len(sb3))

    def gradients(self) -> float:
        rec, batch, worst = self.rec, self.port_rollout.batch, 0.0
        for i, inds in enumerate(self.port_rollout.minibatches):
            weights = rec.before if i == 0 else rec.steps[i - 1].weights
            model = Model(params=port_params(weights), ent_coef=port.ent_coef, vf_coef=port.vf_coef,
                          max_grad_norm=port.max_grad_norm, choices=self.choices)
            ours = model.gradients(port.clip_range, *(batch[key][inds] for key in BATCH_KEYS))
            theirs = list(port_params(rec.steps[i].grads).values())
            difference = math.sqrt(sum(float(((a - b) ** 2).sum()) for a, b in zip(ours, theirs)))
            norm = math.sqrt(sum(float((b ** 2).sum()) for b in theirs))
            worst = max(worst, difference / norm)
            if self.stop_past_tolerance and worst > TOLERANCE["gradients"]:
                break
        return worst

    def adam(self) -> float:
        rec, worst = self.rec, 0.0
        params = port_params(rec.before)
        trainer = AdamOptimizer(list(params.values()), epsilon=1e-5, choice=self.choices.adam)
        for step in rec.steps:
            trainer.apply_gradients(list(zip(port_params(step.grads).values(), params.values())), port.learning_rate)
            worst = max(worst, max_difference(in_pbx_names(params, step.weights), step.weights))
        return worst

    def final(self) -> float:
        assert self.rec.after64 is not None, "recorded without the float64 replay"
        return max_difference(in_pbx_names(self.port_update.params, self.rec.after64), self.rec.after64)


def port_iteration(rec: Recording, choices: Choices, perturb: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   dtype: torch.dtype = torch.float64) -> Update:
    """The port's whole iteration (rollout and update) from the member's weights before the round, cast to
    ``dtype`` and then, if given, passed through ``perturb``."""
    params = {name: value.to(dtype) for name, value in port_params(rec.before).items()}
    if perturb is not None:
        params = {name: perturb(value) for name, value in params.items()}
    return port.learn_one_update(env=recorded_env(rec), params=params, random=numpy_random(rec), ret=rec.ret,
                                 ret_rms=rec.ret_rms, choices=choices, nminibatches=NMINIBATCHES,
                                 noptepochs=SETTINGS["n_epochs"])


@pytest.fixture(scope="module")
def rec() -> Iterator[Recording]:
    # one thread for the member and the port alike (the member sets torch's threads when it is built)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield record()
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pbx(rec: Recording) -> Comparison:
    return Comparison(rec, PBX)


def test_the_return_normaliser_resets_at_episode_ends_as_the_reference() -> None:
    """train-procgen's ``VecNormalize`` zeroes an env's discounted return when its episode ends; a rollout in
    which a rewarded episode ends and a reward follows scales that reward by the statistics of the returns after
    the reset, so the port's normalised rewards equal the member's bit for bit only if the member resets too
    (a member that kept its returns across the end failed here: see the commit that added this test)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ends = record(ENDS_GAME, ENDS_SEED, replay=False)
    finally:
        torch.set_num_threads(threads)
    assert _rewarded_episode_ends_before_a_reward(ends.raw_rewards, ends.dones)
    assert Comparison(ends, PBX).measure("rewards") == TOLERANCE["rewards"] == 0.0


def test_the_recorded_round_exercises_the_reward_clip_value_clipping_and_episode_ends(
        rec: Recording, pbx: Comparison) -> None:
    """The case covers what the comparison must: a normalised reward clipped at 10 (ret_rms starts at var 1,
    count 1e-4, so a first reward after steps of none exceeds 10) beside rewards that are not, episode ends
    inside the rollout, values moved past the clip range from the rollout's (so the value clip binds), and an
    update that moves every weight."""
    rewards = rec.buffer["rewards"]
    assert (np.abs(rewards) == 10.0).any()
    assert ((rewards != 0) & (np.abs(rewards) < 10.0)).any()
    assert rec.dones.any()
    batch = pbx.port_rollout.batch
    for i, inds in enumerate(pbx.port_rollout.minibatches[1:], start=1):
        model = Model(params=port_params(rec.steps[i - 1].weights), ent_coef=port.ent_coef, vf_coef=port.vf_coef,
                      max_grad_norm=port.max_grad_norm, choices=PBX)
        if (np.abs(model.value(batch["obs"][inds]) - batch["values"][inds]) > port.clip_range).any():
            break  # a value further than clip_range from the rollout's, at the weights SB3 evaluates it with
    else:
        pytest.fail("no value moved past the clip range during the update: value clipping went untested")
    assert all(not torch.equal(rec.before[name], rec.after[name]) for name in rec.before)


def _rewarded_episode_ends_before_a_reward(raw_rewards: np.ndarray, dones: np.ndarray) -> bool:
    """Whether an episode with a reward in the rollout ends before its last step and a reward comes after: then
    the discounted return the normaliser resets at the episode's end is nonzero, and the reset changes the
    return statistics that scale the later reward (each (n_steps, n_envs))."""
    for env in range(dones.shape[1]):
        start = 0
        for step in np.flatnonzero(dones[:, env]):
            if raw_rewards[start:step + 1, env].any() and (raw_rewards[step + 1:] != 0).any():
                return True
            start = step + 1
    return False


def test_the_reference_shuffle_agrees_with_sb3s_in_the_first_epoch_only(rec: Recording) -> None:
    """NumPy's legacy ``permutation(n)`` shuffles ``arange(n)``: seeded with the member's state, ppo2's
    ``np.random.shuffle(inds)`` draws SB3's first epoch. ppo2 then shuffles the same array again, so its later
    epochs are products of shuffles, where SB3 permutes ``arange`` afresh (a departure; see the port's
    ``shuffle`` switch)."""
    random = numpy_random(rec)
    inds = np.arange(ROLLOUT)
    orders = []
    for _ in range(SETTINGS["n_epochs"]):
        random.shuffle(inds)
        orders.append(inds.copy())
    sb3 = [np.concatenate(rec.minibatches[e * NMINIBATCHES:(e + 1) * NMINIBATCHES])
           for e in range(SETTINGS["n_epochs"])]
    assert np.array_equal(orders[0], sb3[0])
    assert not np.array_equal(orders[1], sb3[1]) and not np.array_equal(orders[2], sb3[2])


def test_one_iteration_of_the_member_equals_the_reference_port_with_pbxs_departures(
        rec: Recording, pbx: Comparison) -> None:
    """With every switch at pbx's choice the port's iteration is the member's: every check holds."""
    measured = {check: pbx.measure(check) for check in TOLERANCE}
    moved = max_difference(rec.before, rec.after)
    print(f"\nmember vs port, pbx's choices: {measured}; the update moved weights by up to {moved:.3g}")
    past = {check: value for check, value in measured.items() if value > TOLERANCE[check]}
    assert not past, f"past their tolerance {TOLERANCE}: {past}"
    # the checks of the rollout and the steps looked at what the port's update trained on (its rollout in float64:
    # the same but for the network's rounding)
    update, rollout = pbx.port_update, pbx.port_rollout
    assert all(np.array_equal(update.batch[key], rollout.batch[key]) for key in ("obs", "masks", "actions"))
    assert all(np.allclose(update.batch[key], rollout.batch[key], rtol=ROLLOUT_RTOL, atol=ROLLOUT_ATOL)
               for key in ("returns", "values", "neglogpacs"))
    assert all(np.array_equal(a, b) for a, b in zip(update.minibatches, rollout.minibatches, strict=True))


DEPARTURES = {
    "adam": ("adam", "final"),
    "advantage_ddof": ("gradients",),
    "grad_clip": ("gradients",),
    "max_pool": ("rollout", "final"),
    "shuffle": ("minibatches", "final"),
}
"""Each switch of :class:`~ppo2_port.Choices` and the checks that its reference choice must fail. The
advantages' std and the clip's epsilon are shown where they act, in each step's gradient: in float32 they
changed the weights after the iteration by less than rounding does through PPO's clipping (1.6e-3 and 5e-5); in
float64 they move them by 1.55e-3 and 5.2e-5, past ``final``'s tolerance too (the epsilon by 5x only)."""


def test_every_switch_of_the_port_is_listed() -> None:
    assert set(DEPARTURES) == {field.name for field in dataclasses.fields(Choices)}


@pytest.mark.parametrize("departure", sorted(DEPARTURES))
def test_each_departure_alone_breaks_the_equality(rec: Recording, departure: str) -> None:
    """Any one switch back at the reference's choice fails the checks it acts on: the departure is real."""
    choices = dataclasses.replace(PBX, **{departure: getattr(REFERENCE, departure)})
    assert choices != PBX
    comparison = Comparison(rec, choices, stop_past_tolerance=True)
    measured = {check: comparison.measure(check) for check in DEPARTURES[departure]}
    print(f"\n{departure} = {getattr(REFERENCE, departure)!r}: {measured}")
    within = {check: value for check, value in measured.items() if value <= TOLERANCE[check]}
    assert not within, f"within their tolerance {TOLERANCE}: {within}"
