"""FIRE PBT: faster improvement rate PBT (Dalibard & Jaderberg, 2021, arXiv:2109.13800).

PBT copies whoever scores best now, so it favours configs that pay off at once
(a learning rate that drops fast) over configs that pay off later. FIRE splits
the population into sub-populations P1, P2, ... and evaluators:

- P1 runs PBT on the score: its members are the run's results.
- A member of P2 (P3, ...) is judged by what its weights are worth to the
  sub-population below: an *evaluator* copies its weights, trains them with the
  config of the best member of P1 (the *child*), and its curve is compared with
  the child's where the two reached the same score. A member's fitness is the
  sum of its evaluator's best-score differences against its sub-population's
  other evaluated members; P2 runs PBT on that fitness, so it drifts towards
  configs whose weights improve fastest, not towards those that score best now.
- An evaluator whose curve beats the child's (a best-score difference above
  zero and a one-sided binomial test of its points against the child's below
  ``p_value``) hands its weights to the child, which keeps its config. An
  evaluator that has not shown this after ``max_eval_rounds`` rounds (before
  that, one whose test falls behind a relaxed threshold), or whose child or parent
  is replaced, stops, and takes the P2 member that has waited longest for an
  evaluation.

Facts from the method and from PBT-Zoo's ``algo/firepbt.py`` (Chebykin et al.,
TMLR 2025); defaults are PBT-Zoo's, which its toy and RL configs share: two
sub-populations of equal size, 6 evaluators for 22 members, an evaluation of at
least 3 intervals, p = 0.01, and a curve that starts anew at every exploit. A curve
is the scores the member took within its rounds (:mod:`pbx.curves`: the toys'
after every step, PBT-Zoo's grain; PPO's after every rollout in which an episode
ended), so an evaluation of 3 rounds compares tens of points, not 3. Where
pbx departs: a round whose member reported no points within it (a member type that
takes none; a run kept before curves were) adds its round score as one point;
curves are smoothed by a Gaussian kernel over ``smoothing`` points (0, the
default, compares them raw, as PBT-Zoo's near-interpolating GP does); ``max_eval_rounds`` is a limit:
an evaluation whose test passes while its best score is not above the child's stops there, where PBT-Zoo's
goes on for as long as the test passes (which a curve point for point above a child with one higher spike
does for good, holding its evaluator and its P2 member); curves that never meet compare as
PBT-Zoo's do, the higher one shifted down onto the other
(:meth:`~pbx.strategies.fire.curves.CurveComparison._shifted_diff`); NaN scores
are left out of curves; a member of P2 (P3, ...) whose own score is NaN has no fitness, is
replaced and is not evaluated (the NaN policy of every strategy, :mod:`pbx.strategies.selection`); a member
just replaced in P2 is not evaluated in the same round, nor chosen as a child; and an
evaluator with no member to evaluate copies the best member of P1
until one is free. As in PBT-Zoo, the child of an evaluation of a member of P3 (P4, ...) is the best member of
the sub-population below by fitness, the number that sub-population is selected on. Explore is PBT's
(:mod:`pbx.strategies.pbt`).

Everything FIRE knows is in the history and its curves (a pure ``decide``): the roles say who
is who, an evaluator's row where it copied a member of P2 (P3, ...) starts an evaluation, and
the child is the member of the sub-population below whose config the evaluator took.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, NamedTuple

import numpy as np

from pbx.errors import UsageError
from pbx.history import EVALUATOR_ROLE, RESULT_ROLE, History
from pbx.space import Space
from pbx.strategies.base import Decision
from pbx.strategies.fire.curves import CurveComparison, Evaluation, Rounds, overlap
from pbx.strategies.pbt import PBT, PBTSettings

EVALUATOR_SHARE = 6 / 22
"""PBT-Zoo's evaluators per member (6 of 22): the default evaluator count, rounded, at least 2."""


