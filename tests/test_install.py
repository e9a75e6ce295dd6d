"""A non-editable install (``pip install .``) runs from any folder: the package carries its search spaces."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY_BIGFISH = ["--env", "bigfish", "--batchsize", "2", "--t_ready", "64", "--max_budget", "64", "--device", "cpu",
                "-m", "n_envs=2", "n_steps=32", "batch_size=32", "n_epochs=1", "eval_episodes=1"]


def test_a_built_package_trains_toy_and_bigfish_from_another_folder(tmp_path: Path) -> None:
    # What the build reads, copied so pip's build files land in the copy, not in the working tree.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "pbx", source / "pbx", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    target = tmp_path / "site"
    # The dependencies are this environment's; what is tested is the package pip builds from the project.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    assert (target / "pbx" / "search_spaces" / "ppo_procgen.yaml").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=elsewhere, env=env, capture_output=True, text=True,
                              timeout=300)

    where = run("-c", "import pbx; print(pbx.__file__)")
    assert where.stdout.strip().startswith(str(target)), where.stdout
    for args in (["--env", "toy", "--max_budget", "40"], TINY_BIGFISH):
        proc = run("-m", "pbx.train", *args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1].startswith("done:")
    assert len(list((elsewhere / "runs").iterdir())) == 2
