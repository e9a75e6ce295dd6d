"""DrAC: the augmentations on real bigfish frames, and the DrAC member with real SB3 PPO at tiny budgets.

The regulariser is tested where it acts: in the gradient SB3's own update takes, not
only in a loss value that could be computed and then dropped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Categorical as TorchCategorical

from pbx.config import SEARCH_SPACES
from pbx.errors import UsageError
from pbx.members.base import Diverged, MemberContext
from pbx.members.ppo.augment import AUGMENTATIONS, CROP_PAD, CUTOUT_SIDES
from pbx.members.ppo.drac import DrACMember, DrACSettings, drac_terms
from pbx.members.ppo.ppo import PPOMember, PPOSettings
from pbx.space import Categorical, Space

from test_ppo import (NEW_CONFIG, PROCGEN_CONFIG, ROLLOUT, TINY, LoggerSpy, assert_same_tensors, assert_trains_with,
                      close, edit_checkpoint, gradient, gradient_at_step, hand_loss, make_member, poison, weights)

DRAC_CONFIG = {**PROCGEN_CONFIG, "aug_type": "crop", "aug_coef": 0.1}
HIGH = 255.0


def make_drac(seed: int = 0, config: dict[str, Any] | None = None, index: int | None = None,
              **settings: Any) -> DrACMember:
    context = MemberContext(env="bigfish", index=seed if index is None else index, seed=seed, device="cpu")
    return DrACMember(context, DrACSettings(**{**TINY, **settings}), dict(config or DRAC_CONFIG))


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[DrACMember, Path]:
    """A DrAC member after a rollout with flip and lr 1e-3, and its checkpoint."""
    member = make_drac(seed=1, config={**DRAC_CONFIG, "learning_rate": 1e-3, "aug_type": "flip"})
    member.train(ROLLOUT)
    path = tmp_path_factory.mktemp("drac") / "donor.pt"
    member.save(path)
    return member, path


@pytest.fixture(scope="module")
def frames(trained: tuple[DrACMember, Path]) -> torch.Tensor:
    """32 bigfish frames as PPO's update gets them: (batch, 3, 64, 64) uint8."""
    model = trained[0].model
    return torch.as_tensor(model.rollout_buffer.observations.reshape(ROLLOUT, *model.observation_space.shape))


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
@pytest.mark.parametrize("name", list(AUGMENTATIONS))
def test_each_augmentation_keeps_shape_dtype_and_device_and_changes_the_batch(
        name: str, dtype: torch.dtype, frames: torch.Tensor) -> None:
    x = frames.to(dtype)
    before = x.clone()
    out = AUGMENTATIONS[name](x, HIGH, generator(0))
    assert (out.shape, out.dtype, out.device) == (x.shape, x.dtype, x.device)
    assert torch.equal(x, before)  # the input is left alone
    # flip, rotate and crop may leave an image as it is, but not all 32 with this seed
    assert not torch.equal(out, x)
    assert torch.equal(AUGMENTATIONS[name](x, HIGH, generator(0)), out)  # the generator decides everything
    if name != "grayscale":  # grayscale draws nothing
        assert not torch.equal(AUGMENTATIONS[name](x, HIGH, generator(1)), out)
    if name != "random_conv":  # DrAC's random convolution is not clipped to the pixel range
        assert 0 <= out.min() and out.max() <= HIGH


