"""``python tests/mpi/fail_member.py MEMBER ROUND pbx.train-args...``: pbx.train whose toy member MEMBER raises
in round ROUND, as a member with a bug would (the product has no hook for this; the test patches the class)."""

import sys

from pbx.members.toy import ToyMember
from pbx.train import main

member, round_ = int(sys.argv[1]), int(sys.argv[2])
train = ToyMember.train


def failing(self: ToyMember, steps: int) -> float:
    if self.context.index == member and self.steps >= round_ * steps:
        raise RuntimeError(f"injected failure at {self.steps} steps")
    return train(self, steps)


ToyMember.train = failing  # type: ignore[method-assign]
sys.exit(main(sys.argv[3:]))
