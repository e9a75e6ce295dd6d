"""The PPO member with real ProcGen and real SB3 at tiny budgets.

The hyperparameter tests look where SB3 *reads* each value (the optimizer's param
groups during an update, the clip range the loss used, the rollout buffer, the
reward normaliser), not at the attribute a careless apply would set.
"""

from __future__ import annotations

import copy
import math
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import gymnasium
import numpy as np
import pytest
import torch

from pbx.config import SEARCH_SPACES, resolve
from pbx.envs import EnvSettings, ProcgenSettings
from pbx.errors import UsageError
from pbx.members.base import Diverged, MemberContext
from pbx.members.ppo.ppo import PPOMember, PPOSettings
from pbx.members.sb3.process import LOCAL_RANKS_VARS, thread_budget
from pbx.plan import Rules
from pbx.space import Categorical, Continuous, Space

from conftest import tensorboard_tags

SPACES = SEARCH_SPACES
# 2 envs x 16 steps = 32-step rollouts in 2 minibatches: a rollout trains in well under a second.
TINY = {"n_envs": 2, "n_steps": 16, "batch_size": 16, "n_epochs": 2, "eval_episodes": 2}
ROLLOUT = TINY["n_envs"] * TINY["n_steps"]
PROCGEN_CONFIG = {"ent_coef": 0.01, "learning_rate": 5e-4, "clip_range": 0.2}
NEW_CONFIG = {"learning_rate": 2e-5, "clip_range": 0.1, "ent_coef": 0.05, "vf_coef": 0.7,
              "max_grad_norm": 0.9, "gamma": 0.95, "gae_lambda": 0.9, "n_epochs": 1, "batch_size": 8}
"""A config of new values for every hyperparameter the reference value loss (the ProcGen default) reads."""
SB3_NEW_CONFIG = {**NEW_CONFIG, "clip_range_vf": 0.3}
"""... and SB3's value loss, which has its own value clip range."""
CLASSIC_CONFIG = Space.load(SPACES / "ppo_classic.yaml").initial()


class ActionPaysEnv(gymnasium.Env):
    """Episodes of exactly ``length`` steps (endless with 0) paying the action taken (0 or 1) each step.

    A policy that always takes action 1 scores ``length`` per episode, one that takes 0 scores 0:
    two policies whose returns differ by construction, with episode ends known to the step.
    """

    metadata = {"render_modes": ["rgb_array"]}  # SB3's make_vec_env asks for rgb_array

    def __init__(self, length: int, image: bool = False, render_mode: str | None = None) -> None:
        self.length = length
        self.render_mode = render_mode
        self.action_space = gymnasium.spaces.Discrete(2)
        # an image channels last, as most gymnasium image envs give them
        self.observation_space = (gymnasium.spaces.Box(0, 255, (8, 8, 3), np.uint8) if image
                                  else gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32))
        self.obs = np.zeros(self.observation_space.shape, self.observation_space.dtype)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self.obs.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.obs.copy(), float(action), self.t == self.length, False, {}


EPISODE = 12
FIXED = "pbx-test/ActionPays-v0"
gymnasium.register(FIXED, entry_point=ActionPaysEnv, kwargs={"length": EPISODE})
ENDLESS_IMAGE = "pbx-test/EndlessImage-v0"  # no time limit: registered without max_episode_steps
gymnasium.register(ENDLESS_IMAGE, entry_point=ActionPaysEnv, kwargs={"length": 0, "image": True})


def make_member(seed: int = 0, env: str = "bigfish", config: dict[str, Any] | None = None,
                log_dir: Path | None = None, index: int | None = None, env_settings: EnvSettings | None = None,
                **settings: Any) -> PPOMember:
    context = MemberContext(env=env, index=seed if index is None else index, seed=seed, device="cpu",
                            log_dir=log_dir, env_settings=env_settings)
    return PPOMember(context, PPOSettings(**{**TINY, **settings}), dict(config or PROCGEN_CONFIG))


def always(member: PPOMember, action: int) -> PPOMember:
    """Make ``member``'s MLP policy take ``action`` (with probability 1 - e^-40): a policy known in advance."""
    with torch.no_grad():
        member.model.policy.action_net.bias.copy_(torch.tensor([20.0, -20.0] if action == 0 else [-20.0, 20.0]))
    return member