def test_augmentations_do_what_drac_does(frames: torch.Tensor) -> None:
    """Each output image is one of the transformations DrAC defines, with parameters in DrAC's ranges."""
    x = frames[:8].float()
    flipped = AUGMENTATIONS["flip"](x, HIGH, generator(0))
    upside_down = [torch.equal(o, i.flip(1)) for o, i in zip(flipped, x)]
    assert all(u or torch.equal(o, i) for u, o, i in zip(upside_down, flipped, x)) and 0 < sum(upside_down) < 8
    turned = AUGMENTATIONS["rotate"](x, HIGH, generator(0))
    turns = [[torch.equal(o, torch.rot90(i, k, dims=(1, 2))) for k in range(4)].index(True) for o, i in zip(turned, x)]
    assert len(set(turns)) > 1
    # crop: some window of the edge-padded image (nn.ReplicationPad2d(12) then a random 64x64 crop in DrAC)
    cropped = AUGMENTATIONS["crop"](x, HIGH, generator(0))
    padded = F.pad(x, [CROP_PAD] * 4, mode="replicate")
    windows = padded.unfold(2, 64, 1).unfold(3, 64, 1)  # (batch, 3, 25, 25, 64, 64)
    for o, w in zip(cropped, windows):
        assert (w == o[:, None, None]).all(dim=(0, 3, 4)).any()
    grey = AUGMENTATIONS["grayscale"](x, HIGH, generator(0))
    assert torch.equal(grey[:, 0], grey[:, 1]) and torch.equal(grey[:, 1], grey[:, 2])
    cut = AUGMENTATIONS["cutout"](x + 1, HIGH, generator(0))  # no black pixel outside the box
    for image in cut:
        rows, cols = (image == 0).all(dim=0).nonzero(as_tuple=True)
        height, width = int(rows.max() - rows.min()) + 1, int(cols.max() - cols.min()) + 1
        assert CUTOUT_SIDES[0] <= min(height, width) and max(height, width) <= CUTOUT_SIDES[1]
        assert len(rows) == height * width  # one whole box


def policy_outputs(member: DrACMember, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Action logits and values through SB3's public policy methods (not DrAC's hook)."""
    policy = member.model.policy
    return policy.get_distribution(obs).distribution.logits, policy.predict_values(obs)


def test_drac_terms_are_the_exact_kl_and_value_gap_zero_for_the_identity(frames: torch.Tensor) -> None:
    member = make_drac(seed=2)
    with torch.no_grad():  # a policy far from uniform, as after training (a fresh one's KLs are ~1e-7)
        member.model.policy.action_net.weight.mul_(100)
    logits, values = policy_outputs(member, frames)
    identity = drac_terms(logits, values, *policy_outputs(member, frames.clone()))
    assert [float(t.detach()) for t in identity] == [0.0, 0.0]
    aug_logits, aug_values = policy_outputs(member, AUGMENTATIONS["random_conv"](frames, HIGH, generator(0)))
    g_pi, g_v = drac_terms(logits, values, aug_logits, aug_values)
    expected_kl = torch.distributions.kl_divergence(TorchCategorical(logits=logits), TorchCategorical(logits=aug_logits))
    assert torch.allclose(g_pi, expected_kl.mean(), rtol=1e-3, atol=0)  # the same sum, in another order
    assert torch.allclose(g_v, 0.5 * ((values - aug_values) ** 2).mean())
    assert g_pi > 0 and g_v > 0
    (g_pi + g_v).backward()
    trunk = member.model.policy.features_extractor.stacks[0].conv.weight
    assert trunk.grad is not None and trunk.grad.abs().sum() > 0


def test_sb3s_update_takes_the_gradient_of_ppos_loss_plus_aug_coef_times_the_drac_term(
        trained: tuple[DrACMember, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """SB3's first step of an update against autograd of the reference PPO loss + aug_coef (G_pi + G_V), both
    written out here, on the same minibatch and the same augmented copy: a term with its sign flipped, left
    out of the backward, added twice or without its coefficient cannot pass."""
    _, path = trained
    member = make_drac(seed=1)
    member.load(path, own=True)
    member.apply({"aug_type": "color_jitter", "aug_coef": 0.5, "max_grad_norm": 1e9})  # 1e9: no clipping
    augmented: list[torch.Tensor] = []
    real = AUGMENTATIONS["color_jitter"]
    monkeypatch.setitem(AUGMENTATIONS, "color_jitter", lambda *args: augmented.append(real(*args)) or augmented[-1])
    applied, batch = gradient_at_step(member, 1)
    logits, values = policy_outputs(member, batch.observations)
    aug_logits, aug_values = policy_outputs(member, augmented[0])
    p = torch.softmax(logits.detach(), dim=-1)
    g_pi = (p * (torch.log(p) - torch.log_softmax(aug_logits, dim=-1))).sum(dim=-1).mean()
    g_v = 0.5 * ((values.detach() - aug_values) ** 2).mean()
    ppo = hand_loss(member, batch)
    with_drac, without = gradient(member, ppo + 0.5 * (g_pi + g_v)), gradient(member, ppo)
    assert close(applied, with_drac)
    assert not close(without, with_drac)  # the term moves the gradient: a sign flip lands far away


def test_aug_coef_zero_trains_bit_for_bit_as_plain_ppo() -> None:
    """DrAC's hooks leave SB3's update, and its random streams, exactly as they are."""
    drac = make_drac(seed=3, config={**DRAC_CONFIG, "aug_coef": 0.0})
    plain = make_member(seed=3)
    drac.train(ROLLOUT)  # no bigfish episode ends in 16 steps: the weights tell
    plain.train(ROLLOUT)
    assert_same_tensors(weights(drac), weights(plain))
    # the hooks are gone after the update
    assert "evaluate_actions" not in vars(drac.model.policy) and not drac.model.policy.action_net._forward_hooks


class AugmentationSpy:
    """Records which augmentations the update calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name, real in list(AUGMENTATIONS.items()):
            monkeypatch.setitem(AUGMENTATIONS, name, self._spy(name, real))

    def _spy(self, name: str, real: Any) -> Any:
        def call(*args: Any) -> torch.Tensor:
            self.calls.append(name)
            return real(*args)
        return call


