"""Videos of a policy's episodes with the return written in (``python -m pbx.evaluate --video``).

A frame is the env's own picture: a gymnasium env's render (``render_mode=
"rgb_array"``), or a ProcGen game's observation (64x64, exactly what the agent
sees), scaled up by a whole factor (nearest neighbour) so the text fits. Each
frame carries the episode's return so far; its last one, held for
:data:`HOLD_S`, the final return.

``.mp4`` (H.264) goes through imageio-ffmpeg's ``write_frames`` and its bundled
ffmpeg. procgen's gym3 pins imageio-ffmpeg to 0.3.0, which imageio's own ffmpeg
plugin no longer drives (it passes arguments 0.3.0 lacks), and whose import
needs ``pkg_resources``, gone from setuptools 81 on: :func:`imageio_ffmpeg`
lends it a stand-in for the import alone. ``.gif`` goes through Pillow.
"""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
import itertools
import sys
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import gymnasium
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from pbx.console import format_score
from pbx.errors import UsageError

if TYPE_CHECKING:  # hints only: SB3 imported before pbx.envs would let gym's banner through
    from stable_baselines3.common.vec_env import VecEnv

FORMATS = (".mp4", ".gif")
SIDE = 256
"""Small frames are scaled up by the largest whole factor that keeps their long side within this (ProcGen: 4x)."""
MAX_SIDE = 480
"""Larger renders are kept at every k-th pixel, the least k that brings their long side within this: the frames
of the recorded episodes stay in memory until the video is written."""
HOLD_S = 1.0
"""Seconds the last frame of an episode, with its final return, stays on screen."""
DEFAULT_FPS = 15
"""Frames per second when the env does not say (gymnasium's ``metadata["render_fps"]``)."""
MACRO_BLOCK = 16
"""H.264 encodes 16x16 blocks (and yuv420p needs even sizes): frames are padded to multiples of it, as ffmpeg
would otherwise rescale them."""


def check_path(path: Path) -> None:
    """Raise :class:`UsageError` unless ``path`` names a video format this module writes."""
    if path.suffix.lower() not in FORMATS:
        raise UsageError(f"--video {path}: the file must end in {' or '.join(FORMATS)}")
    if not path.parent.is_dir():
        raise UsageError(f"--video {path}: no such folder {path.parent}")


@dataclass
class Clip:
    """One recorded episode: its frames, each with the return so far."""

    frames: list[tuple[np.ndarray, float]] = field(default_factory=list)
    final: float | None = None
    """The episode's return once it ended (None: still running, or cut off)."""


class Recorder:
    """Records the first episode of envs ``0 .. episodes - 1`` of a :func:`pbx.rollout.play` (a
    :class:`~pbx.rollout.Watcher`); with one env per episode, the first ``episodes`` episodes."""

    def __init__(self, episodes: int) -> None:
        self.clips = [Clip() for _ in range(episodes)]
        self.fps = DEFAULT_FPS

    def start(self, env: VecEnv, obs: np.ndarray) -> None:
        if env.num_envs < len(self.clips):
            raise UsageError(f"cannot record {len(self.clips)} episodes from {env.num_envs} envs")
        self.fps = int((env.metadata or {}).get("render_fps") or DEFAULT_FPS)
        for i, clip in enumerate(self.clips):
            clip.frames.append((_frame(env, obs, i), 0.0))

    def step(self, env: VecEnv, obs: np.ndarray, rewards: np.ndarray, dones: np.ndarray,
             infos: list[dict[str, Any]]) -> None:
        for i, clip in enumerate(self.clips):
            if clip.final is not None:
                continue
            ret = clip.frames[-1][1] + float(rewards[i])
            if dones[i]:
                # obs[i] already shows the next episode
                clip.final = float(infos[i]["episode"]["r"])
            else:
                clip.frames.append((_frame(env, obs, i), ret))

    def write(self, path: Path) -> tuple[int, tuple[int, int]]:
        """Write the clips one after another to ``path`` (``.mp4`` or ``.gif``); returns the number of frames
        shown and the (width, height) of a frame."""
        hold = max(1, round(HOLD_S * self.fps))
        repeats = [hold if k == len(clip.frames) - 1 else 1 for clip in self.clips for k in range(len(clip.frames))]
        shots = self._shots(ImageFont.load_default(size=14))
        first = next(shots)
        if path.suffix.lower() == ".gif":
            # a held frame is one GIF frame shown longer
            first.save(path, save_all=True, append_images=shots, loop=0,
                       duration=[round(1000 * n / self.fps) for n in repeats])
        else:
            _write_mp4(path, itertools.chain([first], shots), repeats, first.size, self.fps)
        return sum(repeats), first.size

    def _shots(self, font: Any) -> Iterator[Image.Image]:
        """The video's distinct frames, made one at a time (a held frame once)."""
        for number, clip in enumerate(self.clips, start=1):
            for k, (frame, ret) in enumerate(clip.frames):
                text = f"episode {number}  return {format_score(ret)}"
                if k == len(clip.frames) - 1:
                    text = (f"episode {number}  final return {format_score(clip.final)}" if clip.final is not None
                            else f"episode {number}  cut off at step {k}: return {format_score(ret)}")
                yield _compose(frame, text, font)


