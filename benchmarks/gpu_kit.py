"""Slim the GPU machines' kit (``.gpu/``) for the campaign's games, so a campaign's archive travels beside it.

What is sent to a GPU machine here is 64 MiB in all: the working tree (29.6 MB tracked at commit
2ff0af1), the kit that ``../shared/gpu/make-kit.sh`` builds (59.4 MB, of which the procgen wheel is
47.6 MB; this script slims it to 42.2 MB) and, to continue earlier runs, ``gpu_campaign.py``'s archive. Most of the wheel is background images, and ProcGen
loads every game's images when it starts, whichever game runs; the campaign's games (bigfish,
starpilot) draw none of the platform and top-down backgrounds (17 MB). This script rewrites the
kit's procgen wheel with each image of the background folders that the given games do not draw
replaced by a 1x1 PNG, and shows that they do not draw them: with the same images replaced in a copy
of this machine's procgen (the same version), 8 envs of each game stepped 400 times with seeded
random actions give the very same observations, byte for byte, as the whole package. A folder whose
replacement changes a frame stays as it is. The slim kit is for those games only: other games would
draw the 1x1 images.

    ../shared/gpu/make-kit.sh && .venv/bin/python benchmarks/gpu_kit.py
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

import procgen

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = ("platform_backgrounds", "platform_backgrounds_2", "topdown_backgrounds", "water_backgrounds",
              "space_backgrounds")
"""The background folders, the bulk of the wheel (23 of its 47.6 MB compressed)."""

FRAMES = """
import hashlib, sys
import numpy as np
from procgen import ProcgenGym3Env
digest = hashlib.sha256()
for game in sys.argv[1:]:
    env = ProcgenGym3Env(num=8, env_name=game, num_levels=0, start_level=0, distribution_mode="easy", rand_seed=1)
    rng = np.random.default_rng(0)
    for _ in range(400):
        env.act(rng.integers(0, 15, size=8).astype(np.int32))
        digest.update(env.observe()[1]["rgb"].tobytes())
print(digest.hexdigest())
"""
"""Hashes the games' observations under whichever procgen is first on the path."""


def tiny_png() -> bytes:
    """A 1x1 transparent RGBA PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 5)) + chunk(b"IEND", b""))


def frames(games: list[str], path: Path | None) -> str:
    """The games' observation hash with ``path`` (a folder holding a ``procgen`` package) first on the path."""
    env = {"PYTHONPATH": str(path)} if path is not None else {}
    out = subprocess.run([sys.executable, "-c", FRAMES, *games], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env})
    if out.returncode != 0:
        return f"failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}"
    return out.stdout.strip()


def undrawn(games: list[str], folders: tuple[str, ...]) -> list[str]:
    """The folders among ``folders`` whose images the games do not draw, shown on a copy of this procgen."""
    package = Path(procgen.__file__).parent
    reference = frames(games, None)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "procgen"
        shutil.copytree(package, copy)
        libs = package.parent / "procgen_mirror.libs"
        if libs.is_dir():
            shutil.copytree(libs, Path(tmp) / libs.name)

        def passes(chosen: list[str]) -> bool:
            for folder in CANDIDATES:
                shutil.rmtree(copy / "data" / "assets" / folder)
                shutil.copytree(package / "data" / "assets" / folder, copy / "data" / "assets" / folder)
            for folder in chosen:
                for image in (copy / "data" / "assets" / folder).glob("*.png"):
                    image.write_bytes(tiny_png())
            return frames(games, Path(tmp)) == reference

        if passes(list(folders)):
            return list(folders)
        single = [f for f in folders if passes([f])]
        return single if passes(single) else []


def slim(wheel: Path, folders: list[str]) -> None:
    """Rewrite ``wheel`` in place with each image of ``folders`` replaced by :func:`tiny_png`."""
    marks = tuple(f"procgen/data/assets/{folder}/" for folder in folders)
    slimmed = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            replaced = info.filename.startswith(marks) and info.filename.endswith(".png")
            target.writestr(info, tiny_png() if replaced else source.read(info))
    slimmed.replace(wheel)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", type=Path, default=ROOT / ".gpu", help="the kit folder (default .gpu)")
    parser.add_argument("--games", nargs="+", default=["bigfish", "starpilot"], help="the games the kit must run")
    args = parser.parse_args(argv)
    wheels = sorted(args.kit.glob("procgen*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"error: {args.kit} holds {len(wheels)} procgen wheels, not one: build the kit first "
                         f"(../shared/gpu/make-kit.sh)")
    version = importlib.metadata.version("procgen-mirror")
    if f"-{version}-" not in wheels[0].name:
        raise SystemExit(f"error: the kit's {wheels[0].name} is not this machine's procgen-mirror {version}, on which "
                         f"the games' frames are checked")
    before = sum(p.stat().st_size for p in args.kit.rglob("*") if p.is_file())
    folders = undrawn(args.games, CANDIDATES)
    print(f"{', '.join(args.games)} draw none of: {', '.join(folders) or '(no folder)'} "
          f"(their observations, 8 envs x 400 steps each, the same byte for byte with those images 1x1)")
    if folders:
        slim(wheels[0], folders)
    after = sum(p.stat().st_size for p in args.kit.rglob("*") if p.is_file())
    print(f"{args.kit}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB; the slim kit runs {', '.join(args.games)} only "
          f"(sha256 of the wheel {hashlib.sha256(wheels[0].read_bytes()).hexdigest()[:16]})")


if __name__ == "__main__":
    main()
