"""The member contract: what a population trains.

A member owns one learner and everything it needs to continue (for PPO: the
policy, the optimizer, its envs and their normalisation statistics). Runners
call, per round: :meth:`Member.train` (for the steps to the round's planned end,
:meth:`Member.steps_trained` of them; not at all for a member already at or past
it: :meth:`pbx.config.RunConfig.steps_due`), optionally :meth:`Member.evaluate`,
:meth:`Member.save`; and for an exploit :meth:`Member.load` of the donor's file
(``own=False``) followed by :meth:`Member.apply` of the new config. A resume
loads each member's own file (``own=True``).

A member whose numbers go non-finite raises :class:`Diverged` from ``train``
after putting its learner back as it was before the call; the runner records
a NaN score and the run goes on (the selection replaces NaN members).

A new agent is one file under ``pbx/members/`` with a subclass of
:class:`Member` registered in :mod:`pbx.members`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pbx.space import Config, Space

if TYPE_CHECKING:
    from pbx.envs import EnvSettings


class Diverged(RuntimeError):
    """Raised by :meth:`Member.train` when the learner's numbers went non-finite (loss, weights, logits).

    Before raising, the member restores the learner state it had when ``train``
    was called (its last good state) and counts the steps it took, so it can be
    saved and replaced like any other member with a NaN score.
    """


class Stopped(Exception):
    """Raised by :meth:`Member.train` (of a member that :attr:`~Member.stops_inside`) where its ``stop`` said so:
    the member is between two rollouts, holding the round in progress, whole and ready to be saved."""


@dataclass
class MemberSettings:
    """Settings of a member type (the ``member`` section of ``config.yaml``), fixed for the whole run."""


@dataclass(frozen=True)
class MemberContext:
    """What the runner tells a member about where it lives.

    Args:
        env: the ``--env`` name.
        index: the member's index in the population.
        seed: the member's own seed (derived from the run seed and ``index``).
        device: the ``--device`` value: ``"auto"``, ``"cpu"`` or ``"cuda"`` (members resolve ``auto``).
        log_dir: a folder of the member's own for learner diagnostics (TensorBoard), or None.
        local_rank: the index of the member's process among the processes on its machine (MPI
            ranks); a member on a GPU takes GPU ``local_rank`` modulo the machine's GPU count.
        env_settings: how the env is built (its task family's settings, the run's ``env_settings``); None: the
            family's defaults, or an env no family holds (a toy's).
    """

    env: str
    index: int
    seed: int
    device: str = "auto"
    log_dir: Path | None = None
    local_rank: int = 0
    env_settings: EnvSettings | None = None


class Member(ABC):
    settings_cls: ClassVar[type[MemberSettings]] = MemberSettings
    default_space: ClassVar[str]
    """The file under ``search_spaces/`` used when the run names no ``space``."""

    @classmethod
    @abstractmethod
    def run_defaults(cls, env: str) -> dict[str, object]:
        """Run settings for ``env`` unless the user says otherwise (``t_ready``, ``max_budget``)."""

    @classmethod
    def describe(cls, settings: MemberSettings) -> str:
        """A short human name of what trains with ``settings``, for the run's start line (``"toy"``).

        The default is the class name less ``Member``, lower case; a member whose settings change
        what is trained says so (PPO names its loss, ``"PPO (reference loss)"``), so two runs that
        train different things never read alike.
        """
        return cls.__name__.removesuffix("Member").lower() or cls.__name__

    @classmethod
    def setting_defaults(cls, env: str) -> dict[str, object]:
        """Member settings for ``env`` unless the user says otherwise (above the settings' own defaults)."""
        return {}

    @classmethod
    def space_file(cls, env: str) -> str:
        """The search-space file (under ``search_spaces/``) for ``env`` when the run names none."""
        return cls.default_space

    @classmethod
    def plan_chunk(cls, settings: MemberSettings, space: Space) -> int | None:
        """The env steps :meth:`train` trains whole with every config from ``space`` (PPO: a rollout), by which
        the plan rounds a round's length (:attr:`pbx.plan.Rules.chunk`); None: it trains what it is asked."""
        return None

    @classmethod
    def steps_trained(cls, settings: MemberSettings, config: Config, steps: int) -> int:
        """The env steps :meth:`train` really trains when asked for ``steps`` with ``config`` (PPO: whole
        rollouts of the config's length); a replay checks a lineage's step counts with it."""
        return steps

    @classmethod
    def feasible(cls, config: Config, settings: MemberSettings, space: Space) -> tuple[Config, list[str]]:
        """``config`` moved to the nearest one this member can train, and what was moved (decision operations).

        Called on every starting config and every decision's config, so a strategy's pick that breaks a
        constraint between hyperparameters (PPO: the minibatch must divide the rollout) is repaired and
        recorded, never refused mid-run. By default every config in the space can be trained.
        """
        return dict(config), []

    @classmethod
    def prior(cls, settings: MemberSettings, space: Space) -> Space:
        """What a new population's configs are drawn from: ``space``, unless the task draws its first population
        from a distribution of its own (PBT-Zoo's ``init_sample``: the toys' lr in [0.9, 1.1]).

        BG-PBT's and IPBT's restarts draw their configs "from the prior" through it, as the references' restarts
        draw through the task's initial sample (``search_space.sample(task, True)``); the GP's searches still
        work on ``space``.
        """
        return space

    @classmethod
    def resume_note(cls, env: str) -> str:
        """What a resume on ``env`` cannot restore exactly, for the run's start line ("": it restores everything)."""
        return ""

    @classmethod
    def validate(cls, space: Space, settings: MemberSettings, device: str) -> None:
        """Raise :class:`UsageError` for a space, settings or device this member cannot train with.

        Called once by the runner before any member is built, so bad input fails in
        a second, not after the first round.
        """

    @classmethod
    def validate_env(cls, env: str, settings: MemberSettings, env_settings: EnvSettings | None = None) -> None:
        """Raise :class:`UsageError` for settings this member cannot train with on ``env`` built with
        ``env_settings`` (a setting of an image policy on vector observations). Called by the run's config with
        :meth:`validate`, before the run folder exists, so such a refusal writes nothing; by default every
        setting suits every env."""

    @classmethod
    def check_population(cls, env: str, pop_size: int, settings: MemberSettings,
                         env_settings: EnvSettings | None = None) -> None:
        """Raise :class:`UsageError` for a population this member type cannot hold on one machine (an off-policy
        agent's replay buffers, allocated whole per member, must fit in memory). By default any population can."""

    def __init__(self, context: MemberContext, settings: MemberSettings, config: Config) -> None:
        """Build a fresh learner that will train with ``config`` (call :meth:`apply` at the end)."""
        self.context = context
        self.settings = settings
        self.steps = 0
        """Env steps trained so far; part of the checkpoint, so a copy inherits the donor's count."""

    @property
    @abstractmethod
    def config(self) -> Config:
        """The hyperparameters in use now (what the runner records in the history)."""

    stops_inside: ClassVar[bool] = False
    """Whether :meth:`train` takes ``stop`` and can stop inside a round (see there); a member without it trains
    its round whole and a run stopped meanwhile stops after it (the toys: a round is microseconds)."""

    @abstractmethod
    def train(self, steps: int) -> float:
        """Train for ``steps`` env steps and return the train score of this stretch (NaN if none).

        The score covers only what the member did in this call (for PPO: episodes that
        started and ended inside it), so a member that just copied a donor is not scored
        on play of the policy it threw away. Raises :class:`Diverged` (see there).

        A member with :attr:`stops_inside` takes ``train(steps, stop=...)``: it calls ``stop()`` at each
        boundary where it may stop (PPO: before each rollout), and where that says so it raises
        :class:`Stopped`, holding the round in progress: :meth:`save` writes it, :meth:`load` (``own``) restores
        it, and the next ``train`` goes on with it to the round's end (``steps`` is then ignored), scoring the
        whole round as one call would have.
        """

    def curve(self) -> list[tuple[int, float]]:
        """The scores the last :meth:`train` took on its way, as ``(steps, score)`` in order, ``steps`` the
        member's env steps when each was taken (the toys: after every step; PPO: after every rollout in which
        an episode ended). FIRE compares improvement rates on these points and reports draw them; the runner
        stores them beside the history (``curves.csv``). Empty (the default, and after :class:`Diverged`):
        the member's curve has the round's score as its only point."""
        return []

    def score_note(self) -> str:
        """Why the last :meth:`train` returned NaN, for the round line (``""``: no reason to give)."""
        return ""

    def recent_score(self) -> float:
        """The mean return of the member's last 100 finished training episodes, whenever each started (NaN:
        none yet, or a member without episodes, the default): train-procgen's ``eprewmean``, read after
        :meth:`train` for the history's ``score100``. A comparison number only: unlike :meth:`train`'s score it
        mixes in episodes of earlier rounds, so it is never what selection reads."""
        return math.nan

    def score_state(self, seed: int) -> float:
        """The train score of the member's state as it is, without training it (NaN: the member cannot tell,
        the default): what :meth:`train` would have scored this state on, taken before a generation's first
        round so that the round's improvement has a start (BG-PBT's and IPBT's GP: the history's
        ``start_score``). ``seed`` is the round's, the same for every member. Scoring never changes what
        training does next."""
        return math.nan

    @abstractmethod
    def evaluate(self, seed: int) -> float:
        """Score on held-out conditions (test levels for ProcGen); NaN if the member has none.

        ``seed`` is the round's evaluation seed, the same for every member of a round,
        so members are tested on the same levels and their test scores compare
        (common random numbers). Evaluating never changes what training does next.
        """

    @abstractmethod
    def apply(self, config: Config) -> None:
        """Use ``config`` from now on; must reach every place the learner reads a hyperparameter."""

    @abstractmethod
    def save(self, path: Path) -> None:
        """Write everything needed to continue bit for bit into one file at ``path``."""

    @abstractmethod
    def load(self, path: Path, *, own: bool) -> None:
        """Restore the state written by :meth:`save`: this member's own (resume), or a donor's (exploit).

        The caller says which: a member index inside the file cannot tell (an MPI rank,
        a schedule replay or a transfer from another run re-index members).
        ``own=True`` restores everything, so training continues bit for bit.
        ``own=False`` copies the learner (weights, optimizer, normalisation statistics,
        step count, config) while the member keeps its own envs and random streams, so
        it does not replay the donor's next rollout. The runner calls :meth:`apply`
        afterwards when the decision changes the config. A file that cannot be read
        raises :class:`~pbx.errors.UsageError` naming it.
        """

    def load_experience(self, path: Path) -> None:
        """After :meth:`load` of a donor's checkpoint ``path`` (``own=False``), take the experience the donor
        learns from besides its learner (an off-policy agent's replay buffer) as this member's own.

        The runner calls it for a member built to take a donor's place (an IPBT restart's candidate past
        ``pop_size``), which has no experience of its own: it starts at the donor's step count, past any
        warm-up, beside candidates that go on from their members with theirs, and the cut ranks them together,
        so it starts with the data the donor collected, as the reference's candidate is a copy of the donor's
        whole checkpoint file. An exploit's recipient keeps its own (``copy_buffer`` aside). By default nothing:
        a member that learns only from what it collects within a round has no such experience.
        """

    @classmethod
    def experience_files(cls, path: Path) -> list[Path]:
        """The files beside the checkpoint ``path`` that :meth:`load_experience` of it reads (the MPI runner sends
        them with the checkpoint to a rank that builds such a member); none by default."""
        return []

    resets_weights: ClassVar[bool] = False
    """Whether :meth:`reset_weights` is there (strategies that restart the population need it: IPBT)."""

    def reset_weights(self, kind: str, seed: int, shrink: float = 1.0, perturb: float = 0.0, *,
                      clear_optimizer: bool = False) -> None:
        """Re-make the weights for a restart of the population (after any copy of a donor's state).

        ``kind``: ``shrink_perturb``, each weight ``shrink * w + perturb * w0``, or ``reinit``, ``w0`` alone,
        where ``w0`` is the same weight of a freshly initialised learner drawn from ``seed`` (Ash & Adams
        2020). The step count stays: the env steps trained so far are spent budget, and so do the optimizer's
        state (as IPBT's reference keeps it) and the normalisation statistics; ``clear_optimizer`` starts the
        optimizer's state afresh as a new learner's (the runner passes it only when set, so a member written
        to the four-argument form keeps working). Only members with :attr:`resets_weights` have it.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot reset its weights")

    def close(self) -> None:
        """Release envs, threads and files."""