def _frame(env: VecEnv, obs: np.ndarray, i: int) -> np.ndarray:
    """Env ``i``'s picture as (H, W, 3) uint8: its render, or its image observation (ProcGen)."""
    if getattr(env, "render_mode", None) == "rgb_array":
        try:
            frame = np.asarray(env.env_method("render", indices=[i])[0])
        except gymnasium.error.DependencyNotInstalled as err:
            raise UsageError(f"cannot record the video: {err}") from None
    else:
        frame = obs[i]
        if frame.ndim == 3 and frame.shape[0] in (1, 3):
            frame = frame.transpose(1, 2, 0)  # (C, H, W) -> (H, W, C)
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise UsageError(f"cannot record the video: the env gives no RGB frames (got {frame.dtype} {frame.shape})")
    step = -(-max(frame.shape[:2]) // MAX_SIDE)
    return np.ascontiguousarray(frame[::step, ::step])


def _compose(frame: np.ndarray, text: str, font: Any) -> Image.Image:
    """``frame`` scaled up, padded to whole macro blocks, with ``text`` in white on black at the top left."""
    height, width = frame.shape[:2]
    scale = max(1, SIDE // max(height, width))
    image = Image.fromarray(frame).resize((width * scale, height * scale), Image.Resampling.NEAREST)
    padded = tuple(-(-n // MACRO_BLOCK) * MACRO_BLOCK for n in image.size)
    canvas = Image.new("RGB", padded)
    canvas.paste(image)
    draw = ImageDraw.Draw(canvas)
    left, top, right, bottom = draw.textbbox((4, 3), text, font=font)
    draw.rectangle((left - 3, top - 2, right + 3, bottom + 2), fill=(0, 0, 0))
    draw.text((4, 3), text, fill=(255, 255, 255), font=font)
    return canvas


def _write_mp4(path: Path, shots: Iterable[Image.Image], repeats: Sequence[int], size: tuple[int, int],
               fps: int) -> None:
    writer = imageio_ffmpeg().write_frames(str(path), size, fps=fps, macro_block_size=MACRO_BLOCK,
                                           ffmpeg_log_level="error")
    writer.send(None)  # starts ffmpeg
    try:
        for image, repeat in zip(shots, repeats):
            data = image.tobytes()
            for _ in range(repeat):
                writer.send(data)
    finally:
        writer.close()


def imageio_ffmpeg() -> types.ModuleType:
    """The ``imageio_ffmpeg`` module. Version 0.3.0 (gym3's pin) imports ``pkg_resources`` for one function,
    ``resource_filename`` (to find its bundled ffmpeg); where setuptools no longer has it, a stand-in serves
    the import and is taken away after it."""
    stand_in = None
    if "imageio_ffmpeg" not in sys.modules and importlib.util.find_spec("pkg_resources") is None:
        stand_in = types.ModuleType("pkg_resources")
        stand_in.resource_filename = (  # type: ignore[attr-defined]
            lambda package, name: str(importlib.resources.files(package) / name))
        sys.modules["pkg_resources"] = stand_in
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # setuptools' own pkg_resources warns that it is deprecated
            return importlib.import_module("imageio_ffmpeg")
    finally:
        if stand_in is not None:
            del sys.modules["pkg_resources"]
