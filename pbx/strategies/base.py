"""The strategy contract: pure decisions from the history, the space and a seeded RNG.

A strategy never trains, never touches members or files. After each round the
runner calls :meth:`Strategy.decide` and applies the returned decisions; the
MPI runner calls it on one rank and broadcasts the result, so a strategy must
be a pure function of its arguments (plus its immutable settings).

Template method: :meth:`ExploitExplore.decide` does the shared bookkeeping
(exploit pairs from the selection, one decision per member, pending picks of the
round) and calls :meth:`ExploitExplore.explore` for each member that copies. PBT
and PB2 differ in ``explore`` only; baselines (``none``, ``random``) implement
``decide`` directly and keep every member as it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Mapping, TypeVar, cast

import numpy as np
import pandas as pd

from pbx.history import RESULT_ROLE, History
from pbx.plan import Rules
from pbx.space import Config, Space, Value
from pbx.strategies.selection import Selection, Truncation


@dataclass(frozen=True)
class WeightReset:
    """What a member does to the weights it starts the next round from (a restart of the population: IPBT).

    ``shrink_perturb`` (Ash & Adams 2020): each weight becomes ``shrink * w + perturb * w0``, ``w0`` the same
    weight of a freshly initialised network; ``reinit``: the freshly initialised network alone. The fresh
    network, and any other randomness of the reset, is drawn from ``seed`` (the strategy draws it from the
    round's generator, so a resume and the MPI runner reset alike). The optimizer's state (Adam's moments) stays,
    as the reference's restart changes only the checkpoint's ``model_state_dict``, unless ``clear_optimizer``.
    """

    kind: str
    seed: int
    shrink: float = 1.0
    perturb: float = 0.0
    clear_optimizer: bool = False
    """Whether the optimizer's state starts afresh too (pbx's earlier restart)."""


RESET_KINDS = ("shrink_perturb", "reinit")


@dataclass(frozen=True)
class Decision:
    """What one member does next round.

    ``donor == member`` and ``explored`` false means keep going unchanged.
    Otherwise the member loads ``donor``'s checkpoint (when different from
    itself) and continues with ``config``. ``ops`` say what changed, readably
    (``"lr * 1.2"``, ``"aug resample"``), for the round line and lineage plots.
    ``info`` holds the strategy's reasons as numbers (PB2: the GP's fitted
    lengthscale, time decay and noise, the pick's UCB value); the runner writes
    it to the run's ``strategy.csv`` and TensorBoard, so a user can see why a
    config was chosen.
    """

    member: int
    donor: int
    config: Mapping[str, Value]
    ops: tuple[str, ...] = ()
    explored: bool = False
    info: Mapping[str, float] = field(default_factory=dict)
    restart: bool = False
    """Whether the next round begins a new generation (IPBT, BG-PBT): the history marks it; a strategy whose
    round length depends on restarts (:meth:`Strategy.round_growth`) counts it. Every decision of a round says
    the same."""
    reset: WeightReset | None = None
    """What the member does to its weights after loading the donor's (None: they are the donor's as they are)."""

    @property
    def copies(self) -> bool:
        return self.donor != self.member

    @property
    def changes(self) -> bool:
        """Whether the member's state or config changes: it copies, explores or resets its weights."""
        return self.copies or self.explored or self.reset is not None


@dataclass
class StrategySettings:
    """Settings shared by every strategy (the ``strategy`` section of ``config.yaml``)."""


SettingsT = TypeVar("SettingsT", bound=StrategySettings)
"""A strategy's settings class: the type its settings, and the settings its classmethods take, have."""


@dataclass(frozen=True)
class RunContext:
    """What a strategy may know of the run beyond the history: its planned length and population.

    Given explicitly (:meth:`pbx.config.RunConfig.build_strategy`), so ``decide`` stays a
    function of its arguments and the strategy's construction. EXP3's exploration and
    share rates need it (:mod:`pbx.strategies.bayes.exp3`), and FIRE its members' roles.
    """

    rounds: int
    """Rounds the run is planned to last (a resume that extends ``max_budget`` changes it from then on)."""
    pop_size: int
    roles: tuple[str, ...] = ()
    """Each member's role (:meth:`Strategy.roles`), which the runner writes to every history row; empty: every
    member is a result (:data:`pbx.history.RESULT_ROLE`)."""
    rules: Rules | None = None
    """What fixes the run's rounds (:class:`pbx.plan.Rules`), which with the history's restart marks give the
    plan: how much of the budget is left (IPBT restarts only while a restart round fits)."""
    prior: Space | None = None
    """What a restart draws configs "from the prior" from (:meth:`pbx.members.Member.prior`: the task's own first
    draw where it has one); None: the search space."""

    def role(self, member: int) -> str:
        return self.roles[member] if self.roles else RESULT_ROLE