def weights(member: PPOMember) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in member.model.policy.state_dict().items()}


def assert_same_tensors(a: Any, b: Any) -> None:
    """Nested dicts / lists of tensors and arrays are equal bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_tensors(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_tensors(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert np.array_equal(a, b)


@pytest.fixture(scope="module")
def donor_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A member trained with lr 1e-3 (so its saved optimizer holds lr 1e-3)."""
    donor = make_member(seed=1, config={**PROCGEN_CONFIG, "learning_rate": 1e-3})
    donor.train(2 * ROLLOUT)
    path = tmp_path_factory.mktemp("donor") / "donor.pt"
    donor.save(path)
    return path


class BufferSpy:
    """Records the minibatches the rollout buffer hands to PPO's update."""

    def __init__(self, member: PPOMember) -> None:
        self.batches: list[Any] = []
        buffer = member.model.rollout_buffer
        self._get = buffer.get
        buffer.get = self  # type: ignore[method-assign]

    def __call__(self, batch_size: int | None = None) -> Iterator[Any]:
        for batch in self._get(batch_size):
            self.batches.append(batch)
            yield batch

    @property
    def sizes(self) -> list[int]:
        return [len(batch.actions) for batch in self.batches]


class LoggerSpy:
    """Records every value SB3's ``train()`` logs (its own record of the hyperparameters it used)."""

    def __init__(self, member: PPOMember) -> None:
        self.values: dict[str, Any] = {}
        logger = member.model.logger
        self._record = logger.record
        logger.record = self  # type: ignore[method-assign]

    def __call__(self, key: str, value: Any, exclude: Any = None) -> None:
        self.values[key] = value
        self._record(key, value, exclude)


