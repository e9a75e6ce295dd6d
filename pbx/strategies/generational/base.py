"""What BG-PBT and IPBT share: generations, a larger first population cut to the kept one, exploit by truncation.

Both (Wan et al., AutoML-Conf 2022; Chebykin et al., arXiv 2511.09190, whose code
holds the BG-PBT the IPBT paper ran) train a larger first population for one round
and keep its best ``pop_size`` (:meth:`Generational.cut`), exploit by truncation
on the round's scores, and explore by Bayesian optimisation in a trust region
around the donor's config (:mod:`pbx.strategies.generational.trust_region`, which
adds that explore to :class:`Generational`); both halves read :class:`GenerationalSettings`.

A *generation* runs from a restart round (or round 0) to the round before the
next restart; the history marks restart rounds (``restart``). A restart is each
strategy's own (:meth:`Generational.restart_due`, :meth:`Generational.restart`);
the BO across the finished generations that picks its configs is
:mod:`pbx.strategies.generational.restart`'s.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from pbx.errors import UsageError
from pbx.history import History
from pbx.settings import check_choices
from pbx.standings import rank_best_first
from pbx.space import Space
from pbx.strategies.base import Decision
from pbx.strategies.pb2 import PB2, PB2Settings
from pbx.strategies.selection import Truncation, nan_members

TR_SEARCHES = ("steps", "perturb", "climb")
"""The values of :attr:`GenerationalSettings.tr_search`."""
TR_COLLAPSES = ("restart", "stay")
"""The values of :attr:`GenerationalSettings.tr_collapse`."""
EXPLOIT_RULES = ("reference", "selection")
"""The values of :attr:`GenerationalSettings.exploit_rule`."""
FIRST_EXPLORES = ("gp", "perturb")
"""The values of :attr:`GenerationalSettings.first_explore`."""
RESTART_PRIORS = ("initial", "space")
"""The values of :attr:`GenerationalSettings.restart_prior`."""
LINEAGE_STARTS = ("before", "after")
"""The values of :attr:`GenerationalSettings.lineage_start`."""
ACROSS_MEANS = ("learned", "lowest")
"""The values of :attr:`GenerationalSettings.across_mean`."""
INTERVAL_TIMES = ("end", "start")
"""The values of :attr:`GenerationalSettings.interval_time`."""
UCB_STDS = ("observed", "latent")
"""The values of :attr:`GenerationalSettings.ucb_std`."""
PENDING_AT = ("donor", "own")
"""The values of :attr:`GenerationalSettings.pending_at`."""
CUT_RULES = ("reference", "places")
"""The values of :attr:`GenerationalSettings.cut_rule`."""
TR_SUCCESSES = ("every", "explored")
"""The values of :attr:`GenerationalSettings.tr_success`."""
NOISE_CAP_MAX = 100.0
"""The largest :attr:`GenerationalSettings.noise_cap`: a noise variance 100 times the targets' own says nothing more."""
LENGTHSCALE_CAP_MAX = 1e4
"""The largest :attr:`GenerationalSettings.lengthscale_cap`: on inputs scaled to [0, 1] a lengthscale 1e4 times the
largest squared distance leaves the GP flat, and GPy's bounded transform misbehaves with caps near a float's end."""

