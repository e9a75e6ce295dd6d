"""The IMPALA CNN (Espeholt et al., 2018) as an SB3 features extractor and policy.

The ProcGen paper (Cobbe et al., 2020) trains PPO with it: three stacks of
(conv 3x3, max-pool 3x3 stride 2, two residual blocks) with 16, 32, 32
channels, then ReLU and a 256-unit fully connected layer. It generalises to
unseen levels far better than the Nature CNN that is SB3's default.

Two settings change how the network computes, not what it is (``precision`` and
``channels_last`` of :class:`~pbx.members.ppo.settings.PPOSettings`, for rollout
inference and the update alike): bf16 autocast for the convolutions and the fully
connected layer, and the channels-last memory format, in which cuDNN's convolutions
for this network run 1.47x faster on an H200 (``docs/gpu.md``). The features leave
the network in float32 either way, so the heads, the losses and the optimizer keep
their arithmetic.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces

import pbx.envs  # noqa: F401  # isort: skip -- before SB3: it silences the gym banner SB3's import prints
from stable_baselines3.common.policies import ActorCriticCnnPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

CHANNELS = (16, 32, 32)
FEATURES = 256


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """conv 3x3 -> max-pool 3x3 stride 2 (halves H and W) -> two residual blocks."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.res0 = ResidualBlock(out_channels)
        self.res1 = ResidualBlock(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res1(self.res0(self.pool(self.conv(x))))


class ImpalaCNN(BaseFeaturesExtractor):
    """Channels-first images (already scaled to [0, 1] by SB3) -> 256 float32 features.

    Args:
        precision: ``bf16`` runs the network under bf16 autocast; any other value (``torch``, ``fp32``,
            ``tf32``: process-wide switches, :func:`pbx.members.sb3.process.set_precision`) leaves it in float32.
        channels_last: weights and inputs in the channels-last memory format.
    """

    def __init__(self, observation_space: spaces.Box, features_dim: int = FEATURES, precision: str = "torch",
                 channels_last: bool = False) -> None:
        super().__init__(observation_space, features_dim)
        self.bf16 = precision == "bf16"
        self.channels_last = channels_last
        channels, height, width = observation_space.shape
        stacks = []
        for out in CHANNELS:
            stacks.append(ConvSequence(channels, out))
            channels = out
            height, width = (height + 1) // 2, (width + 1) // 2
        self.stacks = nn.Sequential(*stacks)
        self.fc = nn.Linear(channels * height * width, features_dim)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            observations = observations.contiguous(memory_format=torch.channels_last)
        if not self.bf16:
            return self._features(observations)
        with torch.autocast(observations.device.type, dtype=torch.bfloat16):
            return self._features(observations).float()

    def _features(self, observations: torch.Tensor) -> torch.Tensor:
        # (batch, 3, 64, 64) -> (batch, 32, 8, 8) -> (batch, 2048) -> (batch, 256)
        x = torch.flatten(self.stacks(observations), start_dim=1)
        return torch.relu(self.fc(torch.relu(x)))


class ImpalaPolicy(ActorCriticCnnPolicy):
    """SB3's actor-critic on the IMPALA CNN, initialised as the reference implementations do.

    The policy and value heads are single linear layers on the 256 shared features (the
    paper's network) with SB3's orthogonal init (gains 0.01 and 1). SB3 would also draw every
    trunk layer orthogonally with gain sqrt(2); through six unnormalised residual blocks that
    inflates the features (mean magnitude ~10 on bigfish), and with value clipping at 0.2 the
    value head then takes hundreds of updates to come back to the normalised returns. The
    trunk gets PyTorch's default init instead, like CleanRL's ProcGen PPO; OpenAI's (TensorFlow)
    drew Glorot-uniform weights with zero biases, a departure listed in ``docs/algorithms.md``.
    """

    def __init__(self, observation_space: spaces.Box, action_space: spaces.Space, lr_schedule: Any,
                 **kwargs: Any) -> None:
        kwargs.setdefault("net_arch", [])
        super().__init__(observation_space, action_space, lr_schedule, features_extractor_class=ImpalaCNN, **kwargs)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        for module in self.features_extractor.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                module.reset_parameters()
        extractor = self.features_extractor
        if isinstance(extractor, ImpalaCNN) and extractor.channels_last:
            # after the init, whose orthogonal draws need the default format; the parameters stay the objects
            # the optimizer already holds (their data is replaced)
            extractor.stacks.to(memory_format=torch.channels_last)
