"""A toy run as the benchmarks need it: resolved like ``python -m pbx.train --env toy``, round lines muted."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from pbx.config import resolve
from pbx.history import History
from pbx.run_dir import RunDir
from pbx.runners.sync import SyncRunner


def run_toy(folder: Path, search: str, pop_size: int = 4, seed: int = 0,
            strategy: dict[str, object] | None = None, env: str = "toy") -> History:
    """The ``env`` toy's default budget (toy: 200 steps per member, t_ready 4, the PBT paper's figure;
    toy-cat: 100) in ``folder``; returns the history.

    ``strategy`` overrides strategy settings (e.g. PB2's ``pending``, ``cat_exp``)."""
    cfg = resolve([{"run": {"env": env, "search": search, "pop_size": pop_size, "seed": seed},
                    "strategy": strategy or {}}])
    run_dir = RunDir(folder)
    run_dir.create()
    run_dir.begin()
    with contextlib.redirect_stdout(io.StringIO()):  # the run's round lines; a benchmark prints a table
        return SyncRunner(cfg, run_dir).run()
