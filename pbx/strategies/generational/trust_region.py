"""The explore BG-PBT and IPBT share: PB2's GP bandit in a trust region around the donor's config.

The generation's round (:mod:`pbx.strategies.generational.base`: the cut, the exploit, the restart) is what makes
BG-PBT and IPBT generational; how a recipient's new config is then picked is a concern of its own, with its own
settings and its own state (the region's side), so it lives here, as PB2's hooks on that round
(:class:`TrustRegionBO`). Which intervals the GP reads, how it is fit and asked, and the region its pick is
searched in are the references' (CASMO's, without its categorical half):

- the GP learns from the improvement rates of the current generation's most recent
  ``window`` intervals (100), each stamped at its end, rank-transformed to normal scores (a copula, as the
  reference's ``copula_standardize``), with pbx's time-varying kernel over
  ``(t, R_before, continuous hyperparameters)`` (:mod:`pbx.strategies.bayes.gp`) in the
  reference's bounds (kernel variance in [0.5, 5], noise in [1e-6, 0.1]);
- each pick maximises UCB with ``ucb_kappa`` = 3 (the reference's LCB at beta 3, on an
  observation's standard deviation) inside a box of side ``L`` centred on the donor's values,
  asked at the donor's last interval, the pending points at the donor's point too;
- ``L`` starts at ``tr_init`` (0.4) in each generation, grows by ``tr_factor``
  (1.5, up to ``tr_max``) after ``succ_tol`` (3) successes in a row and shrinks after
  ``fail_tol`` (10) failures in a row (down to ``tr_min``). IPBT's reference tags every
  row as explored, so every round is a success and its ``L`` only grows
  (``tr_success: every``); BG-PBT counts a round whose best member ran an explored config,
  as the original BG-PBT does, and with ``tr_collapse: restart`` a region at ``tr_min``
  starts again with the BO's data, as there.

The side is not stored: it is replayed from the generation's rounds (:meth:`TrustRegionBO.trust_region`), which
BG-PBT's patience and its global restart's segments read too. Categorical hyperparameters are explored as PBT does
(PB2-Rand), where CASMO moves them by its acquisition (docs/algorithms.md).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy import linalg
from scipy.stats import norm, rankdata

from pbx.history import History, skipped
from pbx.space import Space
from pbx.strategies.bayes.acquisition import STEPS, Acquisition, Box, perturbed
from pbx.strategies.base import Pending
from pbx.strategies.bayes.gp import FALLBACK_NOISE, FitBounds, Fitted, Posterior, fit
from pbx.strategies.bayes.observations import Intervals, intervals
from pbx.strategies.generational.base import Generational, GenerationalSettingsT, generation_start

AUTHORS_START = (1.0, 1e-3)
"""Where the IPBT authors' GP fit starts its kernel variance (``outputscale``) and its noise (``algo/bgpbt_utils.py``
``train_gp``); a start outside the bounds the settings give moves to their geometric middle."""


def copula(values: np.ndarray) -> np.ndarray | None:
    """Normal scores of the ranks, ``Phi^-1(rank / (n + 1))``, tied values taking the lowest of their ranks; None
    when all are equal.

    The reference ranks the negated rates (it minimises) with ties taking the highest rank there
    (``copula_standardize``); negated back, that is the lowest rank of the rates themselves.
    """
    if np.ptp(values) <= 1e-12 * max(1.0, float(np.max(np.abs(values)))):
        return None
    return norm.ppf(rankdata(values, method="min") / (len(values) + 1))


class TrustRegionBO(Generational[GenerationalSettingsT]):
    """A generational strategy that explores by PB2's GP bandit with the references' data, copula targets, GP
    bounds and UCB, in a trust region whose side its rounds' successes and failures set."""

    def observations(self, history: History, space: Space) -> Intervals:
        """The current generation's (or, after a collapse of the trust region, segment's) last ``window``
        intervals: its first round's of the members the cut kept, when their states were scored before it
        (``first_explore: gp``; the reference's data holds the survivors' alone), and every later round's."""
        data = self.all_intervals(history, space)
        start = self.bo_start(history)
        collapse_begins = [start + 1] if start != generation_start(history) else []  # only the last one's counts
        data = data.where(((data.round > start) | ((data.round == start) & data.start_scored))
                          & ~self.carried_across(data, collapse_begins))
        return data.where(np.arange(len(data.rate)) >= len(data.rate) - self.settings.window)

    @staticmethod
    def carried_across(data: Intervals, collapse_begins: list[int]) -> np.ndarray:
        """The intervals of the first round after a trust-region collapse (``collapse_begins``:
        :meth:`collapse_begins`) that a member ran on with its config (not explored): they start from the round the
        collapse ended, where the reference's new ``n_distills`` holds no row of that member (its ``_restart``
        records nothing), so the reference's BO, which reads one ``n_distills``, never sees them; an explored
        member's interval starts at the new trial's row, and counts."""
        return np.isin(data.round, collapse_begins) & ~data.explored

    def all_intervals(self, history: History, space: Space) -> Intervals:
        """Every interval of the history but those of the candidates that a larger round's cut (round 0, a
        restart round) dropped, which have no descendants and the reference never records, and, unless
        ``first_explore`` is ``gp``, those that start at a score taken before their round; each stamped at its end
        or start (:attr:`~pbx.strategies.generational.base.GenerationalSettings.interval_time`)."""
        data = intervals(self.survivors(history), space, len(history.frame))
        if self.settings.interval_time == "end":
            data = replace(data, t=data.end)
        return data if self.scores_start() else data.where(~data.start_scored)

    def targets(self, rates: np.ndarray) -> np.ndarray | None:
        return copula(rates)

    def query_points(self, history: History, data: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With ``interval_time: end``, the authors' (``explore``'s ``dfnewpoint``: the donor's row at the data's
        latest time): each member's interval of the latest round, its end and the score it started from; a member
        without one (its rate unusable) is asked nowhere, and explores as PBT does."""
        if self.settings.interval_time == "start":
            return super().query_points(history, data)
        last = data.where(data.round == int(history.frame["round"].max()))
        return last.member, last.t, last.reward

    def pending_at(self, pending: Pending, donor: int) -> int:
        return donor if self.settings.pending_at == "donor" else pending.start

    def ucb_observed(self) -> bool:
        return self.settings.ucb_std == "observed"

    def fit_bounds(self, inputs: int, one_time: bool = False) -> FitBounds:
        """The bounds of every GP fit of this strategy on ``inputs`` inputs besides time
        (:attr:`~pbx.strategies.generational.base.GenerationalSettings.signal_cap`, ...), started where the
        authors' fit starts (:data:`AUTHORS_START`). The lengthscale and the time decay start in the middle of
        their bounds, as the authors' (GPyTorch's ``Interval`` at raw 0; ``train_gp``'s start ``sqrt(0.01 x 0.5)``
        sets the lengthscale of ``CasmoKernelSane`` itself, which its Matern never reads), the lengthscale's middle
        taken on the Matern's scale, the square root of pbx's. ``one_time``: the data hold one time, where the
        authors fit without their time kernel (``use_time_varying_gp``): the decay held at 0, so a query at another
        time (the GP across generations') is not discounted."""
        s = self.settings
        signal = None if s.signal_cap is None else (s.signal_floor, float(s.signal_cap))
        noise = (s.noise_floor, s.noise_cap)
        lengthscale = (s.lengthscale_floor, s.lengthscale_cap * (inputs if s.lengthscale_per_input else 1))
        start = [value if bounds is None or bounds[0] < value < bounds[1] else math.sqrt(bounds[0] * bounds[1])
                 for value, bounds in zip(AUTHORS_START, (signal, noise))]
        return FitBounds(signal, noise, (start[0], start[1]), lengthscale, (0.0, s.decay_cap),
                         (((math.sqrt(lengthscale[0]) + math.sqrt(lengthscale[1])) / 2) ** 2,
                          0.0 if one_time else s.decay_cap / 2), hold_decay=one_time)

    def fit_gp(self, X: np.ndarray, y: np.ndarray, learn_mean: bool = False, inputs: int | None = None) -> Fitted:
        """A GP fit on ``X`` (time first) in :meth:`fit_bounds` for its ``inputs`` (all columns but time unless
        given), retried with :data:`~pbx.strategies.bayes.gp.FALLBACK_NOISE` held when the free fit fails; raises
        what the retry raises."""
        bounds = self.fit_bounds(X.shape[1] - 1 if inputs is None else inputs, one_time=bool(np.ptp(X[:, 0]) == 0))
        try:
            return fit(X, y, bounds=bounds, learn_mean=learn_mean)
        except (linalg.LinAlgError, FloatingPointError, ValueError):
            return fit(X, y, fixed_noise=FALLBACK_NOISE, bounds=bounds, learn_mean=learn_mean)

    def _posterior(self, X: np.ndarray, y: np.ndarray, n_cat: int) -> Posterior:
        """PB2's, in :meth:`fit_bounds` (the categories are PB2-Rand's: ``n_cat`` is 0)."""
        recent = slice(-self.settings.fit_rows, None)
        fitted = self.fit_gp(X[recent], y[recent])
        return Posterior(fitted.kernel, fitted.noise, X, y, float(np.min(y)) if self.settings.prior_mean == "lowest"
                         else 0.0)

    def kappa(self, rows: int) -> float:
        return self.settings.ucb_kappa

    def region(self, donor_unit: np.ndarray, moved: bool, category_rows: int, history: History) -> Box:
        half = self.trust_length(history) / 2
        return np.clip(donor_unit - half, 0.0, 1.0), np.clip(donor_unit + half, 0.0, 1.0)

    def search(self, acquisition: Acquisition, box: Box, donor_unit: np.ndarray, seeds: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
        if self.settings.tr_search == "climb":
            return super().search(acquisition, box, donor_unit, seeds, rng)
        return perturbed(acquisition, box, donor_unit, rng, steps=STEPS if self.settings.tr_search == "steps" else 0)

    def trust_length(self, history: History) -> float:
        """The trust region's side after the latest round (:meth:`trust_region`)."""
        return self.trust_region(history.frame, generation_start(history))[0]

    def trust_region(self, frame: pd.DataFrame, start: int, stop: int | None = None) -> tuple[float, list[int]]:
        """The trust region's side after the rounds ``start < r < stop`` of a generation that begins at ``start``
        (all of them without ``stop``), and the rounds after which it collapsed.

        Replayed round by round (:attr:`~pbx.strategies.generational.base.GenerationalSettings.tr_success`):
        with ``every`` (the IPBT authors' code, whose rows are all tagged ``'bo'``) every round with a finite score
        is a success, ``start`` included, so the side only grows; with ``explored`` a success is a round in which a
        member whose config an explore chose has the round's best score (the references' test: any such member
        tied with the best counts). A member that skipped its round (:func:`pbx.history.skipped`) carries its
        donor's score beside a config that never trained: not a success. With ``tr_collapse: restart`` a side at
        ``tr_min`` starts again at ``tr_init`` (the original BG-PBT's ``adjust_tr_length(restart=True)``), and the
        BO's data with it (:meth:`bo_start`)."""
        s = self.settings
        trained = ~skipped(frame)
        every = s.tr_success == "every"
        length, wins, losses, collapses = s.tr_init, 0, 0, []
        first = start if every else start + 1  # the authors' rows of a generation's first round are "bo" too
        rows_after = frame[(frame["round"] >= first) & (frame["round"] < (np.inf if stop is None else stop))]
        for r, rows in rows_after.groupby("round", sort=True):
            scores = rows["score"].to_numpy(float)
            explored = every | (rows["explored"].to_numpy(bool) & trained.loc[rows.index].to_numpy(bool))
            won = bool(np.isfinite(scores).any() and (explored & (scores == np.nanmax(scores))).any())
            wins, losses = (wins + 1, 0) if won else (0, losses + 1)
            if wins >= s.succ_tol:
                length, wins = min(length * s.tr_factor, s.tr_max), 0
            elif losses >= s.fail_tol:
                length, losses = max(length / s.tr_factor, s.tr_min), 0
            if s.tr_collapse == "restart" and length <= s.tr_min:
                length, wins, losses = s.tr_init, 0, 0
                collapses.append(int(r))
        return length, collapses

    def bo_start(self, history: History) -> int:
        """The round after which the BO's data begin: the current generation's first, or the last round after
        which its trust region collapsed (:meth:`trust_region`)."""
        start = generation_start(history)
        collapses = self.trust_region(history.frame, start)[1]
        return collapses[-1] if collapses else start

    def segments(self, frame: pd.DataFrame) -> pd.Series:
        """Each round's BO segment, numbered from 0: a new one begins with each generation and after each
        collapse of the trust region (the reference's ``n_distills``, which both advance)."""
        begins = sorted([*self.generation_begins(frame), *self.collapse_begins(frame)])
        rounds = np.arange(int(frame["round"].max()) + 1)
        return pd.Series(np.searchsorted(np.array(begins), rounds, side="right") - 1, index=rounds)

    @staticmethod
    def generation_begins(frame: pd.DataFrame) -> list[int]:
        """Round 0 and every restart round."""
        return [0, *sorted(int(r) for r in frame.loc[frame["restart"], "round"].unique() if r > 0)]

    def collapse_begins(self, frame: pd.DataFrame) -> list[int]:
        """The rounds after which a trust region collapsed, plus one: the first round of each segment a collapse
        began."""
        bounds = self.generation_begins(frame)
        return [r + 1 for begin, stop in zip(bounds, [*bounds[1:], None])
                for r in self.trust_region(frame, begin, stop)[1]]