class Strategy(ABC, Generic[SettingsT]):
    """What every strategy has: a name, settings, a selection rule, starting configs and ``decide``.

    Generic in its settings (``class PBT(ExploitExplore[PBTSettings])``), so a hook that reads them
    (:meth:`validate`, :meth:`roles`, ...) takes the strategy's own settings class."""

    name: ClassVar[str]
    """The ``--search`` name."""
    settings_cls: ClassVar[type[StrategySettings]] = StrategySettings
    resets_weights: ClassVar[bool] = False
    """Whether its decisions re-make weights (:attr:`Decision.reset`): a run refuses a member that cannot
    (:attr:`pbx.members.Member.resets_weights`)."""

    settings: SettingsT

    def __init__(self, settings: SettingsT | None = None, selection: Selection | None = None,
                 context: RunContext | None = None) -> None:
        # settings_cls is SettingsT's class (a ClassVar cannot name a type variable)
        self.settings = settings if settings is not None else cast(SettingsT, self.settings_cls())
        self.selection = selection if selection is not None else Truncation()
        self.context = context
        """None outside a run (a strategy on a synthetic history); a setting that needs it says so."""

    @classmethod
    def validate(cls, settings: SettingsT, space: Space) -> None:
        """Raise :class:`~pbx.errors.UsageError` for settings that cannot work on ``space``.

        Called once when a run's config is resolved, before anything trains.
        """

    @classmethod
    def roles(cls, settings: SettingsT, pop_size: int) -> tuple[str, ...]:
        """Each member's role in a population of ``pop_size``; by default every member is a result.

        Called when a run's config is resolved, so it raises :class:`~pbx.errors.UsageError` for a
        population the settings cannot divide (FIRE's sub-populations and evaluators).
        """
        return (RESULT_ROLE,) * pop_size

    @classmethod
    def initial_size(cls, settings: SettingsT, pop_size: int) -> int:
        """Members the run starts with: ``pop_size`` by default; more for a strategy that trains a larger first
        population for one round and keeps its best ``pop_size`` (BG-PBT x3, IPBT x2): the members from
        ``pop_size`` on have a row in round 0 only, and ``decide`` after round 0 must copy the kept ones into
        members ``0 .. pop_size - 1``."""
        return pop_size

    @classmethod
    def restart_size(cls, settings: SettingsT, pop_size: int) -> int:
        """Members a restart round trains (:attr:`Decision.restart`): ``pop_size`` by default; IPBT trains
        :meth:`initial_size` candidates, then keeps the best ``pop_size`` as after round 0. The candidates
        past ``pop_size`` are the decisions' members ``pop_size ..``: the runner builds them for the round."""
        return pop_size

    @classmethod
    def run_defaults(cls) -> dict[str, object]:
        """Run settings this strategy's reference uses unless the user says otherwise (BG-PBT's quantile)."""
        return {}

    @classmethod
    def round_growth(cls, settings: SettingsT) -> float:
        """The factor a round's length takes at each restart of the population (:attr:`pbx.plan.Rules.growth`):
        1 by default, ``t_ready`` whatever the restarts."""
        return 1.0

    @classmethod
    def last_rounds(cls, settings: SettingsT) -> str:
        """How the plan meets the budget's end (:data:`pbx.plan.TAILS`): ``cut`` by default, the last round cut
        to what is left."""
        return "cut"

    def scores_start(self) -> bool:
        """Whether the runner scores each member's state before a generation's first round trains (round 0, a
        restart round: the history's ``start_score``, :meth:`pbx.members.Member.score_state`), one evaluation
        per member of the round. No by default; BG-PBT's and IPBT's GP learns the first round's improvement
        from it (:attr:`~pbx.strategies.generational.base.GenerationalSettings.first_explore`)."""
        return False

    def initial_configs(self, space: Space, pop_size: int, rng: np.random.Generator) -> list[Config]:
        """Each member's starting config (``pop_size``: :meth:`initial_size` members); by default independent
        draws from the prior."""
        return [space.sample(rng) for _ in range(pop_size)]

    @abstractmethod
    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        """One decision per member of the latest round, in member order.

        Called by the runner after every finished round (never after the last).
        Must not mutate ``history`` or ``self``; all randomness comes from ``rng``.
        """


def keep_all(history: History) -> list[Decision]:
    """Every member of the latest round goes on unchanged."""
    latest = history.latest()
    return [Decision(int(row["member"]), int(row["member"]), history.config_of(row)) for _, row in latest.iterrows()]


