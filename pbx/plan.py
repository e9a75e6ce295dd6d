"""The rounds' plan: how long each round is, where it ends, and which round is the last.

Most strategies keep one round length, ``t_ready``, for the whole run, and the plan
is fixed before anything trains (``max_budget / t_ready`` rounds, the last one
taking what is left). A strategy that restarts its population may change it:
IPBT doubles the step between exploits at each restart
(:meth:`pbx.strategies.Strategy.round_growth`). A round's length then depends on
the restarts decided before it, and those are in the history (its ``restart``
column, :mod:`pbx.history`), so the plan is a pure function of the run's settings
and its history: a resume, the MPI coordinator, a report and a replay rebuild it
alike, and it never needs storing.

A round has a *nominal* length (the strategy's, in env steps, cut to the budget
left) and a *trained* one (the nominal one as the member rounds it: PPO trains
whole rollouts, :meth:`pbx.members.Member.plan_chunk`). The run ends with the
round whose nominal end reaches ``max_budget``; each member trains to the sum of
the trained lengths (:meth:`pbx.config.RunConfig.steps_due`).

What fixes the rounds is data, read once from the run's settings into :class:`Rules`
(:meth:`pbx.config.RunConfig.rules`, :meth:`pbx.config.StoredRun.rules`): the
budget, ``t_ready``, the strategy's growth of a round per restart and its tail, the
members each round trains, and the chunk the member trains whole. Runners, sweeps,
reports, strategies (IPBT's restart test) and the start line all plan from it.

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
from typing import Sequence

TAILS = ("cut", "extend", "halves")
"""How a plan meets ``max_budget`` (:attr:`Rules.tail`)."""
MAX_ROUNDS = 100_000
"""The most rounds a run may plan (``max_budget / t_ready``). The plan is built a round at a time and every round
writes a history row per member, so a typo such as ``--t_ready 1 --max_budget 1e12`` would spend minutes and
gigabytes before the first round; pbx's experiments plan 50 rounds at most (the PBT and PB2 papers' runs, tens)."""


def whole_chunks(steps: int, chunk: int) -> int:
    """The whole number of ``chunk``s nearest ``steps``, at least one, in env steps: what a member that trains
    whole chunks (PPO: rollouts) trains when asked for ``steps``."""
    return max(1, round(steps / chunk)) * chunk


@dataclass(frozen=True)
class Rules:
    """What fixes a run's rounds, as data (the settings' part of the plan; the history adds its restarts)."""

    max_budget: int
    t_ready: int
    pop_size: int = 1
    first_size: int = 1
    """Members round 0 trains (:meth:`pbx.strategies.Strategy.initial_size`)."""
    restart_size: int = 1
    """Members a restart round trains (:meth:`pbx.strategies.Strategy.restart_size`)."""
    growth: float = 1.0
    """A round's nominal length is ``t_ready * growth ** restarts`` (:meth:`pbx.strategies.Strategy.round_growth`:
    IPBT's ``step_factor``)."""
    tail: str = "cut"
    """``cut``: the last round is cut to what is left; ``extend``: a round that would leave less than a round of
    its length (and not exactly none) takes all that is left; ``halves``: that round takes half of what is left
    (rounded down) and the next one the rest (:meth:`pbx.strategies.Strategy.last_rounds`)."""
    chunk: int | None = None
    """The env steps the member trains whole (PPO: a rollout of every env), by which it rounds a round's nominal
    length into its trained one; None: it trains what it is asked (or each member rounds to its own searched
    chunk, :meth:`pbx.members.Member.plan_chunk`)."""

    @property
    def fixed_rounds(self) -> int:
        """Rounds of ``t_ready`` that ``max_budget`` holds, the last one cut: the run's length as EXP3's rates are
        set from it (:attr:`pbx.strategies.RunContext.rounds`; a larger first round or a restart changes the
        real count, :meth:`Plan.rounds_estimate`)."""
        return -(-self.max_budget // self.t_ready)

    def nominal_length(self, restarts: int) -> int:
        """The nominal length of a round that begins after ``restarts`` restarts (the restart round's own
        included)."""
        return max(1, round(self.t_ready * self.growth**restarts))

    def trained(self, steps: int) -> int:
        """The env steps a member trains when a round asks for ``steps``."""
        return steps if self.chunk is None else whole_chunks(steps, self.chunk)

    def size(self, round_: int, restart: bool) -> int:
        """Members round ``round_`` trains (the history's rows of it), by its restart mark."""
        return self.first_size if round_ == 0 else self.restart_size if restart else self.pop_size

    def plan(self, restart_marks: Sequence[bool] = ()) -> Plan:
        """The plan of a round for each of ``restart_marks`` (the history's, oldest first)."""
        plan = Plan(self)
        for restart in restart_marks:
            plan.add(bool(restart))
        return plan

    def planned(self, restart_marks: Sequence[bool] = ()) -> Plan:
        """:meth:`plan` carried on to ``max_budget`` with rounds that do not restart: the whole run as far as the
        history knows it (exact for a run that never restarts, and for a finished one)."""
        plan = self.plan(restart_marks)
        while not plan.done:
            plan.add(False)
        return plan


@dataclass
class Plan:
    """The rounds planned so far: add one with :meth:`add` as its restart mark becomes known."""

    rules: Rules
    nominal_steps: list[int] = field(default_factory=list)
    """Each round's nominal length: the env steps it asks each member for (cut to the budget left)."""
    nominal_ends: list[int] = field(default_factory=list)
    """The budget spent at each round's end (a round of more members than the population costs more)."""
    trained_ends: list[int] = field(default_factory=list)
    """The env steps every member has trained, by plan, at each round's end."""
    restarts: list[int] = field(default_factory=list)
    """Restarts before and at each round (a restart round counts its own: it trains at the new length)."""
    _halved: list[bool] = field(default_factory=list, repr=False)
    """Whether each round the ``halves`` rule adjusted took half (IPBT's ``divided_step_by_two``)."""

    @property
    def max_budget(self) -> int:
        return self.rules.max_budget

    def add(self, restart: bool) -> None:
        """Plan the next round (``restart``: it begins a new generation); what it takes of the budget grows with
        the members it trains per member of the population."""
        if self.done:
            raise ValueError(f"the plan already reaches max_budget ({self.max_budget:,}) after "
                             f"{len(self.trained_ends)} rounds")
        cost = self.rules.size(len(self.trained_ends), restart) / self.rules.pop_size
        restarts = (self.restarts[-1] if self.restarts else 0) + int(restart)
        start = self.nominal_ends[-1] if self.nominal_ends else 0
        length, left = self.rules.nominal_length(restarts), self.max_budget - start
        if self.rules.tail != "cut" and left % length and start + 2 * length > self.max_budget:
            # the references' t_step = t_max - t_cur, or IPBT's (t_max - t_cur) // 2 the first time
            halved = self.rules.tail == "halves" and not any(self._halved)
            length = left // 2 if halved else left
            self._halved.append(halved)
        steps = min(length, math.ceil(left / cost))
        self.restarts.append(restarts)
        self.nominal_steps.append(steps)
        self.nominal_ends.append(start + math.ceil(steps * cost))
        self.trained_ends.append((self.trained_ends[-1] if self.trained_ends else 0) + self.rules.trained(steps))

    @property
    def done(self) -> bool:
        """Whether the rounds planned reach ``max_budget``: the last of them is the run's last."""
        return bool(self.nominal_ends) and self.nominal_ends[-1] >= self.max_budget

    @property
    def rounds(self) -> int:
        """Rounds planned so far."""
        return len(self.trained_ends)

    def trained_end(self, round_: int) -> int:
        """The env steps every member has trained, by plan, at the end of ``round_``."""
        return self.trained_ends[round_]

    def trained_steps(self, round_: int) -> int:
        """The env steps a member trains in ``round_`` by plan."""
        return self.trained_ends[round_] - (self.trained_ends[round_ - 1] if round_ else 0)

    def is_last(self, round_: int) -> bool:
        """Whether ``round_`` (planned) is the run's last."""
        return self.nominal_ends[round_] >= self.max_budget

    def member_steps(self) -> int:
        """Env steps the planned rounds train over all their members (a larger first or restart round's
        candidates included): a progress bar's total."""
        marks = [self.restarts[r] > (self.restarts[r - 1] if r else 0) for r in range(self.rounds)]
        return sum(self.rules.size(r, mark) * self.trained_steps(r) for r, mark in enumerate(marks))

    def rounds_estimate(self) -> int:
        """The run's rounds if every round from here on kept the last one's length (exact for a run that never
        restarts, and for a finished one)."""
        if not self.nominal_ends:
            length = self.rules.nominal_length(0)
            if self.rules.tail == "cut" or not self.max_budget % length:
                return math.ceil(self.max_budget / length)
            return max(self.max_budget // length, 1) + (self.rules.tail == "halves")
        left, length = self.max_budget - self.nominal_ends[-1], self.rules.nominal_length(self.restarts[-1])
        if self.rules.tail == "extend" and left > 0:
            return len(self.nominal_ends) + max(left // length, 1)
        if self.rules.tail == "halves" and left % length:
            return len(self.nominal_ends) + max(left // length, 1) + 1
        return len(self.nominal_ends) + math.ceil(left / length)
