"""``python tests/mpi/fail_member.py MEMBER ROUND RUN COMMAND args...``: ``python -m pbx.COMMAND args`` (train or
sweep) whose toy member MEMBER raises in round ROUND of each run whose folder's path holds RUN ('' for any), as a
member with a bug would (the product has no hook for this; the script patches the class)."""

import importlib
import sys

from pbx.members.toys.toy import ToyMember

member, round_, run, command = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
train = ToyMember.train


def failing(self: ToyMember, steps: int) -> float:
    if self.context.index == member and self.steps >= round_ * steps and run in str(self.context.log_dir):
        raise RuntimeError(f"injected failure at {self.steps} steps")
    return train(self, steps)


ToyMember.train = failing  # type: ignore[method-assign]
sys.exit(importlib.import_module(f"pbx.{command}").main(sys.argv[5:]))
