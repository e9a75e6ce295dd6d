"""Write docs/cli.md, the command-line reference, from the commands' own ``--help``.

    python docs/make_cli.py          # after changing a flag; tests/test_docs.py fails until cli.md matches

The page is generated rather than written so it cannot drift from the parsers:
each command's help text is argparse's, formatted at a fixed width.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

COMMANDS = {
    "train": "train a population, resume one, or run the fixed baseline",
    "sweep": "every variant of an experiment file for each seed, into one sweep folder",
    "report": "plots and tables of one run, several runs, or a sweep (rliable statistics)",
    "replay": "train a fresh agent with a member's discovered schedule",
    "evaluate": "score a member's checkpoint on test or training levels, and record a video",
    "export": "a member's checkpoint as Stable-Baselines3 files (model.zip, vecnormalize.pkl) to use outside pbx",
}
WIDTH = "100"
PAGE = Path(__file__).resolve().parent / "cli.md"


def reference() -> str:
    """The page's text."""
    os.environ["COLUMNS"] = WIDTH  # argparse wraps help at the terminal's width
    parts = ["# Command-line reference\n",
             "Generated from each command's `--help` by `python docs/make_cli.py`. Every command prints one\n"
             "`error:` line and exits with code 2 on bad input. Settings of a run that have no flag of their own\n"
             "are reached with `-m key=value` (see [concepts](concepts.md) and `config.yaml` in a run folder).\n"]
    parts += [f"- [`python -m pbx.{name}`](#python--m-pbx{name}): {what}" for name, what in COMMANDS.items()]
    for name in COMMANDS:
        text = importlib.import_module(f"pbx.{name}").build_parser().format_help()
        parts.append(f"\n## python -m pbx.{name}\n\n```text\n{text.rstrip()}\n```")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    PAGE.write_text(reference())
    print(f"wrote {PAGE}")
