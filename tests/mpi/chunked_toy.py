"""``python tests/mpi/chunked_toy.py COMMAND args...``: ``python -m pbx.COMMAND args`` (train or replay) with
``--env toy-chunked``, the toy trained in whole chunks of 3 to 7 steps whose length h0 sets (3 + round(4 h0)), as
PPO trains whole rollouts whose length a search changes: with the toy's t_ready of 4 most chunks outlast a
round, so members begin rounds at or past their planned end and skip them (pbx.config.RunConfig.steps_due). In
microseconds a step, under a plain interpreter or ``mpiexec`` alike (the product has no such member; the script
registers it, as a user's own member is registered)."""

import importlib
import sys

from pbx.members import register
from pbx.members.base import MemberSettings
from pbx.members.toys.toy import ToyMember
from pbx.space import Config


class ChunkedToy(ToyMember):
    """The toy, trained in whole chunks of its own length, the nearest number to the steps asked and at least one."""

    @classmethod
    def steps_trained(cls, settings: MemberSettings, config: Config, steps: int) -> int:
        chunk = 3 + round(4 * float(config["h0"]))
        return max(1, round(steps / chunk)) * chunk

    def train(self, steps: int) -> float:
        return super().train(self.steps_trained(self.settings, self.config, steps))


register(ChunkedToy, "toy-chunked")
sys.exit(importlib.import_module(f"pbx.{sys.argv[1]}").main(sys.argv[2:]))
