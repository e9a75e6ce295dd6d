"""Bad user input: the one exception type for it, and the argument parser that reports it in one line.

Command lines catch it and print ``error: <message>`` with exit code 2, never a
traceback. Raise it at the boundary (flags, YAML, settings) with a message that
names the bad value and, where there is one, the fix.
"""

import argparse
from typing import NoReturn


class UsageError(ValueError):
    """Bad user input: a flag, a config value, a search-space file or a run folder."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one ``error:`` line and exit code 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        # The usage block argparse prints first is noise next to the actual problem.
        self.exit(2, f"error: {message} (see --help)\n")

    def add_member_option(self) -> None:
        """``--member M``, for commands that pick one member of a finished run
        (:func:`pbx.standings.member_row`)."""
        self.add_argument("--member", default="best", metavar="M",
                          help="member id, or best: the best member (train score) of the last finished round "
                               "(default), or kept: the best of that member and each generation's best, kept at "
                               "the restart that ended it (BG-PBT, IPBT)")


def command_parser(prog: str, description: str, doc: str) -> ArgumentParser:
    """The parser of ``python -m pbx.X``; its help ends with the examples that open the module's docstring ``doc``
    (its second paragraph), so the two cannot disagree."""
    return ArgumentParser(prog=prog, description=description, epilog=f"examples:\n{doc.split(chr(10) * 2)[1]}",
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def either(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``: the choices a refusal or a flag's help names."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