def assert_trains_with(member: PPOMember, config: dict[str, Any]) -> None:
    """After one more rollout, every place SB3 reads a hyperparameter holds ``config``'s value."""
    model = member.model
    assert model.rollout_buffer.gamma == config["gamma"]
    assert model.rollout_buffer.gae_lambda == config["gae_lambda"]
    # the reward normaliser discounts with the agent's gamma unless normalize_gamma fixes its own
    normalize_gamma = member.settings.normalize_gamma
    assert member._norm.gamma == (config["gamma"] if normalize_gamma is None else normalize_gamma)
    # lr in the optimizer before the update (SB3 only resets it inside train())
    assert [g["lr"] for g in model.policy.optimizer.param_groups] == [config["learning_rate"]]
    spy, logged = BufferSpy(member), LoggerSpy(member)
    member.train(ROLLOUT)
    used = logged.values
    assert used["train/learning_rate"] == config["learning_rate"]
    assert used["train/clip_range"] == config["clip_range"]
    if member.settings.value_loss == "sb3":
        assert used["train/clip_range_vf"] == config["clip_range_vf"]
    else:  # SB3's value clipping is off: the reference loss clips with clip_range
        assert "train/clip_range_vf" not in used and model.clip_range_vf is None
    assert [g["lr"] for g in model.policy.optimizer.param_groups] == [config["learning_rate"]]
    assert spy.sizes == [config["batch_size"]] * (config["n_epochs"] * ROLLOUT // config["batch_size"])
    for name in ("ent_coef", "vf_coef", "max_grad_norm"):
        assert getattr(model, name) == config[name]
    assert member.config == config


@pytest.mark.parametrize("value_loss, new", [("reference", NEW_CONFIG), ("sb3", SB3_NEW_CONFIG)])
def test_apply_reaches_every_place_sb3_reads_a_hyperparameter(value_loss: str, new: dict[str, Any],
                                                             tmp_path: Path) -> None:
    threads = threading.active_count()
    member = make_member(log_dir=tmp_path / "tb", value_loss=value_loss)
    member.train(ROLLOUT)
    # No writer thread: a Ctrl-C could leave one asleep and closing it would then never return (pbx.tblog).
    assert threading.active_count() == threads
    member.apply(new)
    assert_trains_with(member, new)
    # SB3 writes its own losses to TensorBoard in the member's log folder
    assert {"train/value_loss", "train/entropy_loss", "train/approx_kl"} <= tensorboard_tags(tmp_path / "tb")


class StepReached(Exception):
    """Raised in place of an optimizer step of SB3's update, carrying the gradient that step would apply."""

    def __init__(self, gradient: torch.Tensor) -> None:
        super().__init__("optimizer step reached")
        self.gradient = gradient


def gradient_at_step(member: PPOMember, step: int) -> tuple[torch.Tensor, Any]:
    """Train until the ``step``-th optimizer step of the next update (1: the first) and stop there.

    Returns:
        The gradient that step would apply (after SB3's gradient clipping) as one vector, and the
        minibatch it came from; the policy is left as it was before that step.
    """
    params = list(member.model.policy.parameters())
    optimizer = member.model.policy.optimizer
    real, taken = optimizer.step, []

    def stop_at(*args: Any, **kwargs: Any) -> Any:
        taken.append(step)
        if len(taken) == step:
            raise StepReached(torch.cat([p.grad.flatten() for p in params]))
        return real(*args, **kwargs)

    spy = BufferSpy(member)
    optimizer.step = stop_at  # type: ignore[method-assign]
    with pytest.raises(StepReached) as stopped:
        member.train(ROLLOUT)
    del optimizer.step
    return stopped.value.gradient, spy.batches[step - 1]


def hand_loss(member: PPOMember, batch: Any, value_clip: float | None = None) -> torch.Tensor:
    """The reference PPO loss (baselines ppo2) on ``batch``, written out here apart from pbx's code.

    Policy: the clipped surrogate on advantages normalised over the minibatch; value:
    ``0.5 * max`` of the unclipped and clipped squared errors, clipped with ``value_clip`` (None:
    ``clip_range``, the reference's tie); total: policy - ent_coef * entropy + vf_coef * value.
    """
    model = member.model
    clip = model.clip_range(1.0)
    value_clip = clip if value_clip is None else value_clip
    values, log_prob, entropy = model.policy.evaluate_actions(batch.observations, batch.actions.long().flatten())
    values = values.flatten()
    advantages = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    ratio = torch.exp(log_prob - batch.old_log_prob)
    policy = -torch.min(advantages * ratio, advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    clipped = batch.old_values + (values - batch.old_values).clamp(-value_clip, value_clip)
    value = 0.5 * torch.max((values - batch.returns) ** 2, (clipped - batch.returns) ** 2).mean()
    return policy - model.ent_coef * entropy.mean() + model.vf_coef * value


def gradient(member: PPOMember, loss: torch.Tensor) -> torch.Tensor:
    params = list(member.model.policy.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).flatten() for p, g in zip(params, grads)])


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 rounding of sums taken in another order."""
    return bool((a - b).norm() <= 1e-4 * b.norm())


def test_the_update_takes_the_gradient_of_the_reference_loss_written_out_by_hand() -> None:
    """SB3's own update, first minibatch: the gradient it applies is autograd's of the loss above, and not
    that of SB3's value loss (mean squared error, twice the weight), which the sb3 setting keeps."""
    grads = {}
    for value_loss in ("reference", "sb3"):
        member = make_member(seed=10, value_loss=value_loss, max_grad_norm=1e9)  # 1e9: no gradient clipping
        grads[value_loss], batch = gradient_at_step(member, 1)
        hand = hand_loss(member, batch)
        # the first step: V = V_old, so the clipped error is the unclipped one, and SB3's value loss is
        # 2 * 0.5 * (V - R)^2: the value part of the reference's gradient, doubled
        value = 0.5 * ((batch.returns - member.model.policy.predict_values(batch.observations).flatten()) ** 2).mean()
        reference, doubled = gradient(member, hand), gradient(member, hand + member.model.vf_coef * value)
        assert close(grads[value_loss], reference if value_loss == "reference" else doubled)
        assert not close(reference, doubled)
    assert member.describe(member.settings) == "PPO (SB3 loss)"


