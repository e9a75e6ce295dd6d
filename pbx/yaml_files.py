"""Reading the YAML files users write (search spaces, experiment configs, run configs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pbx.errors import UsageError


def read_yaml(path: str | Path, what: str) -> Any:
    """Parse ``path``; a missing file or bad YAML is a one-line :class:`UsageError` naming the ``what``."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{what} not found: {path}")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
