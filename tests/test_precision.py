"""``precision`` and ``channels_last``: the image network's arithmetic and memory format as PPO settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pbx.errors import UsageError
from pbx.members.base import MemberContext
from pbx.members.ppo.impala import ImpalaCNN
from pbx.members.ppo.ppo import PPOMember
from pbx.members.ppo.settings import PPOSettings

SMALL = {"n_envs": 4, "n_steps": 16, "batch_size": 32, "eval_episodes": 0}
CONFIG = {"learning_rate": 5e-4, "ent_coef": 0.01, "clip_range": 0.2}


def member(**settings: object) -> PPOMember:
    return PPOMember(MemberContext(env="bigfish", index=0, seed=3, device="cpu"),
                     PPOSettings(**(SMALL | settings)), dict(CONFIG))  # type: ignore[arg-type]


def test_bf16_channels_last_trains_in_its_format_and_resumes_exactly(tmp_path: Path) -> None:
    m = member(precision="bf16", channels_last=True)
    extractor = m.model.policy.features_extractor
    assert isinstance(extractor, ImpalaCNN) and extractor.bf16 and extractor.channels_last
    conv = extractor.stacks[0].conv.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    # the optimizer holds the very parameters the network computes with (the format was changed in place)
    held = {id(p) for group in m.model.policy.optimizer.param_groups for p in group["params"]}
    assert id(conv) in held
    before = {k: v.clone() for k, v in m.model.policy.state_dict().items()}
    m.train(64)
    after = m.model.policy.state_dict()
    assert all(torch.isfinite(v).all() for v in after.values())
    assert not torch.equal(before["features_extractor.stacks.0.conv.weight"], after["features_extractor.stacks.0.conv.weight"])
    # bf16 autocast: the features are float32 but not what float32 arithmetic gives
    frames = torch.randint(0, 256, (8, 3, 64, 64), dtype=torch.uint8).float() / 255
    with torch.no_grad():
        features = extractor(frames)
        plain = extractor._features(frames.contiguous(memory_format=torch.channels_last))
    assert features.dtype == torch.float32 and not torch.equal(features, plain)
    torch.testing.assert_close(features, plain, atol=0.1, rtol=0.1)
    m.save(tmp_path / "m.pt")
    resumed = member(precision="bf16", channels_last=True)
    resumed.load(tmp_path / "m.pt", own=True)
    assert resumed.model.policy.features_extractor.stacks[0].conv.weight.is_contiguous(memory_format=torch.channels_last)
    m.train(64), resumed.train(64)
    for key, value in m.model.policy.state_dict().items():
        assert torch.equal(value, resumed.model.policy.state_dict()[key]), key


def test_the_default_builds_the_network_it_always_built() -> None:
    settings = PPOSettings(**SMALL)
    assert settings.precision == "torch" and settings.channels_last is False and settings.image_network() == {}
    m = member()
    assert "features_extractor_kwargs" not in m.model.policy_kwargs
    extractor = m.model.policy.features_extractor
    assert not extractor.bf16 and not extractor.channels_last
    assert extractor.stacks[0].conv.weight.is_contiguous()


@pytest.mark.parametrize("asked, named", [({"precision": "bf16"}, "precision=bf16"),
                                          ({"precision": "tf32"}, "precision=tf32"),
                                          ({"channels_last": True}, "channels_last=true")])
def test_deterministic_refuses_more_than_fp32(asked: dict[str, object], named: str) -> None:
    with pytest.raises(UsageError, match=f"deterministic=true trains in fp32.*{named}"):
        PPOSettings(deterministic=True, **asked)  # type: ignore[arg-type]
    PPOSettings(deterministic=True, precision="fp32")


def test_deterministic_switches_tf32_off_and_precision_sets_both_switches() -> None:
    from pbx.members.sb3.process import set_precision
    try:
        set_precision("tf32")
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
        member(deterministic=True, precision="fp32")
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.use_deterministic_algorithms(False)
        set_precision("torch")
    assert torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32


def test_a_bad_precision_and_an_mlp_with_image_settings_are_one_line(tmp_path: Path) -> None:
    for args, message in ((["--env", "bigfish", "-m", "precision=fp16"], "precision must be one of torch, fp32, tf32, bf16, got 'fp16'"),
                          (["--env", "CartPole-v1", "-m", "channels_last=true"], "a setting of the image policy")):
        out = subprocess.run([sys.executable, "-m", "pbx.train", *args, "--run-dir", str(tmp_path / "run")],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 2, out.stderr
        assert message in out.stderr and "Traceback" not in out.stderr