def test_clip_range_set_by_apply_clips_the_value_in_the_reference_loss() -> None:
    """A step late in an update, where V has moved from V_old towards returns far from it (an env paying
    every step): the value is clipped with the clip_range apply set at run time, and the value-only clip
    range SB3 would use is not read."""
    member = make_member(seed=11, env=FIXED, config=CLASSIC_CONFIG)
    member.train(ROLLOUT)
    member.apply({"clip_range": 2e-3, "max_grad_norm": 1e9})
    applied, batch = gradient_at_step(member, 4)  # the second epoch's second minibatch
    with torch.no_grad():
        moved = (member.model.policy.predict_values(batch.observations).flatten() - batch.old_values).abs()
    assert bool((moved > 2e-3).any())  # the clip binds
    assert close(applied, gradient(member, hand_loss(member, batch)))
    assert not close(applied, gradient(member, hand_loss(member, batch, value_clip=0.2)))


def test_exploit_copies_the_donor_and_then_trains_with_the_new_config(donor_file: Path) -> None:
    donor = make_member(seed=9)
    donor.load(donor_file, own=True)  # a faithful copy of the saved donor, to compare against
    recipient = make_member(seed=2)
    recipient.train(ROLLOUT)
    recipient.load(donor_file, own=False)
    # the load restores the donor's config, lr 1e-3 included (the optimizer load brought it back)
    assert recipient.config["learning_rate"] == 1e-3
    recipient.apply(NEW_CONFIG)

    assert_same_tensors(recipient.model.policy.state_dict(), donor.model.policy.state_dict())
    # optimizer moments and step counts; the param groups' lr is the new config's
    assert_same_tensors(recipient.model.policy.optimizer.state_dict()["state"],
                        donor.model.policy.optimizer.state_dict()["state"])
    r_norm, d_norm = recipient._norm, donor._norm
    assert (r_norm.ret_rms.mean, r_norm.ret_rms.var, r_norm.ret_rms.count) == (
        d_norm.ret_rms.mean, d_norm.ret_rms.var, d_norm.ret_rms.count)
    assert recipient.steps == donor.steps == 2 * ROLLOUT
    assert_trains_with(recipient, NEW_CONFIG)


def test_exploit_keeps_the_recipients_own_envs_and_random_stream(donor_file: Path) -> None:
    """Copying the learner must not make the recipient replay the donor's next rollout."""
    donor = make_member(seed=1, index=5)  # the member that wrote donor_file, resumed under another index
    donor.load(donor_file, own=True)
    # the file's member index is the recipient's own (as after an MPI re-index): only the flag decides
    recipient = make_member(seed=2, index=1)
    recipient.train(ROLLOUT)
    own_returns = recipient._norm.returns.copy()
    recipient.load(donor_file, own=False)
    assert_same_tensors(weights(recipient), weights(donor))
    assert np.array_equal(recipient._norm.returns, own_returns)  # its own episodes in progress
    assert not np.array_equal(recipient.model._last_obs, donor.model._last_obs)
    donor.train(ROLLOUT)
    recipient.train(ROLLOUT)
    assert any(not torch.equal(a, b) for a, b in zip(weights(recipient).values(), weights(donor).values()))


@pytest.mark.parametrize("env, config", [("bigfish", PROCGEN_CONFIG), ("CartPole-v1", None)])
def test_save_load_train_equals_training_on(env: str, config: dict[str, Any] | None, tmp_path: Path) -> None:
    """A checkpoint continues bit for bit (weights and score), and evaluating changes nothing."""
    config = config or Space.load(SPACES / "ppo_classic.yaml").initial()
    original = make_member(seed=3, env=env, config=config)
    original.train(ROLLOUT)
    original.save(tmp_path / "m.pt")
    outer_rng = torch.get_rng_state()
    assert math.isfinite(original.evaluate(0))
    score = original.train(3 * ROLLOUT)
    # members swap their RNG states in and out: the caller's global RNG is untouched
    assert torch.equal(torch.get_rng_state(), outer_rng)

    resumed = make_member(seed=3, env=env, config=config)  # the same member, rebuilt as on --resume
    resumed.load(tmp_path / "m.pt", own=True)
    resumed_score = resumed.train(3 * ROLLOUT)
    assert_same_tensors(weights(resumed), weights(original))
    if env == "CartPole-v1":  # no bigfish episode fits in 3 tiny rollouts: there the weights decide alone
        assert math.isfinite(score) and resumed_score == score
    assert resumed.steps == original.steps == 4 * ROLLOUT