@dataclass
class GenerationalSettings(PB2Settings):
    """The trust-region BO both strategies explore with (CASMO's defaults) and their first population."""

    cat_exps: ClassVar[tuple[str, ...]] = ("random", "fixed")
    """Categorical hyperparameters are resampled as PB2-Rand's (``random``) or held (``fixed``): the trust
    region's GP models the continuous ones alone
    (:meth:`~pbx.strategies.generational.trust_region.TrustRegionBO._posterior`), so PB2's EXP3 and CoCaBO,
    which pick categories with their own GP or bandit, have no part of it to act on."""

    window: int = 100
    """Most recent intervals of the current generation the GP learns from (the reference keeps 100)."""
    ucb_kappa: float = 3.0
    """UCB's exploration weight (the reference's LCB beta)."""
    prior_mean: str = "mean"
    """What the GP expects where it has no data: ``mean``, the reference's (CASMO's GP has a learned constant mean,
    which on the copula's normal scores sits at their mean, 0), or ``lowest``, PB2's default in pbx (the window's
    lowest rate), which BG-PBT and IPBT inherited before."""
    tr_init: float = 0.4
    """The trust region's side at a generation's start, in the unit cube of the continuous hyperparameters."""
    tr_min: float = 0.15
    tr_max: float = 1.0
    tr_factor: float = 1.5
    succ_tol: int = 3
    """Rounds in a row whose best member ran an explored config before the region grows."""
    fail_tol: int = 10
    """Rounds in a row whose best member did not before the region shrinks."""
    init_factor: int = 2
    """The first population's size in multiples of ``pop_size``, trained one round and cut to ``pop_size``."""
    patience: int = 15
    """Rounds in a row a generation may stagnate before it restarts (each strategy says what stagnates)."""
    tr_search: str = "steps"
    """How a pick is searched in the trust region: ``steps``, the reference's, 3 points ``donor * U(0.8, 1.2)``,
    each moved 40 steps of 3e-4 up the acquisition, the best by UCB where they end
    (:func:`~pbx.strategies.bayes.acquisition.perturbed`); ``perturb``, pbx's earlier, the best of the 3 points
    without the steps; or ``climb``, pbx's: L-BFGS-B from screened points and the donor's and running members'
    configs (:func:`~pbx.strategies.bayes.acquisition.maximise`, PB2's search), which finds the acquisition's
    maximum in the region rather than near the donor."""
    tr_collapse: str = "stay"
    """What a trust region that shrinks to ``tr_min`` does: ``restart``, the original BG-PBT's (``xingchenwan/bgpbt``
    ``adjust_tr_length(restart=True)``, kept by ``AwesomeLemon/IPBT``'s BG-PBT), starts again at ``tr_init`` with
    the BO's data (:meth:`~pbx.strategies.generational.trust_region.TrustRegionBO.bo_start`), configs and
    weights kept; ``stay`` keeps it at ``tr_min``. BG-PBT's default is ``restart``, IPBT's ``stay``
    (docs/algorithms.md)."""
    exploit_rule: str = "reference"
    """Who copies whom: ``reference``, the reference's truncation (the bottom ``k`` of the run's ``quantile``
    copy a random one of the top ``k``, whatever their scores; ``k`` rounded as the reference rounds it, ties
    ordered as its ascending sort orders them), or ``selection``, the run's ``--selection`` with pbx's guards (only
    a strictly better donor is copied, ``ceil`` of the quantile, ties to the lowest member id). A run whose
    selection is not truncation uses its selection either way."""
    first_explore: str = "gp"
    """How a generation's first explore (after round 0, after a restart round) picks: ``gp``, the reference's, by
    the GP on that round's improvement of the members the cut kept, from the score each had before the round
    trained (the runner scores every candidate's state once before the round: :meth:`Strategy.scores_start`, as
    the reference's eval-only call); or ``perturb``, pbx's earlier, no extra evaluation: a generation's data
    start after its first round, so its first explore perturbs as PBT does (x0.8 / x1.2). A member that cannot
    score its state (:meth:`pbx.members.Member.score_state` NaN) leaves ``gp`` with no data, and PBT's
    perturbation."""
    restart_prior: str = "initial"
    """What a restart's configs "from the prior" are drawn from (BG-PBT's global restart ranks such draws, IPBT
    takes ``random_configs`` of them): ``initial``, the references', the task's own first draw where it has one
    (:meth:`pbx.members.Member.prior`: ``search_space.sample(task, True)``, the toys' lr in [0.9, 1.1]), else the
    search space; or ``space``, pbx's earlier, always the search space. The two differ only for a member with a
    first draw of its own (no SB3 agent has one)."""
    lineage_start: str = "before"
    """Where each point of the GP across generations (a restart's picks by the lineages of the generations
    before, :class:`~pbx.strategies.generational.restart.Lineage`) starts: ``before``, the reference's, at the
    generation's
    start and the score its state had before the first round trained (the history's ``start_score``, taken with
    ``first_explore: gp`` by a member that can score its state; the round's end and score where there is none);
    or ``after``, pbx's earlier, at the first round's end and score."""

    signal_cap: float | None = 5.0
    """Upper bound on every BG-PBT and IPBT GP's kernel variance (on the copula's normal scores): the IPBT authors'
    5 (``algo/bgpbt_utils.py`` ``train_gp``, ``outputscale_constraint = Interval(0.5, 5.0)``); 2 was PB2's cap,
    which these strategies inherited before; ``null`` leaves it free (and :attr:`signal_floor` unused)."""
    signal_floor: float = 0.5
    """Lower bound on the kernel variance, with :attr:`signal_cap`: the authors' 0.5 (PB2's 1e-4 before)."""
    noise_floor: float = 1e-6
    """Lower bound on every BG-PBT and IPBT GP's likelihood noise variance: the authors' 1e-6 (``train_gp``,
    ``noise_constraint = Interval(1e-6, 0.1)``; PB2's 1e-4 before)."""
    noise_cap: float = 0.1
    """Upper bound on the noise variance: the authors' 0.1 (PB2's 10 before, on targets of variance near 1)."""
    lengthscale_floor: float = 1.7e-4
    """Lower bound on the GP's lengthscale (pbx's squared exponential divides the squared distance by it): the
    authors' Matern-5/2 lengthscale floor 0.01 (``train_gp``, ``lengthscale_constraint = Interval(0.01, ...)``)
    as the squared exponential whose correlation falls to 1/e at the same distance, ``(1.299 x 0.01)^2``; PB2's
    1e-5 before. The fit starts in the middle of the bounds on the Matern's scale, as the authors'
    (:meth:`~pbx.strategies.generational.trust_region.TrustRegionBO.fit_bounds`)."""
    lengthscale_cap: float = 0.42
    """Upper bound on the lengthscale: IPBT's, whose GP has a lengthscale per input (ARD) at most 0.5, ``(1.299 x
    0.5)^2``; BG-PBT's scales with the inputs (:attr:`lengthscale_per_input`); PB2's 1 before."""
    lengthscale_per_input: bool = False
    """The cap is :attr:`lengthscale_cap` times the GP's inputs (time aside), as the authors' one lengthscale at
    most ``sqrt(inputs)`` without ARD (BG-PBT's); False: the cap as it is (IPBT's, with ARD)."""
    decay_cap: float = 1 - 1e-6
    """Upper bound on the time decay ``epsilon`` (a row ``d`` apart in time counts ``(1 - epsilon)^(d/2)``): the
    authors' ``1 - 1e-6`` (``TemporalKernel``'s ``Interval(0.0, 1.0 - 1e-6)``), which the fit starts from the
    middle of, as theirs (raw 0); PB2's 0.5 before."""
    across_mean: str = "learned"
    """The prior mean of the GP across generations
    (:meth:`~pbx.strategies.generational.restart.RestartBO.across_generations`):
    ``learned``, the authors' (their meta GP is ``train_gp``'s, with ``gpytorch.means.ConstantMean``), a constant
    fitted with the kernel; or ``lowest``, pbx's earlier, the lowest of its targets."""
    interval_time: str = "end"
    """Where the GP places each interval in time and where it asks for a donor's pick: ``end``, the authors'
    (``update_bayesian_dataset`` stamps a round's row at ``t_cur + t_step``; ``explore`` asks at the donor's last
    interval, its end and the score it started from, ``R_before``); or ``start``, pbx's earlier (PB2's), each
    interval at its start and a donor asked at its latest steps and score."""
    ucb_std: str = "observed"
    """UCB's standard deviation: ``observed``, the authors' (``_lcb`` reads ``gp.likelihood(gp(x))``: the
    likelihood noise added), or ``latent``, pbx's earlier (PB2's), the latent function's alone."""
    pending_at: str = "donor"
    """Where the pending points (the members that keep running, the round's earlier picks) sit while a pick is
    searched: ``donor``, the authors' (``explore`` tiles the donor's ``R_before`` and time under every one of
    ``current``), or ``own``, pbx's earlier (PB2's), each at its own member's point."""
    cut_rule: str = "reference"
    """Which candidates a larger round's cut keeps and where: ``reference``, the authors'
    (``np.argsort(fitnesses)[-pop_size:]``, then the survivors in index order into places 0, 1, ...): ties to the
    higher ids, as an ascending stable sort puts them last; or ``places``, pbx's earlier, ties to the lower ids and
    each kept candidate below ``pop_size`` in its own place."""
    tr_success: str = "every"
    """What counts as a trust-region success
    (:meth:`~pbx.strategies.generational.trust_region.TrustRegionBO.trust_region`): ``every``, the IPBT authors'
    (their ``update_bayesian_dataset`` tags every row ``'bo'``, so every round is one and ``L`` only grows, from a
    generation's first round on), or ``explored``, the original BG-PBT's (``xingchenwan/bgpbt``: a member that
    ran an explored config has the round's best score), BG-PBT's default."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choices(self, tr_search=TR_SEARCHES, tr_collapse=TR_COLLAPSES, exploit_rule=EXPLOIT_RULES,
                      first_explore=FIRST_EXPLORES, restart_prior=RESTART_PRIORS,
                      lineage_start=LINEAGE_STARTS, across_mean=ACROSS_MEANS, interval_time=INTERVAL_TIMES,
                      ucb_std=UCB_STDS, pending_at=PENDING_AT, cut_rule=CUT_RULES, tr_success=TR_SUCCESSES)
        if self.signal_cap is not None and not 0 < self.signal_floor < self.signal_cap:
            raise UsageError(f"signal_floor must be above 0 and below signal_cap ({self.signal_cap}), got "
                             f"{self.signal_floor}")
        if not 0 < self.noise_floor < self.noise_cap <= NOISE_CAP_MAX:
            raise UsageError(f"the GP's noise bounds need 0 < noise_floor < noise_cap <= {NOISE_CAP_MAX:g} (the "
                             f"targets' own variance is 1), got {self.noise_floor}, {self.noise_cap}")
        if not 0 < self.lengthscale_floor < self.lengthscale_cap <= LENGTHSCALE_CAP_MAX:
            raise UsageError(f"the GP's lengthscale bounds need 0 < lengthscale_floor < lengthscale_cap <= "
                             f"{LENGTHSCALE_CAP_MAX:g} (inputs scaled to [0, 1]), got {self.lengthscale_floor}, "
                             f"{self.lengthscale_cap}")
        if not 0 < self.decay_cap < 1:
            raise UsageError(f"decay_cap must be above 0 and below 1 (a time decay of 1 forgets at once), got "
                             f"{self.decay_cap}")
        if not 0 < self.tr_min <= self.tr_init <= self.tr_max <= 1:
            raise UsageError(f"the trust region needs 0 < tr_min <= tr_init <= tr_max <= 1, got {self.tr_min}, "
                             f"{self.tr_init}, {self.tr_max}")
        if not self.tr_factor > 1 or self.succ_tol < 1 or self.fail_tol < 1:
            raise UsageError(f"tr_factor must be > 1 and succ_tol, fail_tol >= 1, got {self.tr_factor}, "
                             f"{self.succ_tol}, {self.fail_tol}")
        for name in ("init_factor", "patience"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise UsageError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not self.ucb_kappa >= 0:
            raise UsageError(f"ucb_kappa must be >= 0, got {self.ucb_kappa}")



def generation_start(history: History) -> int:
    """The first round of the current generation: the last restart round, or 0."""
    frame = history.frame
    marked = frame.loc[frame["restart"], "round"]
    return int(marked.max()) if len(marked) else 0


GenerationalSettingsT = TypeVar("GenerationalSettingsT", bound=GenerationalSettings)


class Generational(PB2[GenerationalSettingsT]):
    """BG-PBT's and IPBT's shared round: the cut of a larger population, then a restart or PBT's exploit, whose
    explore (PB2's hooks) :class:`~pbx.strategies.generational.trust_region.TrustRegionBO` gives."""

    @classmethod
    def initial_size(cls, settings: GenerationalSettingsT, pop_size: int) -> int:
        return settings.init_factor * pop_size

    @property
    def pop_size(self) -> int:
        if self.context is None:
            raise ValueError(f"{self.name} needs the run's RunContext (its population): build it with "
                             f"RunConfig.build_strategy() or pass context=")
        return self.context.pop_size

    def scores_start(self) -> bool:
        return self.settings.first_explore == "gp"

    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        with threadpool_limits(limits=1, user_api="blas"):  # as PB2: one thread, decisions replay bit for bit
            kept = self.cut(history.latest())
            if self.restart_due(history):
                return self.restart(history, space, kept, rng)
            return self.exploit_explore(history, space, kept, rng)

    def cut(self, latest: pd.DataFrame) -> dict[int, int]:
        """``{member: the latest round's member whose state it goes on from}``: each member as itself in a round
        of ``pop_size``; after a larger one (round 0, a restart's candidates) members ``0 .. pop_size - 1`` from
        its best ``pop_size`` by score (:attr:`~GenerationalSettings.cut_rule`).

        ``reference``: the authors' ``np.argsort(fitnesses)[-pop_size:]`` (``algo/ipbt.py`` and ``algo/bgpbt.py``
        ``_schedule_all_populations``), tied candidates ordered as a stable ascending sort orders them, so the
        higher ids go on; the survivors then fill places 0, 1, ... in id order. NumPy's default sort is not
        stable (its AVX-512 sort, or its introsort past 16 items, orders ties by the machine and the array), so
        the authors' ties have no order of their own: this is the one their sort gives without those. A NaN
        ranks lowest (pbx's NaN policy; NumPy sorts it last, the best). ``places``: pbx's earlier cut, ties to
        the lower ids, each kept candidate below ``pop_size`` in its own place, the others in the free places."""
        members = [int(m) for m in latest["member"]]
        if len(members) <= self.pop_size:
            return {m: m for m in members}
        scores = latest["score"].to_numpy(float)
        if self.settings.cut_rule == "reference":
            order = np.argsort(np.where(np.isnan(scores), -np.inf, scores), kind="stable")
            return dict(enumerate(sorted(members[int(i)] for i in order[len(order) - self.pop_size:])))
        best = [members[i] for i in rank_best_first(scores)[:self.pop_size]]
        places = {m: m for m in best if m < self.pop_size}
        free = iter(sorted(set(range(self.pop_size)) - set(places)))
        places |= {next(free): m for m in sorted(m for m in best if m >= self.pop_size)}
        return dict(sorted(places.items()))

    def survivors(self, history: History) -> History:
        """``history`` without the rows of the candidates that a larger round's cut dropped."""
        frame = history.frame
        dropped = np.zeros(len(frame), dtype=bool)
        sizes = frame.groupby("round")["member"].transform("count").to_numpy()
        for r, rows in frame[sizes > self.pop_size].groupby("round"):
            kept = list(self.cut(rows).values())
            dropped |= ((frame["round"] == r) & ~frame["member"].isin(kept)).to_numpy()
        return History(history.hp_names, frame[~dropped], history.curves) if dropped.any() else history

    def exploit_explore(self, history: History, space: Space, kept: dict[int, int],
                        rng: np.random.Generator) -> list[Decision]:
        """Truncation among the kept members on the round's scores; each recipient copies its donor and
        explores around the donor's config (:meth:`explore`, PB2's with this strategy's region and targets)."""
        rows = history.latest().set_index("member").loc[list(kept.values())].reset_index()
        pairs = self.exploit(rows.assign(member=list(kept)), rows["score"].to_numpy(float), rng)
        return self.decisions(history, space, pairs, rng, sources=kept)

    @classmethod
    def exploit_count(cls, quantile: float, pop_size: int) -> int:
        """Members in each of the reference's top and bottom quantiles: BG-PBT's ``int(quantile * n)`` (0 for a
        population of 4 at 0.125: that BG-PBT never exploits)."""
        return int(quantile * pop_size)

    def exploit(self, rows: pd.DataFrame, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        """The reference's truncation (:attr:`GenerationalSettings.exploit_rule`), or the run's selection.

        The ranking is the reference's ascending sort, ties in member order, so among tied members the higher
        id ranks higher; every bottom member copies a top one drawn at random, tied or not. pbx's NaN policy
        stays: a NaN score ranks lowest, is never a donor, and a NaN member copies whatever its rank.
        """
        if self.settings.exploit_rule == "selection" or not isinstance(self.selection, Truncation):
            return super().exploit(rows, scores, rng)
        if not self.selection.rules.ready(rows["steps"].to_numpy()):
            return {}
        members = [int(m) for m in rows["member"]]
        k = self.exploit_count(self.selection.quantile, len(members))
        order = [int(i) for i in np.argsort(np.where(np.isnan(scores), -np.inf, scores), kind="stable")]
        top = [i for i in order[len(order) - k:] if np.isfinite(scores[i])] if k else []
        if not top:
            return {}
        bottom = set(order[:k]) | set(nan_members(scores))
        return {members[i]: members[top[int(rng.integers(len(top)))]] for i in sorted(bottom)}

    @abstractmethod
    def restart_due(self, history: History) -> bool:
        """Whether the population restarts after the latest round (the strategy's stagnation rule)."""

    @abstractmethod
    def restart(self, history: History, space: Space, kept: dict[int, int],
                rng: np.random.Generator) -> list[Decision]:
        """The decisions of a restart (``kept``: :meth:`cut`'s), every one with ``restart`` set."""