@dataclass(frozen=True)
class Pending:
    """A config that will run next round, from the end-of-round state of member ``start`` (its time and score)."""

    start: int
    config: Config


Explored = tuple[Config, list[str], dict[str, float]]
"""What :meth:`ExploitExplore.explore` returns: the new config, readable operations, and its reasons (numbers)."""


@dataclass
class RoundContext:
    """What every :meth:`ExploitExplore.explore` call of one round shares."""

    history: History
    """Every finished round."""
    space: Space
    """The search space (bounds, scales)."""
    fitted: Any
    """What :meth:`ExploitExplore.prepare` returned (PB2: the round's GP); None when it fitted nothing."""
    running: list[Pending] = field(default_factory=list)
    """The members that keep their state and config next round, each from its own time and score."""
    picks: list[Pending] = field(default_factory=list)
    """Configs already chosen for recipients this round, in order, each from its donor's time and score."""

    @property
    def recipient(self) -> int:
        """The position among this round's recipients of the member being explored (0 for the first)."""
        return len(self.picks)


class ExploitExplore(Strategy[SettingsT]):
    """The selection's exploit (with its guards), then a subclass-specific explore step for each member that
    copied, or that explores its own config because it tied with its donor."""

    def decide(self, history: History, space: Space, rng: np.random.Generator) -> list[Decision]:
        latest = history.latest()
        return self.decisions(history, space, self.exploit(latest, latest["score"].to_numpy(dtype=float), rng), rng)

    def exploit(self, rows: pd.DataFrame, scores: np.ndarray, rng: np.random.Generator) -> dict[int, int]:
        """``{recipient: donor}`` member ids among ``rows`` (one per member) ranked by ``scores``: the
        selection's pairs once every member is past ``burn_in``; a recipient mapped to itself explores its
        own config."""
        if not self.selection.rules.ready(rows["steps"].to_numpy()):
            return {}
        members = [int(m) for m in rows["member"]]
        # The selection works on positions in ``rows``; map them to member ids once, here.
        return {members[r]: members[d] for r, d in self.selection.pairs(scores, rng).items()}

    def decisions(self, history: History, space: Space, pairs: Mapping[int, int], rng: np.random.Generator,
                  fixed: Mapping[int, Decision] | None = None,
                  sources: Mapping[int, int] | None = None) -> list[Decision]:
        """One decision per member: :meth:`explore` for each recipient in ``pairs`` (in member order), the
        ``fixed`` decisions as given, and every other member going on as it is.

        ``sources`` maps each member to the latest round's member whose state it goes on from (default: the
        latest round's members, each itself); BG-PBT's and IPBT's cut of a larger population maps the population's
        places to the candidates it kept, and a donor in ``pairs`` is a place, standing for its candidate."""
        fixed = fixed or {}
        latest = history.latest()
        configs = {int(m): history.config_of(row) for m, (_, row) in zip(latest["member"], latest.iterrows())}
        sources = sources if sources is not None else {m: m for m in configs}
        round_ = RoundContext(history, space, self.prepare(history, space, len(pairs), rng) if pairs else None,
                              running=[Pending(s, configs[s]) for m, s in sources.items() if m not in pairs])
        decisions = []
        for m, source in sources.items():
            if m in fixed:
                decisions.append(fixed[m])
            elif m not in pairs:
                ops = () if source == m else ("kept: among the best of the larger population",)
                decisions.append(Decision(m, source, configs[source], ops))
            else:
                donor = sources[pairs[m]]
                new, ops, info = self.explore(donor, configs[donor], round_, rng)
                round_.picks.append(Pending(donor, new))
                ops = ["tied", *ops] if donor == source else ops
                decisions.append(Decision(m, donor, new, tuple(ops), explored=True, info=info))
        return decisions

    def prepare(self, history: History, space: Space, recipients: int, rng: np.random.Generator) -> Any:
        """Called once per :meth:`decide` with ``recipients`` > 0 members to explore, before any ``explore``:
        fit what the round's picks share (PB2: its GP), or draw what they are given together (EXP3's
        distinct categories, from ``rng``)."""
        return None

    @abstractmethod
    def explore(self, donor: int, donor_config: Config, round_: RoundContext, rng: np.random.Generator) -> Explored:
        """A new config for a member that copied ``donor``.

        Args:
            donor: the member copied from.
            donor_config: the donor's config in the latest round.
            round_: the history, the space, the running members, this round's earlier picks and
                what :meth:`prepare` fitted.
            rng: the round's generator; the only source of randomness.

        Returns:
            The new config (inside the space's bounds), readable operations, and the reasons
            for the pick as numbers (``{}`` when there are none), which end up in ``strategy.csv``.
        """