@dataclass
class FIRESettings(PBTSettings):
    sub_pops: list[int] | None = None
    """Sizes of the sub-populations P1, P2, ... (P1's members are the results). None: the members that are not
    evaluators in two halves, P1 taking the odd one (PBT-Zoo's 8 and 8)."""
    evaluators: int | None = None
    """Evaluator members, at least 2 and at most the members of P2, P3, ... None: 6/22 of the population
    (PBT-Zoo's 6 of 22), at least 2."""
    max_eval_rounds: int = 3
    """The most rounds an evaluation trains (PBT-Zoo's ``max_eval_steps``: 3 intervals): an evaluator that has
    not won after this many stops, whatever its test says. Before that it stops early when its test's p-value
    is above ``p_value`` plus a threshold relaxed in proportion to the rounds left."""
    p_value: float = 0.01
    """An evaluator wins when the binomial test of its curve against the child's is below this (PBT-Zoo's
    ``p_stat``) and its best score is above the child's."""
    smoothing: float = 0.0
    """Width, in curve points, of the Gaussian kernel curves are smoothed with before they are matched by score
    (0: raw scores)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sub_pops is not None and not (isinstance(self.sub_pops, list) and all(
                isinstance(n, int) and not isinstance(n, bool) for n in self.sub_pops)):
            raise UsageError(f"sub_pops must be a list of sub-population sizes such as [4, 4], got {self.sub_pops!r}")
        if self.max_eval_rounds < 1:
            raise UsageError(f"max_eval_rounds must be at least 1 round, got {self.max_eval_rounds}")
        if not 0 < self.p_value < 1:
            raise UsageError(f"p_value must be in (0, 1), got {self.p_value}")
        if not self.smoothing >= 0:
            raise UsageError(f"smoothing must be >= 0 curve points (0: none), got {self.smoothing}")


class Ended(NamedTuple):
    """Why an evaluator takes a new task (nothing before its first), and the numbers behind it."""

    why: str = ""
    info: dict[str, float] = {}


class FIRE(PBT[FIRESettings]):
    """P1: PBT on the score; P2, ...: PBT on the evaluators' fitness; evaluators hand better weights to P1."""

    name = "FIRE"
    settings_cls = FIRESettings

    @classmethod
    def roles(cls, settings: FIRESettings, pop_size: int) -> tuple[str, ...]:
        """``pop1`` for P1's members (the first), ``pop2``, ... for the parent sub-populations, ``eval`` for the
        evaluators (the last)."""
        evaluators = settings.evaluators if settings.evaluators is not None else max(
            2, round(pop_size * EVALUATOR_SHARE))
        rest = pop_size - evaluators
        sizes = settings.sub_pops if settings.sub_pops is not None else [rest - rest // 2, rest // 2]
        if len(sizes) < 2 or min(sizes) < 2:
            raise UsageError(f"FIRE needs at least two sub-populations of at least 2 members each, got sub_pops "
                             f"{sizes} from a population of {pop_size} with {evaluators} evaluators (raise "
                             f"--batchsize to at least 6, or set -m sub_pops=[N1,N2] evaluators=E)")
        if evaluators < 2 or evaluators > sum(sizes[1:]):
            raise UsageError(f"FIRE's evaluators must be at least 2 and at most the {sum(sizes[1:])} members of "
                             f"the sub-populations they evaluate (sub_pops {sizes[1:]}), got {evaluators} "
                             f"(set -m evaluators=E or change sub_pops)")
        if sum(sizes) + evaluators != pop_size:
            raise UsageError(f"FIRE's sub-populations {sizes} and {evaluators} evaluators make "
                             f"{sum(sizes) + evaluators} members, but the population is {pop_size} (set "
                             f"--batchsize {sum(sizes) + evaluators}, or sub_pops to sizes that add up to "
                             f"{pop_size - evaluators})")
        pops = tuple(f"pop{k + 1}" for k, size in enumerate(sizes) for _ in range(size))
        return pops + (EVALUATOR_ROLE,) * evaluators

    @property
    def compare(self) -> CurveComparison:
        """How this run compares two curves (its ``smoothing``)."""
        return CurveComparison(self.settings.smoothing)

    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        if self.context is None:
            raise ValueError("FIRE needs the run's RunContext (its members' roles): build it with "
                             "RunConfig.build_strategy() or pass context=")
        latest = history.latest()
        roles = np.array(self.context.roles)
        table = Rounds(history, roles)
        evaluators = [int(m) for m in np.flatnonzero(roles == EVALUATOR_ROLE)]
        pops = sorted(set(self.context.roles) - {EVALUATOR_ROLE}, key=lambda role: int(role[3:]))
        ongoing = {e: table.evaluation(e) for e in evaluators}
        ongoing = {e: ev for e, ev in ongoing.items() if ev is not None}
        curves = {e: table.curve(e) for e in ongoing}

        # PBT within each sub-population: P1 on the score, the others on their evaluators' fitness.
        in_pop = {role: latest[roles[latest["member"].to_numpy()] == role] for role in pops}
        pairs = self.exploit(in_pop[RESULT_ROLE], in_pop[RESULT_ROLE]["score"].to_numpy(dtype=float), rng)
        fitness: dict[int, float] = {}
        for role in pops[1:]:
            judged = {ev.parent: e for e, ev in ongoing.items() if roles[ev.parent] == role}
            for p, e in judged.items():
                fitness[p] = sum(self.compare.score_diff(curves[e], curves[q]) for o, q in judged.items() if o != p)
            # The NaN policy every strategy follows: a member whose own score is NaN (diverged, or weights that
            # never finished an episode) has no fitness, is never a donor and is replaced while a donor exists.
            failed = in_pop[role][~np.isfinite(in_pop[role]["score"].to_numpy(dtype=float))]
            fitness.update(dict.fromkeys(map(int, failed["member"]), float("nan")))
            rows = in_pop[role][in_pop[role]["member"].isin(list(fitness))]
            pairs.update(self.exploit(rows, np.array([fitness[int(m)] for m in rows["member"]]), rng))

        wins, ended = self._verdicts(ongoing, curves, table, pairs, history)
        ended.update({e: Ended() for e in evaluators if e not in ongoing})
        fixed = {**wins, **self._assign(ended, ongoing, pairs, fitness, pops, roles, table, history)}
        decisions = self.decisions(history, space, pairs, rng, fixed)
        return [_with_fitness(d, fitness) for d in decisions]

    def _verdicts(self, ongoing: dict[int, Evaluation], curves: dict[int, list[float]], table: Rounds,
                  pairs: dict[int, int], history: History) -> tuple[dict[int, Decision], dict[int, Ended]]:
        """The evaluations that end now: ``{child: copy the winning evaluator}``, and why each evaluator that
        ends does (a win, a stop), for :meth:`_assign` to give it its next task."""
        wins: dict[int, tuple[float, int]] = {}
        ended: dict[int, Ended] = {}
        for e, ev in ongoing.items():
            rounds = table.last + 1 - ev.start
            if ev.child in pairs or ev.parent in pairs:
                ended[e] = Ended("FIRE: stop, child or parent replaced")
                continue
            mine, theirs = curves[e], table.curve(ev.child)
            diff, p = self.compare.score_diff(mine, theirs), self.compare.binomial(mine, theirs)
            info = {"score_diff": diff, "p_value": p, "eval_rounds": float(rounds)}
            if diff > 0 and p < self.settings.p_value:
                rival = wins.get(ev.child)
                if rival is not None and rival[0] >= diff:  # two evaluators beat one child: the better one's
                    ended[e] = Ended("FIRE: stop, another evaluator won", info)  # weights go, the other stops
                    continue
                if rival is not None:
                    ended[rival[1]] = Ended("FIRE: stop, another evaluator won", ended[rival[1]].info)
                wins[ev.child] = (diff, e)
                ended[e] = Ended("FIRE: won", info)
                continue
            # Before max_eval_rounds a curve that meets the child's stops once its test falls behind a threshold
            # relaxed in proportion to the rounds left; at max_eval_rounds every evaluation without a win stops,
            # PBT-Zoo's test-passed-but-score-not-above case too (there it goes on for as long as the test passes).
            relaxed = self.settings.p_value + max(0.0, 1 - rounds / self.settings.max_eval_rounds)
            apart = overlap(self.compare.smooth(mine), self.compare.smooth(theirs)) is None
            if rounds >= self.settings.max_eval_rounds or (not apart and p > relaxed):
                ended[e] = Ended("FIRE: stop, not better", info)
        latest = history.latest().set_index("member")
        copies = {child: Decision(child, e, history.config_of(latest.loc[e]),
                                  (f"FIRE: m{e} evaluating m{ongoing[e].parent} wins",), info=ended[e].info)
                  for child, (_, e) in wins.items()}
        return copies, ended

    def _assign(self, ended: dict[int, Ended], ongoing: dict[int, Evaluation], pairs: dict[int, int],
                fitness: dict[int, float], pops: list[str], roles: np.ndarray, table: Rounds,
                history: History) -> dict[int, Decision]:
        """A new task for each evaluator in ``ended`` (once every member is past burn-in): the free member of
        P2, P3, ... that has waited longest, with the config of the best member of the sub-population below (P1's
        by score, a lower one's by fitness: :meth:`_best`)."""
        if not self.selection.rules.ready(history.latest()["steps"].to_numpy()):
            return {}
        busy = {ev.parent for e, ev in ongoing.items() if e not in ended}
        # A member with a NaN score has no weights worth evaluating: it waits to be replaced.
        free = [int(m) for m in np.flatnonzero(np.isin(roles, pops[1:]))
                if m not in busy and m not in pairs and np.isfinite(table.score[table.last, m])]
        free.sort(key=table.waiting)
        latest = history.latest().set_index("member")
        configs = {int(m): history.config_of(latest.loc[m]) for m in latest.index}
        assigned = {}
        for e, parent in zip(sorted(ended), [*free, *[None] * len(ended)]):
            why = (ended[e].why,) if ended[e].why else ()
            if parent is None:
                best = self._best(RESULT_ROLE, roles, table, {})
                assigned[e] = Decision(e, best, configs[best], (*why, "FIRE: idle, copies P1's best"),
                                       explored=True, info=ended[e].info)
                continue
            # never a member that is being replaced this round (PBT-Zoo excludes those just perturbed)
            child = self._best(pops[pops.index(str(roles[parent])) - 1], roles, table, fitness, exclude=set(pairs))
            assigned[e] = Decision(e, parent, configs[child],
                                   (*why, f"FIRE: evaluate m{parent} with m{child}'s config"), explored=True,
                                   info={**ended[e].info, "parent": float(parent), "child": float(child)})
        return assigned

    @staticmethod
    def _best(role: str, roles: np.ndarray, table: Rounds, fitness: dict[int, float],
              exclude: Collection[int] = ()) -> int:
        """The best member of ``role``, ``exclude`` left out: P1's by its score in the last round, a parent
        sub-population's by its ``fitness`` (what P2, P3, ... are selected on), members without one (not yet
        evaluated) after those with one, then by score."""
        members = np.array([m for m in np.flatnonzero(roles == role) if m not in exclude])
        score = table.score[table.last, members]
        fit = np.array([fitness.get(int(m), np.nan) for m in members]) if role != RESULT_ROLE else np.zeros(len(members))
        keyed = [np.where(np.isnan(v), -np.inf, v) for v in (score, fit)]
        return int(members[np.lexsort((-keyed[0], -keyed[1]))[0]])


def _with_fitness(decision: Decision, fitness: dict[int, float]) -> Decision:
    """``decision`` with the member's fitness (P2, ...) among its reasons, when it changes the member."""
    if decision.member not in fitness or not (decision.copies or decision.explored) \
            or not np.isfinite(fitness[decision.member]):
        return decision
    return Decision(decision.member, decision.donor, decision.config, decision.ops, decision.explored,
                    {**decision.info, "fitness": fitness[decision.member]})
