"""``benchmarks/gpu_kit.py`` rewrites a wheel with only the named folders' images made 1x1, and the 1x1 image is a
PNG that decodes."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

import imageio.v3 as iio

from conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_kit", ROOT / "benchmarks" / "gpu_kit.py")
kit = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
sys.modules["gpu_kit"] = kit
spec.loader.exec_module(kit)  # type: ignore[union-attr]


def test_the_tiny_image_decodes_to_one_transparent_pixel() -> None:
    image = iio.imread(kit.tiny_png(), extension=".png")
    assert image.shape == (1, 1, 4) and image[0, 0, 3] == 0


def test_slim_replaces_the_named_folders_images_and_nothing_else(tmp_path: Path) -> None:
    wheel = tmp_path / "procgen_mirror-0.10.7-cp312-cp312-x.whl"
    files = {"procgen/data/assets/platform_backgrounds/a.png": b"A" * 5000,
             "procgen/data/assets/platform_backgrounds/notes.txt": b"kept",
             "procgen/data/assets/water_backgrounds/b.png": b"B" * 5000,
             "procgen/data/assets/platform_backgrounds_2/c.png": b"C" * 5000,
             "procgen/__init__.py": b"x = 1\n"}
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    kit.slim(wheel, ["platform_backgrounds"])
    with zipfile.ZipFile(wheel) as z:
        got = {name: z.read(name) for name in z.namelist()}
    assert got.keys() == files.keys()
    assert got["procgen/data/assets/platform_backgrounds/a.png"] == kit.tiny_png()
    for name in files:
        if name != "procgen/data/assets/platform_backgrounds/a.png":
            assert got[name] == files[name], name
