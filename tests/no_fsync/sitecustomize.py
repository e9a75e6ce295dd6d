"""Every Python process the tests start loads this (``tests/conftest.py`` puts its folder on ``PYTHONPATH``, and
``mpiexec`` passes it on to the ranks): ``os.fsync`` returns at once.

An fsync makes a written file survive a crash of the host, which no test can cause; what a test can check
(a kill -9 of the run loses no finished round, the order of a round's writes) does not depend on the data
reaching the disk. On this project's CI disk an fsync takes about 6 ms, and a run fsyncs about 11 times a round:
a 50-round toy run spent a quarter of its time in them. The calls still happen, so a test that spies on
``os.fsync`` sees every one, in order.
"""

import os


def _fsync(fd: int) -> None:
    """Stand-in for :func:`os.fsync` that leaves the data in the page cache."""


os.fsync = _fsync