def test_a_resume_on_another_device_keeps_each_members_own_streams(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--resume -m device=...: a CPU checkpoint resumed on a GPU gets a CUDA stream of the member's own (the
    GPU is mocked: the seeding is recorded); a GPU checkpoint resumed on the CPU drops its CUDA stream and
    trains on, its CPU streams restored as they were saved."""
    import pbx.members.sb3.checkpoint as sb3_checkpoint

    member = make_member(seed=3, env="CartPole-v1", config=CLASSIC_CONFIG)
    member.train(ROLLOUT)
    member.save(tmp_path / "cpu.pt")
    monkeypatch.setattr(sb3_checkpoint, "seeded_cuda_state", lambda seed: seed)  # the seed stands for the state
    streams = []
    for seed in (3, 4):
        on_gpu = make_member(seed=seed, env="CartPole-v1", config=CLASSIC_CONFIG)
        on_gpu._cuda = True
        on_gpu.load(tmp_path / "cpu.pt", own=True)
        assert_same_tensors({k: v for k, v in on_gpu._rng.items() if k != "cuda"},
                            {k: v for k, v in member._rng.items() if k != "cuda"})
        streams.append(on_gpu._rng["cuda"])
    assert streams[0] != streams[1]
    monkeypatch.undo()

    edit_checkpoint(tmp_path / "cpu.pt", rng={**member._rng, "cuda": torch.zeros(16, dtype=torch.uint8)})
    on_cpu = make_member(seed=3, env="CartPole-v1", config=CLASSIC_CONFIG)
    on_cpu.load(tmp_path / "cpu.pt", own=True)
    assert on_cpu._rng["cuda"] is None
    on_cpu.train(ROLLOUT)
    member.train(ROLLOUT)
    assert_same_tensors(weights(on_cpu), weights(member))


def test_a_recipient_is_scored_only_on_episodes_started_after_the_copy(tmp_path: Path) -> None:
    """The recipient's envs are mid-episode at the copy: that episode mixes both policies and is left out."""
    donor = always(make_member(seed=11, env=FIXED, config=CLASSIC_CONFIG), action=1)
    assert donor.train(ROLLOUT) == EPISODE  # 16 steps per env: one whole episode, then 4 steps of the next
    donor.save(tmp_path / "donor.pt")
    recipient = always(make_member(seed=12, env=FIXED, config=CLASSIC_CONFIG), action=0)
    assert recipient.train(ROLLOUT) == 0.0  # and 4 steps, paid 0, into its next episode
    recipient.load(tmp_path / "donor.pt", own=False)
    # 32 steps per env: the episode in progress ends at step 8 (paid 4 x 0 + 8 x 1), then two whole ones
    assert recipient.train(2 * ROLLOUT) == EPISODE  # not the mean of 8, 12, 12 per env


def test_the_curve_within_a_round_has_a_point_after_each_rollout_in_which_an_episode_ended() -> None:
    """Rollouts of 8 steps per env (2 envs) and episodes of 12 steps paying 1 a step: episodes end at steps 12 and
    24 of each env, in the 2nd and 3rd rollouts; the 1st and 4th end none and take no point."""
    member = always(make_member(seed=5, env=FIXED, config=CLASSIC_CONFIG, n_steps=8), action=1)
    assert member.train(4 * 16) == EPISODE and member.curve() == [(32, 12.0), (48, 12.0)]
    # the next call: the episode in progress at its start (ends at step 36) is left out, as in the round's score;
    # the one from 37 ends at 48, in the call's 2nd rollout, at the member's step 64 + 2 x 16
    assert member.train(3 * 16) == EPISODE and member.curve() == [(96, 12.0)]


def test_a_round_without_a_whole_episode_says_why_its_score_is_nan() -> None:
    member = always(make_member(seed=5, env=FIXED, config=CLASSIC_CONFIG), action=1)
    assert member.train(ROLLOUT) == EPISODE  # every env starts fresh: steps 1-12 are a whole episode
    # steps 13-16 and 1-8 of this round finish each env's episode, and 9-16 start one that does not end
    assert math.isnan(member.train(ROLLOUT))
    assert member.score_note() == "no episode both started and ended in the round (2 in progress at its start left out)"


