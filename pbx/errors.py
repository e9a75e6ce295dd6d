"""The one exception type that means "the user asked for something we cannot do".

Command lines catch it and print ``error: <message>`` with exit code 2, never a
traceback. Raise it at the boundary (flags, YAML, settings) with a message that
names the bad value and, where there is one, the fix.
"""


class UsageError(ValueError):
    """Bad user input: a flag, a config value, a search-space file or a run folder."""
