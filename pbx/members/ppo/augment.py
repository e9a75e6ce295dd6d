"""DrAC's eight image augmentations as batched torch operations.

Raileanu et al. (2021), "Automatic Data Augmentation for Generalization in Deep
Reinforcement Learning" (DrAC), regularise PPO with augmented observations; the
PB2-Mix paper (Parker-Holder et al., 2021) tunes which augmentation on the fly.
Each function here takes a batch of channels-first images ``(batch, C, H, W)``
(uint8 or float, on any device), the largest pixel value ``high`` (255 for the
observations SB3 trains on), and a ``torch.Generator``, and returns a new batch
of the same shape, dtype and device. Every random parameter is drawn per image
from that generator, all images at once (no Python loop over the batch), so a
member that owns the generator owns its augmentation stream and a checkpoint of
the generator's state continues it bit for bit. The draws are made on the
generator's device and moved to the batch's: DrAC keeps its generator on the
CPU, whose state (unlike a CUDA generator's) a run resumed on either device
can load, and the parameters are a few numbers per image (random_conv's
kernels, 81 per image, are the most). Colour augmentations need RGB
(``C == 3``); rotation needs square images.

Where we differ from DrAC's code, and why:
- cutout / cutout_color: DrAC places the box at (12 + h, 24 + w) for a box of
  height h and width w, so boxes only ever cover one region of the frame; here
  the box's place is uniform over the frame (Cutout as DeVries and Taylor, 2017,
  define it). Box sides are DrAC's, 7 to 21 pixels.
- cutout_color: DrAC draws colours in [0, 1) at the start but in [0, 255) on later
  redraws (a scale mix-up); here always uniform over the pixel range.
- color_jitter: DrAC's factors (brightness, contrast, saturation in [0.6, 1.4], hue
  shift up to half a turn); the hue shift is a rotation of RGB about the grey axis
  (one 3x3 matrix per image) rather than a round trip through HSV, so the whole
  augmentation is a few batched matrix products.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from pbx.errors import UsageError

Augmentation = Callable[[torch.Tensor, float, torch.Generator], torch.Tensor]

CROP_PAD = 12
"""Pixels of edge padding before a random crop back to the input size (DrAC pads 64x64 frames by 12)."""
CUTOUT_SIDES = (7, 21)
"""Smallest and largest side of a cutout box, in pixels (DrAC's)."""
JITTER = 0.4
"""Brightness, contrast and saturation factors are drawn from [1 - JITTER, 1 + JITTER] (DrAC's)."""
HUE = 0.5
"""Hue shifts are drawn from [-HUE, HUE] turns (DrAC's)."""
LUMA = (0.299, 0.587, 0.114)
"""ITU-R 601 luma weights: grey = 0.299 R + 0.587 G + 0.114 B (DrAC's grayscale, through kornia)."""


def _rand(shape: tuple[int, ...], x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Uniform draws on [0, 1) from ``g`` on its own device, moved to the batch ``x``'s: the stream is the
    generator's whatever device trains."""
    return torch.rand(shape, generator=g, device=g.device).to(x.device)


def _uniform(x: torch.Tensor, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    """One number per image of ``x``, uniform on ``[low, high)``."""
    return low + (high - low) * _rand((x.shape[0],), x, g)


def _integers(x: torch.Tensor, low: int, high: int, g: torch.Generator) -> torch.Tensor:
    """One integer per image of ``x``, uniform on ``[low, high]`` (both ends included)."""
    return torch.randint(low, high + 1, (x.shape[0],), generator=g, device=g.device).to(x.device)


def _like(y: torch.Tensor, x: torch.Tensor, high: float) -> torch.Tensor:
    """``y`` (float, same pixel scale as ``x``) in ``x``'s dtype: integer images are rounded and clipped."""
    if x.dtype.is_floating_point:
        return y.to(x.dtype)
    return y.round().clamp(0, high).to(x.dtype)


def _grey(y: torch.Tensor) -> torch.Tensor:
    """(batch, 3, H, W) -> (batch, 1, H, W) luma."""
    weights = torch.tensor(LUMA, dtype=y.dtype, device=y.device).view(1, 3, 1, 1)
    return (y * weights).sum(dim=1, keepdim=True)


def _rgb(x: torch.Tensor, name: str) -> None:
    if x.shape[1] != 3:
        raise UsageError(f"augmentation {name} needs RGB images (3 channels), got {x.shape[1]} channels")


def _remap(x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """Output pixel p of image i is input pixel ``source[i, p]`` (flat indices, (batch, H * W)), all channels."""
    n, c, h, w = x.shape
    return x.flatten(2).gather(2, source[:, None, :].expand(n, c, h * w)).view(n, c, h, w)


def crop(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """Pad each edge by CROP_PAD pixels (repeating the edge, as DrAC's replication padding), crop back to H x W.

    Padding then cropping is the same as shifting the image and clamping the indices at
    its edge, which is what this does: no padded copy is made, and any dtype works.
    """
    n, _, h, w = x.shape
    dy = _integers(x, -CROP_PAD, CROP_PAD, g)
    dx = _integers(x, -CROP_PAD, CROP_PAD, g)
    rows = (dy[:, None] + torch.arange(h, device=x.device)).clamp(0, h - 1)  # (batch, H)
    cols = (dx[:, None] + torch.arange(w, device=x.device)).clamp(0, w - 1)  # (batch, W)
    return _remap(x, (rows[:, :, None] * w + cols[:, None, :]).flatten(1))


def random_conv(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """Each image through its own random 3x3 convolution, C -> C channels, zero padding, no bias.

    Weights are Xavier-normal as in DrAC (std sqrt(2 / (fan_in + fan_out))). The map is linear
    without bias, so it means the same on any pixel scale; float outputs are not clipped (as in
    DrAC), integer ones are clipped to the pixel range.
    """
    n, c, h, w = x.shape
    std = math.sqrt(2.0 / (2 * c * 9))
    kernels = std * torch.randn(n * c, c, 3, 3, generator=g, device=g.device).to(x.device)
    # one grouped convolution: image i's channels form group i
    y = F.conv2d(x.float().reshape(1, n * c, h, w), kernels, padding=1, groups=n).reshape(n, c, h, w)
    return _like(y, x, high)


def grayscale(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """Luma in all three channels (deterministic: the generator is not used)."""
    _rgb(x, "grayscale")
    return _like(_grey(x.float()).expand_as(x), x, high)


def flip(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """Upside down (DrAC's vertical flip), each image with probability 1/2."""
    upside_down = _rand((x.shape[0],), x, g) < 0.5
    return torch.where(upside_down[:, None, None, None], x.flip(2), x)


def rotate(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """Each image turned by 0, 90, 180 or 270 degrees, equally likely (as DrAC)."""
    n, _, h, w = x.shape
    if h != w:
        raise UsageError(f"augmentation rotate needs square images, got {h}x{w}")
    pixels = torch.arange(h * w, device=x.device).view(h, w)
    turned = torch.stack([torch.rot90(pixels, k).flatten() for k in range(4)])  # (4, H * W) source pixels
    return _remap(x, turned[_integers(x, 0, 3, g)])


def _boxes(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A (batch, 1, H, W) mask of one random box per image: sides in CUTOUT_SIDES, place uniform."""
    n, _, h, w = x.shape
    masks = []
    for size in (h, w):
        side = _integers(x, *CUTOUT_SIDES, g)
        start = (_rand((n,), x, g) * (size - side + 1)).floor()
        pixel = torch.arange(size, device=x.device)
        masks.append((pixel >= start[:, None]) & (pixel < (start + side)[:, None]))  # (batch, size)
    rows, cols = masks
    return (rows[:, :, None] & cols[:, None, :])[:, None]


def cutout(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """One black box per image."""
    return x.masked_fill(_boxes(x, g), 0)


def cutout_color(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """One box per image, filled with a colour drawn uniformly over the pixel range (one per image)."""
    box = _boxes(x, g)
    colour = high * _rand((x.shape[0], x.shape[1], 1, 1), x, g)
    return torch.where(box, _like(colour, x, high), x)


def color_jitter(x: torch.Tensor, high: float, g: torch.Generator) -> torch.Tensor:
    """Brightness, contrast, saturation and hue, each with its own random amount per image.

    On pixels scaled to [0, 1] and clipped back into it after each step: brightness scales
    the pixels; contrast pulls them towards (or pushes them from) the image's mean grey;
    saturation towards (or from) each pixel's grey; the hue turns each pixel about the grey
    axis of the RGB cube (Rodrigues' rotation, angle 2 pi * shift).
    """
    _rgb(x, "color_jitter")
    n = x.shape[0]
    y = x.float() / high
    brightness, contrast, saturation = (_uniform(x, 1 - JITTER, 1 + JITTER, g).view(n, 1, 1, 1) for _ in range(3))
    angle = 2 * math.pi * _uniform(x, -HUE, HUE, g)
    y = (y * brightness).clamp(0, 1)
    mean = _grey(y).mean(dim=(2, 3), keepdim=True)
    y = ((y - mean) * contrast + mean).clamp(0, 1)
    grey = _grey(y)
    y = ((y - grey) * saturation + grey).clamp(0, 1)
    axis = torch.full((3,), 1 / math.sqrt(3), device=y.device)
    cross = torch.tensor([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]], device=y.device) / math.sqrt(3)
    cos, sin = angle.cos().view(n, 1, 1), angle.sin().view(n, 1, 1)
    turn = cos * torch.eye(3, device=y.device) + sin * cross + (1 - cos) * torch.outer(axis, axis)  # (batch, 3, 3)
    y = torch.einsum("nij,njhw->nihw", turn, y).clamp(0, 1)
    return _like(y * high, x, high)


AUGMENTATIONS: dict[str, Augmentation] = {
    "crop": crop, "random_conv": random_conv, "grayscale": grayscale, "flip": flip, "rotate": rotate,
    "cutout": cutout, "cutout_color": cutout_color, "color_jitter": color_jitter,
}
"""The augmentations by the names search spaces and ``aug_type`` use (the PB2-Mix paper's eight)."""