def test_evaluation_uses_the_rounds_seed_and_can_be_off(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_member(seed=3), make_member(seed=4)
    b.model.policy.load_state_dict(a.model.policy.state_dict())  # the same policy in two members
    assert a.evaluate(7) == b.evaluate(7)  # same round seed: same levels, same actions, same score
    off = make_member(seed=3, eval_episodes=0)
    import pbx.members.sb3.member as sb3

    monkeypatch.setattr(sb3, "make_env", lambda *a, **k: pytest.fail("evaluation is off: no env to build"))
    assert math.isnan(off.evaluate(7))


def test_non_finite_weights_test_nan_instead_of_raising() -> None:
    """A file written by a member that diverged outside a guarded update (or edited by hand) must not
    crash the round in evaluation: SB3's Categorical refuses NaN logits."""
    member = make_member(seed=3)
    poison(member.model.policy.parameters())
    assert math.isnan(member.evaluate(7))


def test_a_channels_last_image_env_trains_and_its_evaluation_cannot_hang() -> None:
    """A gymnasium image env: SB3 transposes it for the CNN, first observations included; with no
    time limit, evaluation stops at eval_max_steps and says so instead of looping for ever."""
    member = make_member(seed=4, env=ENDLESS_IMAGE, config=CLASSIC_CONFIG, eval_max_steps=50)
    assert member.model._last_obs.shape == (TINY["n_envs"], 3, 8, 8)
    assert math.isnan(member.train(ROLLOUT))
    with pytest.warns(UserWarning, match="evaluation stopped at eval_max_steps=50 vector steps with 0 of 2 test"):
        assert math.isnan(member.evaluate(0))


def poison(params: Iterator[torch.nn.Parameter]) -> None:
    with torch.no_grad():
        for param in params:
            param.fill_(float("nan"))  # as an exploding learning rate would leave them


@pytest.mark.parametrize("where", ["optimizer step", "after the last update"])
def test_a_diverging_update_raises_diverged_and_keeps_the_last_good_state(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN weights in mid-update make the next forward pass raise (SB3's Categorical); NaN weights
    left by the last update raise nothing and are caught by the finite check after learning."""
    member = make_member(seed=8, env="CartPole-v1", config=CLASSIC_CONFIG)
    member.train(ROLLOUT)
    good, good_optimizer = weights(member), copy.deepcopy(member.model.policy.optimizer.state_dict())
    model = member.model
    owner, name = (model.policy.optimizer, "step") if where == "optimizer step" else (model, "train")
    real = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: (real(*a, **k), poison(model.policy.parameters()))[0])
    with pytest.raises(Diverged):
        member.train(ROLLOUT)
    monkeypatch.undo()
    assert_same_tensors(weights(member), good)
    assert_same_tensors(member.model.policy.optimizer.state_dict(), good_optimizer)
    assert member.steps == member.model.num_timesteps == 2 * ROLLOUT  # the steps were spent
    member.save(tmp_path / "m.pt")
    member.load(tmp_path / "m.pt", own=True)
    assert member.steps == 2 * ROLLOUT
    assert math.isfinite(member.train(4 * ROLLOUT))


def test_an_error_that_is_no_divergence_still_raises() -> None:
    member = make_member(seed=8, env="CartPole-v1", config=CLASSIC_CONFIG)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug, with information in the message")

    member.model.policy.optimizer.step = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="a bug"):
        member.train(ROLLOUT)


def edit_checkpoint(path: Path, **changes: Any) -> None:
    """Rewrite a checkpoint with keys changed (None: removed)."""
    state = torch.load(path, weights_only=False)
    state.update(changes)
    torch.save({k: v for k, v in state.items() if v is not None}, path)


@pytest.mark.parametrize("damage, match", [
    (lambda p: p.unlink(), "missing checkpoint"),
    (lambda p: p.write_bytes(b""), "unreadable checkpoint \\(empty file\\)"),
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "unreadable checkpoint"),
    (lambda p: torch.save({"format": 99}, p), "not a pbx PPO checkpoint of format 1 \\(found 99\\)"),
    (lambda p: torch.save([1, 2], p), "not a pbx PPO checkpoint"),
    (lambda p: p.write_text("not a checkpoint"), "unreadable checkpoint"),
    (lambda p: edit_checkpoint(p, policy=None), "checkpoint lacks \\['policy'\\]"),
    (lambda p: edit_checkpoint(p, env="coinrun"), "trained on coinrun with 2 envs; this member runs bigfish with 2"),
    (lambda p: edit_checkpoint(p, n_envs=4), "trained on bigfish with 4 envs; this member runs bigfish with 2"),
    # written before value_loss existed, so with SB3's loss: a resume would silently change the loss
    (lambda p: edit_checkpoint(p, value_loss=None), "was trained with value_loss sb3, this run's settings say "
                                                    "reference: set value_loss: sb3 in the member section"),
])
def test_a_damaged_checkpoint_is_a_one_line_usage_error(damage: Any, match: str, tmp_path: Path) -> None:
    member = make_member(seed=2)
    path = tmp_path / "m.pt"
    member.save(path)
    damage(path)
    with pytest.raises(UsageError, match=match) as err:
        member.load(path, own=True)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_checkpoint_is_on_disk_when_save_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    member = make_member(seed=2, env="CartPole-v1", config=CLASSIC_CONFIG)
    synced: list[str] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd))[1])
    member.save(tmp_path / "m.pt")
    assert synced == [str(tmp_path / "m.pt.tmp"), str(tmp_path)]  # the data, then the folder after the rename
    assert [f.name for f in tmp_path.iterdir()] == ["m.pt"]


def test_deterministic_setting_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # monkeypatch restores all three afterwards
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    member = make_member(seed=2, deterministic=True)
    try:
        assert torch.are_deterministic_algorithms_enabled() and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        member.train(ROLLOUT)
        assert all(torch.isfinite(w).all() for w in weights(member).values())
    finally:
        torch.use_deterministic_algorithms(False)


def test_train_rounds_steps_to_whole_rollouts() -> None:
    member = make_member(seed=6)
    for asked, rollouts in [(ROLLOUT // 3, 1), (int(2.4 * ROLLOUT), 2), (int(1.6 * ROLLOUT), 2)]:
        before = member.steps
        member.train(asked)
        chunk = PPOMember.plan_chunk(member.settings, Space({"clip_range": Continuous(0.1, 0.3)}))
        planned = Rules(asked, asked, chunk=chunk).trained(asked)
        assert member.steps - before == planned == rollouts * ROLLOUT
    assert member.steps == 5 * ROLLOUT == member.model.num_timesteps


def test_train_and_test_envs_get_their_level_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import pbx.envs.families as families  # the family's builder picks the levels: spy on the env it builds

    calls: list[dict[str, Any]] = []
    real = families.ProcgenVecEnv

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(families, "ProcgenVecEnv", spy)
    member = make_member(seed=7, env_settings=ProcgenSettings(num_levels=50, start_level=1000, distribution_mode="hard"))
    member.evaluate(0)
    train, test = calls
    assert (train["num_levels"], train["start_level"], train["distribution_mode"]) == (50, 1000, "hard")
    assert (test["num_levels"], test["distribution_mode"]) == (0, "hard")


def test_cartpole_member_trains_and_scores() -> None:
    space = Space.load(SPACES / PPOMember.space_file("CartPole-v1"))
    settings = PPOSettings(n_envs=4, n_steps=64, batch_size=64, eval_episodes=3)
    PPOMember.validate(space, settings, "auto")
    member = PPOMember(MemberContext(env="CartPole-v1", index=0, seed=0), settings, space.initial())
    scores = [member.train(256) for _ in range(3)]
    assert all(math.isfinite(s) and s > 0 for s in scores)
    assert member.evaluate(0) > 0
    assert member.model.policy.__class__.__name__ == "ActorCriticPolicy"  # an MLP


def test_space_files_match_the_settings_defaults() -> None:
    assert PPOMember.space_file("bigfish") == "ppo_procgen.yaml"
    assert PPOMember.space_file("CartPole-v1") == "ppo_classic.yaml"
    procgen = Space.load(SPACES / "ppo_procgen.yaml")
    defaults = PPOSettings()
    assert procgen.initial() == {name: getattr(defaults, name) for name in procgen.names}
    for file in ("ppo_procgen.yaml", "ppo_classic.yaml"):
        PPOMember.validate(Space.load(SPACES / file), defaults, "cpu")


@pytest.mark.parametrize("space, match", [
    (Space({"learning_rate": Continuous(1e-5, 1e-3), "aug_coef": Continuous(0.0, 1.0)}), "'aug_coef'"),
    (Space({"n_envs": Categorical((8, 16))}), "'n_envs'"),
    (Space({"n_steps": Categorical((100, 200))}), "batch_size 2048 divides no rollout the search space allows"),
    (Space({"batch_size": Categorical((2048, 1000))}), "batch_size 1000 does not divide n_envs \\* n_steps = 16384"),
    (Space({"batch_size": Continuous(64.0, 2048.0)}), "batch_size is an integer"),
    (Space({"gamma": Continuous(0.9, 1.5)}), "gamma must be in \\(0, 1\\], got 1.5"),
    (Space({"clip_range_vf": Continuous(0.1, 0.3)}), "changing clip_range_vf has no effect with value_loss: "
                                                     "reference, which clips the value with clip_range"),
])
def test_bad_search_space_is_a_usage_error(space: Space, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        PPOMember.validate(space, PPOSettings(), "cpu")


def test_a_minibatch_that_does_not_divide_the_fixed_rollout_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="batch_size 100 does not divide n_envs \\* n_steps = 512"):
        PPOMember.validate(Space({"clip_range": Continuous(0.1, 0.3)}),
                           PPOSettings(n_envs=8, n_steps=64, batch_size=100), "cpu")


@pytest.mark.parametrize("settings, match", [
    ({"gamma": 0.0}, "gamma must be in \\(0, 1\\], got 0.0"),
    ({"eval_episodes": -1}, "eval_episodes must be an integer from 0 to 65,536 \\(0: no evaluation\\), got -1"),
    ({"value_loss": "baselines"}, "value_loss must be one of reference, sb3, got 'baselines'"),
    ({"clip_range_vf": 0.3}, "clip_range_vf=0.3 has no effect with value_loss: reference"),
    ({"clip_range_vf": None}, "clip_range_vf=None has no effect with value_loss: reference"),
])
def test_bad_settings_are_usage_errors(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        PPOSettings(**settings)


@pytest.mark.parametrize("env, overrides, loss, described", [
    ("bigfish", [], "reference", "PPO (reference loss)"),
    ("bigfish", ["value_loss=sb3", "clip_range_vf=0.3"], "sb3", "PPO (SB3 loss)"),
    ("CartPole-v1", [], "sb3", "PPO (SB3 loss)"),
    ("CartPole-v1", ["value_loss=reference"], "reference", "PPO (reference loss)"),
])
def test_the_value_loss_defaults_to_the_reference_on_procgen_and_to_sb3s_on_gymnasium_ids(
        env: str, overrides: list[str], loss: str, described: str) -> None:
    cfg = resolve([{"run": {"env": env, "search": "none"}}], overrides)
    assert cfg.member.value_loss == loss and cfg.to_dict()["member"]["value_loss"] == loss
    assert cfg.member_cls.describe(cfg.member) == described


def test_cuda_without_a_gpu_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    space = Space.load(SPACES / "ppo_procgen.yaml")
    with pytest.raises(UsageError, match="--device cuda but no CUDA GPU is available; use --device cpu or auto"):
        PPOMember.validate(space, PPOSettings(), "cuda")


@pytest.mark.parametrize("var", ["MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"])
def test_threads_are_shared_among_local_mpi_ranks(var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cores = len(os.sched_getaffinity(0))
    for name in LOCAL_RANKS_VARS:
        monkeypatch.delenv(name, raising=False)
    assert thread_budget() == cores
    monkeypatch.setenv(var, "2")
    assert thread_budget() == max(1, cores // 2)
    monkeypatch.setenv(var, str(4 * cores))
    assert thread_budget() == 1
