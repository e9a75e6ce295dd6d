"""The rounds' plan: how long each round is, where it ends, and which round is the last.

Most strategies keep one round length, ``t_ready``, for the whole run, and the plan
is fixed before anything trains (``max_budget / t_ready`` rounds, the last one
taking what is left). A strategy that restarts its population may change it:
IPBT doubles the step between exploits at each restart
(:meth:`pbx.strategies.Strategy.round_length`). A round's length then depends on
the restarts decided before it, and those are in the history (its ``restart``
column, :mod:`pbx.history`), so the plan is a pure function of the run's settings
and its history: a resume, the MPI coordinator, a report and a replay rebuild it
alike, and it never needs storing.

A round has a *nominal* length (the strategy's, in env steps, cut to the budget
left) and a *trained* one (the nominal one as the member rounds it: PPO trains
whole rollouts, :meth:`pbx.members.Member.round_steps`). The run ends with the
round whose nominal end reaches ``max_budget``; each member trains to the sum of
the trained lengths (:meth:`pbx.config.RunConfig.steps_due`).

How the budget's end is met is the strategy's (:meth:`pbx.strategies.Strategy.last_rounds`, :data:`TAILS`):
``cut``, pbx's, ends with a round cut to what is left; ``extend``, the rule of the
BG-PBT authors' code (``AwesomeLemon/IPBT`` ``algo/base.py`` ``adjust_step_size``),
lengthens the round after which less than a full round would be left so that it
takes the rest; ``halves``, IPBT's there (``algo/ipbt.py`` ``adjust_step_size``),
splits what is left at that point into two rounds.

A round that trains more members than the population (a strategy's first round
or restart round with extra candidates) costs the budget in proportion: ``k``
times ``pop_size`` members for ``t`` steps advance the nominal end by ``k t``, as
the reference implementations of BG-PBT and IPBT count it, so a strategy with a
larger first population spends the compute of one that has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

TAILS = ("cut", "extend", "halves")
"""How a plan meets ``max_budget`` (:attr:`Plan.tail`)."""


@dataclass
class Plan:
    """The rounds planned so far: add one with :meth:`add` as its length becomes known."""

    max_budget: int
    length: Callable[[int], int]
    """The nominal length of a round that begins after ``restarts`` restarts (the strategy's rule)."""
    trained: Callable[[int], int]
    """The env steps a member really trains when a round asks for ``steps`` (the member's rounding)."""
    tail: str = "cut"
    """``cut``: the last round is cut to what is left; ``extend``: a round that would leave less than a round of
    its length (and not exactly none) takes all that is left; ``halves``: that round takes half of what is left
    (rounded down) and the next one the rest."""
    nominal_ends: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    """Restarts before and at each round (a restart round counts its own: it trains at the new length)."""
    _halved: list[bool] = field(default_factory=list, repr=False)
    """Whether each round the ``halves`` rule adjusted took half (IPBT's ``divided_step_by_two``)."""

    def add(self, restart: bool, cost: float = 1.0) -> None:
        """Plan the next round (``restart``: it begins a new generation; ``cost``: members it trains per member
        of the population, which multiplies what it takes of the budget)."""
        if self.done:
            raise ValueError(f"the plan already reaches max_budget ({self.max_budget:,}) after "
                             f"{len(self.ends)} rounds")
        restarts = (self.restarts[-1] if self.restarts else 0) + int(restart)
        start = self.nominal_ends[-1] if self.nominal_ends else 0
        length, left = self.length(restarts), self.max_budget - start
        if self.tail != "cut" and left % length and start + 2 * length > self.max_budget:
            # the references' t_step = t_max - t_cur, or IPBT's (t_max - t_cur) // 2 the first time
            halved = self.tail == "halves" and not any(self._halved)
            length = left // 2 if halved else left
            self._halved.append(halved)
        steps = min(length, math.ceil(left / cost))
        self.restarts.append(restarts)
        self.nominal_ends.append(start + math.ceil(steps * cost))
        self.ends.append((self.ends[-1] if self.ends else 0) + self.trained(steps))

    def extend(self, restart_marks: Sequence[bool], costs: Sequence[float] = ()) -> Plan:
        """Plan a round for each of ``restart_marks`` (the history's rounds, oldest first) at ``costs`` (default
        1 each); returns ``self``."""
        for restart, cost in zip(restart_marks, [*costs, *[1.0] * (len(restart_marks) - len(costs))]):
            self.add(bool(restart), cost)
        return self

    @property
    def done(self) -> bool:
        """Whether the rounds planned reach ``max_budget``: the last of them is the run's last."""
        return bool(self.nominal_ends) and self.nominal_ends[-1] >= self.max_budget

    def end(self, round_: int) -> int:
        """The env steps every member has trained, by plan, at the end of ``round_``."""
        return self.ends[round_]

    def trained_steps(self, round_: int) -> int:
        """The env steps a member trains in ``round_`` by plan."""
        return self.ends[round_] - (self.ends[round_ - 1] if round_ else 0)

    def is_last(self, round_: int) -> bool:
        """Whether ``round_`` (planned) is the run's last."""
        return self.nominal_ends[round_] >= self.max_budget

    def rounds_estimate(self) -> int:
        """The run's rounds if every round from here on kept the last one's length (exact for a run that never
        restarts, and for a finished one)."""
        if not self.nominal_ends:
            length = max(self.length(0), 1)
            if self.tail == "cut" or not self.max_budget % length:
                return math.ceil(self.max_budget / length)
            return max(self.max_budget // length, 1) + (self.tail == "halves")
        left, length = self.max_budget - self.nominal_ends[-1], max(self.length(self.restarts[-1]), 1)
        if self.tail == "extend" and left > 0:
            return len(self.nominal_ends) + max(left // length, 1)
        if self.tail == "halves" and left % length:
            return len(self.nominal_ends) + max(left // length, 1) + 1
        return len(self.nominal_ends) + math.ceil(left / length)