def assert_trains_with_augmentation(member: DrACMember, config: dict[str, Any],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """PPO's hyperparameters where SB3 reads them (test_ppo's check), and DrAC's where the update reads them."""
    augmentations, logged = AugmentationSpy(monkeypatch), LoggerSpy(member)
    assert_trains_with(member, config)
    minibatches = config["n_epochs"] * ROLLOUT // config["batch_size"]
    assert augmentations.calls == [config["aug_type"]] * minibatches
    assert logged.values["train/aug_coef"] == config["aug_coef"]
    assert logged.values["train/drac_policy_loss"] > 0 and logged.values["train/drac_value_loss"] > 0


def test_apply_reaches_every_hyperparameter_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    member = make_drac(seed=4)
    member.train(ROLLOUT)
    assert member.config == DRAC_CONFIG
    new = {**NEW_CONFIG, "aug_type": "rotate", "aug_coef": 0.3}
    member.apply(new)
    assert_trains_with_augmentation(member, new, monkeypatch)


def test_exploit_copies_the_donors_config_keeps_the_own_augmentation_stream_then_applies(
        trained: tuple[DrACMember, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, path = trained
    recipient = make_drac(seed=5)
    own_stream = recipient.model.augment_rng.get_state()
    recipient.load(path, own=False)
    assert recipient.config["aug_type"] == "flip" and recipient.config["learning_rate"] == 1e-3
    assert recipient.model.aug_type == "flip"
    assert torch.equal(recipient.model.augment_rng.get_state(), own_stream)
    new = {**NEW_CONFIG, "aug_type": "cutout_color", "aug_coef": 0.2}
    recipient.apply(new)
    assert_trains_with_augmentation(recipient, new, monkeypatch)


def test_save_load_train_equals_training_on(tmp_path: Path) -> None:
    """The checkpoint holds the augmentation stream too: a resume draws the same augmentations."""
    config = {**DRAC_CONFIG, "aug_type": "cutout_color", "aug_coef": 0.5}
    original = make_drac(seed=6, config=config)
    original.train(ROLLOUT)
    original.save(tmp_path / "m.pt")
    original.train(ROLLOUT)  # no bigfish episode ends in 16 steps: the weights tell

    resumed = make_drac(seed=6, config=config)
    resumed.load(tmp_path / "m.pt", own=True)
    resumed.train(ROLLOUT)
    assert_same_tensors(weights(resumed), weights(original))
    assert torch.equal(resumed.model.augment_rng.get_state(), original.model.augment_rng.get_state())
    # without the stream the augmentations (and so the weights) would differ: members' streams differ
    assert not torch.equal(make_drac(seed=7).model.augment_rng.get_state(), original.model.augment_rng.get_state())


@pytest.mark.parametrize("name", list(AUGMENTATIONS))
def test_augmentations_draw_from_a_cpu_generator_for_a_batch_on_another_device(name: str) -> None:
    """DrAC's generator lives on the CPU whatever the training device, so its state resumes anywhere; the
    draws move to the batch's device. A batch on torch's meta device (shapes only, like a GPU's tensors
    not the CPU's) fails on any draw left on the CPU."""
    x = torch.zeros(4, 3, 64, 64, device="meta")
    out = AUGMENTATIONS[name](x, HIGH, generator(0))
    assert (out.shape, out.device) == (x.shape, x.device)


def test_a_checkpoint_holding_a_cuda_generators_augmentation_stream_is_refused_in_one_line(tmp_path: Path) -> None:
    """Written by a pbx that drew augmentations on the GPU (a CUDA generator's state: seed and Philox offset,
    16 bytes): no CPU generator can continue it, and set_state would raise deep inside torch."""
    member = make_drac(seed=10)
    path = tmp_path / "m.pt"
    member.save(path)
    edit_checkpoint(path, augment_rng=torch.zeros(16, dtype=torch.uint8))
    with pytest.raises(UsageError, match="its augmentation stream is not a CPU generator's \\(16 bytes, not 5056\\)") as err:
        make_drac(seed=10).load(path, own=True)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    make_drac(seed=11).load(path, own=False)  # an exploit keeps its own stream and never reads it


def test_a_diverging_update_raises_diverged_and_the_member_trains_on(monkeypatch: pytest.MonkeyPatch) -> None:
    member = make_drac(seed=8)
    good = weights(member)
    model = member.model
    real = model.policy.optimizer.step
    monkeypatch.setattr(model.policy.optimizer, "step", lambda *a, **k: (real(*a, **k), poison(model.policy.parameters()))[0])
    with pytest.raises(Diverged):
        member.train(ROLLOUT)
    monkeypatch.undo()
    assert_same_tensors(weights(member), good)
    assert "evaluate_actions" not in vars(model.policy) and not model.policy.action_net._forward_hooks
    member.train(ROLLOUT)
    assert all(torch.isfinite(w).all() for w in weights(member).values())


def test_the_mix_space_matches_the_settings_defaults() -> None:
    assert DrACMember.space_file("bigfish") == "ppo_procgen_mix.yaml"
    space = Space.load(SEARCH_SPACES / "ppo_procgen_mix.yaml")
    assert space.params["aug_type"] == Categorical(tuple(AUGMENTATIONS), default="crop")
    defaults = DrACSettings()
    assert space.initial() == {name: getattr(defaults, name) for name in space.names}
    DrACMember.validate(space, defaults, "cpu")
    with pytest.raises(UsageError, match="'aug_coef'"):  # plain PPO still refuses it
        PPOMember.validate(space, PPOSettings(), "cpu")


@pytest.mark.parametrize("bad, match", [
    (lambda: DrACMember.check_env("CartPole-v1"), "needs image observations: use a ProcGen game as --env, not "
                                                  "'CartPole-v1'"),
    (lambda: DrACSettings(aug_type="blur"), "aug_type must be one of crop, random_conv, grayscale, flip, rotate, "
                                            "cutout, cutout_color, color_jitter, got 'blur'"),
    (lambda: DrACSettings(aug_coef=-0.1), "aug_coef must be a number >= 0, got -0.1"),
    (lambda: DrACMember.validate(Space({"aug_type": Categorical(("crop", "blur"))}), DrACSettings(), "cpu"),
     "search space: aug_type must be one of"),
    (lambda: make_drac(seed=9).apply({"aug_coef": math.nan}), "aug_coef must be a number >= 0, got nan"),
])
def test_bad_input_is_a_one_line_usage_error(bad: Any, match: str) -> None:
    with pytest.raises(UsageError, match=match) as err:
        bad()
    assert "\n" not in str(err.value)
