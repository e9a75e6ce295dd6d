"""IPBT: iterated PBT with task-agnostic restarts (Chebykin et al., arXiv 2511.09190; ``AwesomeLemon/IPBT``).

The step between exploits (``t_ready``) changes every PBT variant's result and is
hard to choose for a new task. IPBT starts with a short one and watches the
population for stagnation; when it stagnates, IPBT restarts with a step
``step_factor`` times longer, reusing what it learned:

- **stagnation** (the reference's ``previous-smoothed-or-slow``, :mod:`pbx.strategies.generational.stagnation`): the
  best
  score of each round of the current generation, z-scored over the generation and smoothed by the reference's
  sparse variational GP (Matern-5/2 with noise, 50 Adam steps); a round *fails* when the smoothed value did not
  rise from the round before. ``patience`` (3) failures in a row restart, and so
  does one round in which the last ``slow_rounds - 1`` (14) rounds raised the best
  z-score by less than 1 (once the generation has ``slow_rounds`` rounds);
- **restart**: ``init_factor`` x ``pop_size`` candidates (16 for 8): candidate ``i < pop_size``
  goes on from member ``i`` when that member is in the top quantile, every other one from a random
  member of it (the reference's ``_restart``); half of them get random hyperparameters and
  half hyperparameters picked by a GP across the finished generations
  (:meth:`~pbx.strategies.generational.restart.RestartBO.across_generations`) around the config the ending generation's
  best lineage started with; the random ones come from the task's own first draw where it has one
  (:meth:`pbx.members.Member.prior`), as the reference's ``sample(task, True)``; half of
  them (drawn apart) get freshly initialised weights and the others
  ``shrink * w + perturb * w0`` (Ash & Adams 2020; 0.2, 0.1), ``w0`` a fresh
  initialisation; the optimizer's state stays, as the reference's. The candidates train the restart round at the new length and
  the best ``pop_size`` go on (:meth:`~pbx.strategies.generational.base.Generational.cut`),
  as after the first round, whose population is ``init_factor`` times larger too;
- a restart happens only while its round fits the budget: a restart round costs
  ``init_factor`` times the new step (:mod:`pbx.plan`), so IPBT spends what PBT
  spends; and, as the reference, never again once a round ended less than two of the next
  generation's steps from the budget (:func:`late`);
- between restarts: PBT's truncation exploit (quantile 0.25, :mod:`pbx.strategies.generational.base`), BO
  explore in a trust region around the donor (:mod:`pbx.strategies.generational.trust_region`).

Departures from the reference are listed in docs/algorithms.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbx.errors import UsageError
from pbx.history import History, restart_marks
from pbx.settings import check_choices
from pbx.standings import rank_best_first
from pbx.space import Space
from pbx.strategies.base import Decision, WeightReset
from pbx.strategies.generational.base import GenerationalSettings, generation_start
from pbx.strategies.generational.restart import RestartBO
from pbx.strategies.selection import Truncation
from pbx.strategies.generational.stagnation import SMOOTHERS, stagnated

OPTIMIZER_STATES = ("keep", "clear")
"""The values of :attr:`IPBTSettings.optimizer_state`."""
RESTART_CENTRES = ("lineage", "latest")
"""The values of :attr:`IPBTSettings.restart_centre`."""


@dataclass
class IPBTSettings(GenerationalSettings):
    """IPBT's settings; their defaults are the reference's (``config/algo/ipbt.yaml``)."""

    step_factor: float = 2.0
    """Each restart multiplies the rounds' length by this."""
    patience: int = 3
    """Rounds in a row whose smoothed best did not rise before a restart."""
    slow_rounds: int = 15
    """A generation this many rounds long restarts at once when its last ``slow_rounds - 1`` rounds raised the
    best z-scored round score by less than 1."""
    shrink: float = 0.2
    perturb: float = 0.1
    """Shrink-and-perturb of the candidates that keep weights: ``shrink * w + perturb * w0``."""
    random_configs: float = 0.5
    """Share of a restart's candidates whose hyperparameters are drawn from the prior (the rest: the GP's)."""
    random_weights: float = 0.5
    """Share of a restart's candidates that start from freshly initialised weights."""
    last_rounds: str = "halves"
    """How the plan meets the budget's end: ``halves``, the reference's (``algo/ipbt.py`` ``adjust_step_size``),
    what is left when less than two rounds remain and it is not a whole number of rounds is split into two
    rounds; ``cut``, pbx's, a short last round."""
    smoother: str = "reference"
    """How the stagnation rule smooths the rounds' bests (:mod:`pbx.strategies.generational.stagnation`):
    ``reference``, the
    authors' sparse variational GP after their 50 Adam steps; ``grid``, pbx's earlier exact GP with lengthscale and
    noise chosen on a fixed grid, whose shortest lengthscale (a fifth of the generation) keeps it a smoother where
    the reference's short fit can nearly interpolate a noisy generation."""
    optimizer_state: str = "keep"
    """What a restart does to the candidates' optimizer state (Adam's moments): ``keep``, the reference's (it
    shrinks or re-initialises only the checkpoint's ``model_state_dict``), or ``clear``, pbx's earlier restart,
    which starts it afresh as a new learner's."""
    restart_centre: str = "lineage"
    """Where a restart's GP picks are centred and asked: ``lineage``, the reference's (``hps_best``), the config
    the ending generation's best lineage started with, asked at that start's score
    (:meth:`~pbx.strategies.generational.restart.RestartBO.lineage_centre`); or ``latest``, pbx's earlier, the latest
    round's best member's config and score."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.step_factor >= 1:
            raise UsageError(f"step_factor must be >= 1, got {self.step_factor}")
        if not isinstance(self.slow_rounds, int) or self.slow_rounds < 2:
            raise UsageError(f"slow_rounds must be an integer >= 2, got {self.slow_rounds!r}")
        check_choices(self, last_rounds=("halves", "cut"), smoother=SMOOTHERS, optimizer_state=OPTIMIZER_STATES,
                      restart_centre=RESTART_CENTRES)
        for name in ("random_configs", "random_weights"):
            if not 0 <= getattr(self, name) <= 1:
                raise UsageError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("shrink", "perturb"):
            if not 0 <= getattr(self, name) <= 1:
                raise UsageError(f"{name} must be in [0, 1] (a restart's weights become shrink * w + perturb * w0, "
                                 f"w0 a fresh network's), got {getattr(self, name)}")
        if self.shrink == self.perturb == 0:
            raise UsageError("shrink and perturb are both 0, which would zero every kept candidate's weights: raise "
                             "either (the reference's are 0.2 and 0.1)")


class IPBT(RestartBO[IPBTSettings]):
    name = "IPBT"
    settings_cls = IPBTSettings
    resets_weights = True

    @classmethod
    def restart_size(cls, settings: IPBTSettings, pop_size: int) -> int:
        return settings.init_factor * pop_size

    @classmethod
    def round_growth(cls, settings: IPBTSettings) -> float:
        return settings.step_factor

    @classmethod
    def last_rounds(cls, settings: IPBTSettings) -> str:
        return settings.last_rounds

    @classmethod
    def exploit_count(cls, quantile: float, pop_size: int) -> int:
        """IPBT's reference rounds its quantiles to the nearest (Python's ``round``), where BG-PBT's truncates."""
        return round(quantile * pop_size)

    def restart_due(self, history: History) -> bool:
        if self.context is None or self.context.rules is None:
            raise ValueError("IPBT needs the run's RunContext with its rules: build it with RunConfig.build_strategy()")
        plan = self.context.rules.plan(restart_marks(history.frame))
        # the restart round (init_factor x pop_size candidates for the longer step) must fit what is left and
        # leave a round after it: the cut to pop_size comes with the next decisions, and none follow the last round
        longer = plan.rules.nominal_length(plan.restarts[-1] + 1)
        if plan.nominal_ends[-1] + self.settings.init_factor * longer >= plan.max_budget:
            return False
        if late(plan.nominal_ends, self.settings.step_factor, plan.max_budget):
            return False
        frame = history.frame
        rows = frame[frame["round"] >= generation_start(history)]
        bests = rows.groupby("round", sort=True)["score"].max().to_numpy(float)
        fails = 0
        for end in range(1, len(bests) + 1):
            failed, slow = stagnated(bests[:end], self.settings.slow_rounds, self.settings.smoother)
            fails = self.settings.patience if slow else fails + 1 if failed else 0
        return fails >= self.settings.patience

    def restart(self, history: History, space: Space, kept: dict[int, int],
                rng: np.random.Generator) -> list[Decision]:
        s = self.settings
        sources = list(kept.values())
        latest = history.latest().set_index("member").loc[sources].reset_index()
        scores = latest["score"].to_numpy(float)
        order = rank_best_first(scores)
        if s.exploit_rule == "reference" and isinstance(self.selection, Truncation):
            # the reference's ascending sort (ties: the higher id ranks higher); its ``sorted[-0:]`` is everyone
            k = self.exploit_count(self.selection.quantile, self.pop_size) or self.pop_size
            top = [sources[i] for i in np.argsort(np.where(np.isnan(scores), -np.inf, scores), kind="stable")[-k:]]
        else:
            top = [sources[i] for i in order[:self.selection.recipients(self.pop_size)]]
        count = s.init_factor * self.pop_size
        donors = [sources[i] if i < len(sources) and sources[i] in top else top[int(rng.integers(len(top)))]
                  for i in range(count)]
        random = round(s.random_configs * count)
        prior = self.prior(space)
        configs = [prior.sample(rng) for _ in range(random)]
        centre = self.lineage_centre(history) if s.restart_centre == "lineage" else self.latest_centre(history)
        configs += self.across_generations(history, space, count - random, centre, configs, rng)
        fresh = set(rng.choice(count, size=round(s.random_weights * count), replace=False).tolist())
        decisions = []
        for i, (donor, config) in enumerate(zip(donors, configs)):
            seed, clear = int(rng.integers(2**31)), s.optimizer_state == "clear"
            reset = (WeightReset("reinit", seed, clear_optimizer=clear) if i in fresh
                     else WeightReset("shrink_perturb", seed, s.shrink, s.perturb, clear_optimizer=clear))
            ops = ("restart", "hps from the prior" if i < random else "hps by the GP across generations",
                   "fresh weights" if i in fresh else f"weights {s.shrink} w + {s.perturb} w0")
            decisions.append(Decision(i, donor, config, ops, explored=True, restart=True, reset=reset))
        return decisions


def late(ends: list[int], step_factor: float, max_budget: int) -> bool:
    """Whether restarts have stopped for good: some round ended (``ends``, each round's nominal end) less than two
    of the next generation's steps from ``max_budget``, a step measured as that round's own cost times
    ``step_factor``.

    The reference's test after every round but the last (``t_after_this_step + 2 * potential_t_step > t_max``
    sets ``patience`` to infinity): its step is the round's cost, which is ``init_factor`` times the length in a
    generation's first round, so such a round can stop restarts that the next round's test alone would allow.
    """
    starts = [0, *ends[:-1]]
    return any(end + 2 * step_factor * (end - start) > max_budget for start, end in zip(starts, ends))
