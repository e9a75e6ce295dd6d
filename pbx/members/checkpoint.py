"""A member's checkpoint file: one ``torch.save`` of its state, read back with one clear error for any damage."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from pbx.errors import UsageError

CHECKPOINT_FORMAT = 1
"""Bumped when a checkpoint's meaning changes; keys added since (``obs_norm``) are read with defaults."""


def read_checkpoint(path: Path, keys: tuple[str, ...], algo: str = "ppo") -> dict[str, Any]:
    """A checkpoint's state of an ``algo`` member (an ``--algo`` name); anything unreadable, or a checkpoint of
    another algorithm, is one :class:`UsageError` naming the file and the way out."""
    fix = "the run folder is damaged: restore the file, or start a new run"
    if not path.is_file():
        raise UsageError(f"{path}: missing checkpoint; {fix}")
    try:
        # Checkpoints hold NumPy arrays and RNG tuples, so they are full pickles: load only
        # files pbx wrote (the run folder's own checkpoints).
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (EOFError, RuntimeError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile,
            AttributeError, ImportError, IndexError, KeyError, TypeError) as err:
        reason = "empty file" if path.stat().st_size == 0 else f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
        raise UsageError(f"{path}: unreadable checkpoint ({reason}); {fix}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise UsageError(f"{path}: not a pbx {algo.upper()} checkpoint of format {CHECKPOINT_FORMAT} (found {found!r}); "
                         f"{fix}")
    trained = state.get("algo", "ppo")  # written before other agents existed: PPO's
    if trained != algo:
        raise UsageError(f"{path}: a checkpoint of --algo {trained}, not {algo}; {fix}")
    missing = [key for key in keys if key not in state]
    if missing:
        raise UsageError(f"{path}: checkpoint lacks {missing}; {fix}")
    return state
