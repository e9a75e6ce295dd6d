"""The BO across generations that picks a BG-PBT or IPBT restart's configs (the references' meta data).

A restart (:meth:`~pbx.strategies.generational.base.Generational.restart`) starts a new
generation from configs that what the finished generations learned chooses:

- IPBT's (and BG-PBT's with ``restart_search: local``) GP across generations
  (:meth:`RestartBO.across_generations`): each member of each generation's first
  round that the cut kept is one point, the rate at which its best descendant rose
  over the generation (:meth:`RestartBO.meta_points`); picks by UCB in a box of
  side ``tr_init`` around the best member's config;
- BG-PBT's global restart (:meth:`RestartBO.global_configs`): many random configs
  ranked by UCB on an auxiliary GP fit on each finished generation's predicted best
  (:meth:`RestartBO.auxiliary`), so its picks leave the old bests.

The round within a generation (the cut and exploit, :mod:`pbx.strategies.generational.base`; the trust-region
explore, :mod:`pbx.strategies.generational.trust_region`) is theirs; this module only reads the history it wrote.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import linalg

from pbx.history import History
from pbx.standings import rank_best_first
from pbx.space import Config, Space
from pbx.strategies.bayes.acquisition import Acquisition
from pbx.strategies.bayes.gp import Posterior, Scale, quiet
from pbx.strategies.generational.base import GenerationalSettingsT
from pbx.strategies.generational.trust_region import TrustRegionBO, copula
from pbx.strategies.pb2 import MIN_ROWS
from pbx.strategies.pbt import perturb

logger = logging.getLogger(__name__)

GLOBAL_DRAWS = 10
"""Random configs a global restart ranks, per member of the first population (the reference's ``10 * n_init``)."""
GLOBAL_BETA = 1.96
"""The global restart's UCB weight on the auxiliary GP (the reference's LCB at 1.96)."""


@dataclass(frozen=True)
class Lineage:
    """A member of a generation's first round that the cut kept, as the GP across generations reads it: one
    observation, the rate at which the best of it and its descendants rose from ``before`` over ``end - t``."""

    row: pd.Series
    """Its first-round row (member id, config)."""
    t: float
    """Where its interval starts, in env steps: the generation's start with ``lineage_start: before`` (the
    reference's time), else the first round's end."""
    before: float
    """The score it starts from: the state's score before the first round trained (the history's
    ``start_score``, the reference's ``fitness_before``) with ``lineage_start: before``, else the round's score."""
    peak: float
    """The best score it or a descendant (through the history's parents) reached in the generation, ``before``
    included."""
    end: float
    """The generation's last round's end, in env steps."""


def generation_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's generation: the restart rounds up to and including its own."""
    marks = frame.groupby("round")["restart"].first().astype(int).cumsum()
    return frame["round"].map(marks)


class RestartBO(TrustRegionBO[GenerationalSettingsT]):
    """A generational strategy whose restarts pick their configs by BO across the finished generations."""

    def across_generations(self, history: History, space: Space, count: int, centre: tuple[Config, float],
                           taken: list[Config], rng: np.random.Generator) -> list[Config]:
        """``count`` configs for a new generation, picked one at a time by UCB on a GP across the generations.

        Each member of each generation's first round that the cut kept is one observation (the reference's
        meta data, :meth:`meta_points`):
        its config, the score it had then, and the rate at which its best descendant (through the
        history's parents) rose above that score over the generation. The GP, with pbx's time-varying
        kernel over ``(t, R, continuous)``, is asked at the latest round's time and ``centre``'s score
        (``centre``: a config and the score it is asked at, :meth:`lineage_centre` or :meth:`latest_centre`),
        in the trust region of side ``tr_init`` around the config's values, the picks so far (``taken``
        and each earlier one) pending. With fewer than 3 observations, or a failed fit, the configs are
        drawn from the search space. Categorical values are the centre's, explored as PBT does.
        """
        points = self.meta_points(history, space)
        centre_config, centre_score = centre
        query = (float(history.latest()["steps"].max()), centre_score)
        picks: list[Config] = []
        fitted = self.fit_across(points, query) if space.continuous else None
        for _ in range(count):
            new, _ = perturb(centre_config, space, rng, 0.0, names=space.categorical)
            if fitted is None:
                new |= {name: space.params[name].sample(rng) for name in space.continuous}
            else:
                posterior, scaled = fitted
                pending = np.array([[*scaled, *space.to_unit(c)] for c in [*taken, *picks]])
                acquisition = Acquisition(posterior, scaled, pending.reshape(len(pending), 2 + len(space.continuous)),
                                          self.settings.ucb_kappa, observed=self.ucb_observed())
                unit = space.to_unit(centre_config)
                half = self.settings.tr_init / 2
                box = (np.clip(unit - half, 0.0, 1.0), np.clip(unit + half, 0.0, 1.0))
                try:
                    with quiet():
                        new = space.from_unit(self.search(acquisition, box, unit, unit[None, :], rng), new)
                except (linalg.LinAlgError, FloatingPointError, ValueError) as err:
                    logger.warning("%s: the acquisition across generations failed (%s); drawing from the prior",
                                   self.name, err)
                    new |= {name: space.params[name].sample(rng) for name in space.continuous}
            picks.append(new)
        return picks

    def global_configs(self, history: History, space: Space, count: int, rng: np.random.Generator) -> list[Config]:
        """``count`` configs for a new generation by the reference's global restart (``AwesomeLemon/IPBT``
        ``algo/bgpbt.py`` ``reinit_population_global``, after ``xingchenwan/bgpbt``'s
        ``_generate_initializing_points_ucb``): :data:`GLOBAL_DRAWS` x the first population's size random configs
        from the prior (:meth:`prior`), the best ``count`` by UCB (:data:`GLOBAL_BETA`) on an auxiliary GP
        (:meth:`auxiliary`), best first. Its one point per finished generation makes the configs far from them
        score highest while they are few: the restart leaves the old bests. With no auxiliary GP the first ``count`` draws are taken.
        Categorical values are the draws' own (the auxiliary GP reads the continuous ones)."""
        prior = self.prior(space)
        draws = [prior.sample(rng) for _ in range(GLOBAL_DRAWS * self.initial_size(self.settings, self.pop_size))]
        aux = self.auxiliary(history, space) if space.continuous else None
        if aux is None:
            return draws[:count]
        units = np.array([space.to_unit(c) for c in draws])
        pending = np.zeros((0, 2 + len(space.continuous)))
        try:
            with quiet():
                values, _ = Acquisition(aux, (0.0, 0.0), pending, GLOBAL_BETA)(units)
        except (linalg.LinAlgError, FloatingPointError, ValueError) as err:
            logger.warning("%s: the global restart's auxiliary GP failed (%s); drawing from the prior", self.name, err)
            return draws[:count]
        order = np.argsort(-np.where(np.isfinite(values), values, -np.inf), kind="stable")
        return [draws[int(i)] for i in order[:count]]

    def auxiliary(self, history: History, space: Space) -> Posterior | None:
        """The global restart's auxiliary GP, or None (too little data, a failed fit).

        A GP on the generation that ends now (its last ``window`` intervals, copula targets, pbx's time-varying
        kernel: the reference's ``S_t``) predicts, at each finished generation's own latest time, each of that
        generation's intervals (time and score scaled over the generation itself, as the reference normalises
        each generation's data on its own); the best prediction's config and value are one point. The auxiliary
        GP is fit on these points over the continuous hyperparameters alone (time and score held at 0), its prior
        mean their mean, as the reference's learned constant mean.
        """
        data = self.all_intervals(history, space)
        frame = history.frame
        segment = self.segments(frame)  # the reference's n_distills: generations, and trust-region collapses
        of = segment.loc[data.round].to_numpy(int)
        # as :meth:`observations`: a restart round's intervals only from the scores taken before it
        inside = ~np.isin(data.round, frame.loc[frame["restart"], "round"].unique()) | data.start_scored
        inside &= ~self.carried_across(data, self.collapse_begins(frame))
        fitted = []  # (segment, its intervals, their scaled inputs) for each segment with data
        for g in sorted(set(segment)):
            gen = data.where(inside & (of == g))
            gen = gen.where(np.arange(len(gen.rate)) >= len(gen.rate) - self.settings.window)
            if len(gen.rate):
                X = np.column_stack([Scale.fit(gen.t)(gen.t), Scale.fit(gen.reward)(gen.reward), gen.unit])
                fitted.append((g, gen, X))
        if not fitted or fitted[-1][0] != segment.max():  # S_t learns from the segment that ends now
            return None
        _, last, X_last = fitted[-1]
        y = copula(last.rate)
        try:
            with quiet():
                if y is None:
                    # One rate, or equal ones: the reference's S_t fits them and predicts one value everywhere, so
                    # each segment's point is its first interval (their argmin of equal predictions), all at one
                    # target, and the auxiliary GP's UCB ranks the draws by their distance from the points.
                    inputs, targets = [gen.unit[0] for _, gen, _ in fitted], [0.0] * len(fitted)
                else:
                    surrogate = self._posterior(X_last, y, 0)
                    inputs, targets = [], []
                    for _, gen, X in fitted:
                        query = np.column_stack([np.full(len(X), X[:, 0].max()), X[:, 1:]])
                        mean = surrogate.prior_mean + surrogate.kernel.K(query, surrogate.X) @ surrogate.alpha
                        best = int(np.argmax(mean))
                        inputs.append(gen.unit[best])
                        targets.append(float(mean[best]))
                X_aux = np.column_stack([np.zeros((len(inputs), 2)), np.array(inputs)])
                y_aux = np.array(targets)
                centre = float(np.mean(y_aux))
                fitted = self.fit_gp(X_aux, y_aux - centre, inputs=len(inputs[0]))  # the configs alone vary
                return Posterior(fitted.kernel, fitted.noise, X_aux, y_aux, centre)
        except (linalg.LinAlgError, FloatingPointError, ValueError) as err:
            logger.warning("%s: the global restart's GPs failed (%s); drawing from the prior", self.name, err)
            return None

    def prior(self, space: Space) -> Space:
        """What a restart draws configs "from the prior" from (:attr:`GenerationalSettings.restart_prior`): the
        task's own first draw (:attr:`~pbx.strategies.base.RunContext.prior`), or ``space``."""
        if self.settings.restart_prior == "space" or self.context is None or self.context.prior is None:
            return space
        return self.context.prior

    def lineages(self, history: History) -> list[list[Lineage]]:
        """Each generation's start as the GP across generations reads it, oldest first: a :class:`Lineage` for
        each member of the generation's first round that the cut kept (the reference's meta data holds the cut's
        survivors only), in member order."""
        frame = history.frame
        generations = generation_of(frame)
        before_round = self.settings.lineage_start == "before"
        out = []
        for g in sorted(set(generations)):
            rows = frame[generations == g]
            first = int(rows["round"].min())
            source = {int(m): int(m) for m in rows.loc[rows["round"] == first, "member"]}
            best = {m: -np.inf for m in source.values()}
            for r in sorted(set(rows["round"])):
                now = rows[rows["round"] == r]
                if r > first:
                    source = {int(m): source[int(p)] for m, p in zip(now["member"], now["parent"]) if int(p) in source}
                for m, score in zip(now["member"], now["score"]):
                    if int(m) in source and np.isfinite(score):
                        best[source[int(m)]] = max(best[source[int(m)]], float(score))
            start = rows[rows["round"] == first]
            start = start[start["member"].isin(set(self.cut(start).values()))].sort_values("member")
            began = float(frame.loc[frame["round"] == first - 1, "steps"].max()) if first > 0 else 0.0
            end = float(rows["steps"].max())
            lineages = []
            for _, row in start.iterrows():
                scored = before_round and np.isfinite(row["start_score"])
                before = float(row["start_score"]) if scored else float(row["score"])
                peak = max(best[int(row["member"])], before) if np.isfinite(before) else best[int(row["member"])]
                lineages.append(Lineage(row, began if scored else float(row["steps"]), before, peak, end))
            out.append(lineages)
        return out

    def meta_points(self, history: History, space: Space) -> list[tuple[float, float, np.ndarray, float]]:
        """The GP across generations' observations, ``(t, R, unit config, rate)``: each member of each generation's
        first round that the cut kept (:meth:`across_generations`, :meth:`lineages`)."""
        return [(lin.t, lin.before, space.to_unit(history.config_of(lin.row)),
                 (lin.peak - lin.before) / (lin.end - lin.t))
                for generation in self.lineages(history) for lin in generation
                if lin.end > lin.t and np.isfinite(lin.before) and np.isfinite(lin.peak)]

    def lineage_centre(self, history: History) -> tuple[Config, float]:
        """IPBT's centre for a restart's GP picks (``AwesomeLemon/IPBT`` ``algo/ipbt.py``, ``hps_best``): the config
        the generation that ends now started its best lineage with (the kept member of its first round whose
        descendants reached the highest score; ties to the lowest member id, as the reference's first trial),
        and the score that lineage started from (:class:`Lineage`), where the reference asks its meta GP."""
        generation = self.lineages(history)[-1]
        peaks = np.array([lin.peak for lin in generation])
        if not np.isfinite(peaks).any():
            return self.latest_centre(history)
        best = generation[int(np.argmax(np.where(np.isfinite(peaks), peaks, -np.inf)))]
        return history.config_of(best.row), best.before

    @staticmethod
    def latest_centre(history: History) -> tuple[Config, float]:
        """The latest round's best member's config and score (pbx's earlier centre for a restart's GP picks)."""
        latest = history.latest()
        row = latest.iloc[rank_best_first(latest["score"].to_numpy(float))[0]]
        return history.config_of(row), float(row["score"])

    def fit_across(self, points: list[tuple[float, float, np.ndarray, float]],
                   query: tuple[float, float]) -> tuple[Posterior, tuple[float, float]] | None:
        """The GP across generations and the scaled query point, or None (too few points, all equal, a failure).

        Its prior mean is :attr:`~pbx.strategies.generational.base.GenerationalSettings.across_mean`'s: a constant
        fitted
        with the kernel, as the authors' meta GP (``algo/bgpbt_utils.py`` ``GP``: ``gpytorch.means.ConstantMean``),
        or the lowest target."""
        points = points[-self.settings.window:]
        if len(points) < MIN_ROWS:
            return None
        t = np.array([p[0] for p in points])
        r = np.array([p[1] for p in points])
        y = copula(np.array([p[3] for p in points]))
        if y is None:
            return None
        t_scale, r_scale = Scale.fit(np.append(t, query[0])), Scale.fit(np.append(r, query[1]))
        X = np.column_stack([t_scale(t), r_scale(r), np.array([p[2] for p in points])])
        try:
            with quiet():
                learned = self.settings.across_mean == "learned"
                fitted = self.fit_gp(X, y, learn_mean=learned)
                posterior = Posterior(fitted.kernel, fitted.noise, X, y, fitted.mean if learned else float(np.min(y)))
        except (linalg.LinAlgError, FloatingPointError, ValueError) as err:
            logger.warning("%s: the GP across generations failed (%s); drawing from the prior", self.name, err)
            return None
        return posterior, (float(t_scale(query[0])), float(r_scale(query[1])))
