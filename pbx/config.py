"""Run configuration: typed settings, their layers, and the resolved ``config.yaml``.

A run's config has three sections, each a dataclass, and a fourth for an env a task family holds:

- ``run``: :class:`RunSettings`, what every run has (env, search, population, budget);
- ``env_settings``: the settings of the env's task family (ProcGen's ``num_levels``, Atari's ``frame_skip``,
  a gymnasium id's ``env_kwargs``; :mod:`pbx.env_section`), absent for a toy's env;
- ``strategy``: the settings class of the chosen ``--search`` (e.g. PBT's ``resample_prob``);
- ``member``: the settings class of the member that trains ``--env`` (e.g. PPO's ``n_envs``).

Layers, later wins: dataclass defaults < the member's ``run_defaults`` and
``setting_defaults`` < an
experiment YAML (``--config``) < command-line flags < ``-m key=value``
overrides. A ``-m`` key is a field name (``pop_size``, ``n_envs``) or a dotted
``section.field``. The resolved config, with the search space, is written to the
run folder, and ``--config`` accepts that file back, so a run can be rebuilt
from its folder. Input never goes unused: a member setting of a hyperparameter
the space holds is refused (each member takes it from the space, and the
``member`` section leaves it out), and a space named by a flag or ``-m``
replaces the inline space of a resolved config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import yaml

from pbx import env_section
from pbx.config_input import Input, merge, route
from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.fingerprint import PROVENANCE, run_record
from pbx.settings import MAX_MEMBERS, RunSettings, build, field_names
from pbx.history import RESULT_ROLE
from pbx.plan import MAX_ROUNDS, Rules
from pbx.members import Member, MemberSettings, member_class, space_file
from pbx.space import Config, Space
from pbx.strategies import (ExploitExplore, ExploitRules, RunContext, Selection, Strategy, StrategySettings,
                            canonical_search, make_selection, strategy_class)
from pbx.strategies.bayes.categorical import BANDITS, CAT_EXPS, canonical_cat_exp

if TYPE_CHECKING:
    from pbx.envs import EnvSettings

SEARCH_SPACES = Path(__file__).resolve().parent / "search_spaces"
"""The shipped search spaces: package data, so a non-editable install finds them too."""


@dataclass
class RunConfig:
    """A fully resolved run: settings of all three sections plus the search space."""

    run: RunSettings
    strategy: StrategySettings
    member: MemberSettings
    space: Space
    space_source: str
    """Where the space was read from (for the record; the space itself is stored in full)."""
    member_cls: type[Member] = field(repr=False)
    strategy_cls: type[Strategy] = field(repr=False)
    env_settings: EnvSettings | None = None
    """The env's task-family settings (:class:`pbx.envs.EnvSettings`); None for an env no family holds (a toy's)."""
    provenance: dict[str, Any] | None = None
    """What started the run (:func:`pbx.fingerprint.run_record`: the pbx, the env's own code, the library
    versions), written as config.yaml's ``pbx`` section: :func:`resolve` gives this process's, a resume the
    stored record (None: a folder written before pbx recorded itself)."""

    @cached_property
    def rules(self) -> Rules:
        """What fixes the rounds (:mod:`pbx.plan`): the budget, the strategy's round lengths and sizes, and the
        chunk the member trains whole, read once from the settings. The history's restart marks give the plan:
        ``rules.plan(marks)`` for the rounds it holds, ``rules.planned(marks)`` for the whole run as far as it is
        known (a BG-PBT or IPBT run's larger first round takes more of the budget, so it has fewer rounds than
        ``max_budget / t_ready``)."""
        return rules(self.run, self.strategy_cls, self.strategy, self.member_cls.plan_chunk(self.member, self.space))

    def steps_due(self, steps: int, until: int, config: Config) -> int:
        """The env steps a member at ``steps`` with ``config`` trains in a round whose planned end is ``until``
        (:meth:`pbx.plan.Plan.trained_end`): whole chunks (PPO: rollouts) to the boundary nearest ``until``, at
        least one; none, so that the member skips the round, when it is already at or past ``until``.

        The chunk at least is what SB3 can train, but given to a member already at the plan it ends the member
        a whole chunk past it: a rollout longer than ``t_ready`` (the PB2 paper's space allows 60,000 steps
        against its 50,000-step interval) ran ahead by (rollout - ``t_ready``) every round, without bound. With
        the skip, a member ends every round, the last one included, less than one chunk (of the length its
        state last trained with) past the plan and at most half a chunk short of it; a member behind the plan
        always trains; and a chunk longer than ``t_ready`` skips about the share (chunk - ``t_ready``) / chunk
        of the rounds. (Skipping only a member a whole chunk past the plan would let one end almost two chunks
        past it.) The decision reads the member's steps and config and the plan, which the history and the
        checkpoint hold, so a resume, the MPI runner and a replay take it alike.
        """
        left = until - steps
        return self.member_cls.steps_trained(self.member, config, left) if left > 0 else 0

    @property
    def init_size(self) -> int:
        """Members the run starts with (:meth:`pbx.strategies.Strategy.initial_size`)."""
        return self.strategy_cls.initial_size(self.strategy, self.run.pop_size)

    @property
    def most_members(self) -> int:
        """The most members any round trains: ids ``0 .. most_members - 1`` (a larger first or restart round)."""
        return max(self.init_size, self.rules.size(1, True), self.run.pop_size)

    def build_strategy(self) -> Strategy:
        """The run's strategy, told the run's planned length, population and roles (EXP3's rates, FIRE)."""
        return self.strategy_cls(self.strategy, selection(self.run),
                                 RunContext(rounds=self.rules.fixed_rounds, pop_size=self.run.pop_size,
                                            roles=self.roles(), rules=self.rules,
                                            prior=self.member_cls.prior(self.member, self.space)))

    def roles(self) -> tuple[str, ...]:
        """Each member's role, as the history records it (:meth:`pbx.strategies.Strategy.roles`); a first
        population larger than the kept one (:attr:`init_size`) makes its extra members results too."""
        roles = self.strategy_cls.roles(self.strategy, self.run.pop_size)
        return roles + (RESULT_ROLE,) * (self.most_members - len(roles))

    def to_dict(self) -> dict[str, Any]:
        run = dataclasses.asdict(self.run)
        run["space"] = self.space_source
        # A searched hyperparameter's member setting is never used: the space records what the members train with.
        member = {k: v for k, v in dataclasses.asdict(self.member).items() if k not in self.space.params}
        env = {} if self.env_settings is None else {env_section.SECTION: dataclasses.asdict(self.env_settings)}
        return {
            **({PROVENANCE: dict(self.provenance)} if self.provenance is not None else {}),
            "run": run,
            **env,
            "strategy": dataclasses.asdict(self.strategy),
            "member": member,
            "space": self.space.to_dict(),
        }

    def write(self, path: Path) -> None:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        durable_write(path, lambda tmp: tmp.write_text(text))


def resolve(layers: Sequence[Mapping[str, Any]], overrides: Sequence[str] = (), builds: int | None = None) -> RunConfig:
    """Merge config layers (lowest first) and ``-m key=value`` overrides into a validated RunConfig.

    Each layer is a mapping with optional ``run``/``strategy``/``member``/``space``
    sections and/or flat ``field: value`` keys. A ``pbx`` section (a run's record of the pbx
    that started it) is accepted and not used: the result records this process's pbx, and a
    resume puts the stored record back. ``builds``: the members the caller will build at once,
    whose memory (an off-policy agent's replay buffer) must be there; None: the run's population,
    as training builds it (``pbx.evaluate`` and ``pbx.export`` build one member).
    """
    given = merge(layers, overrides)
    choice = _choose(given)
    cfg = _build(_sections(given, choice), choice, given.member_input)
    _check_rounds(cfg)
    _check_population(cfg, choice.env, builds)
    return cfg


class _Choice(NamedTuple):
    """What the input picks before any section is built: the env, search, space and the classes they name."""

    env: str
    search: str
    run_raw: dict[str, Any]
    """The ``run`` section's raw values over the member's and the strategy's run defaults."""
    env_settings: EnvSettings | None
    """The env's settings (:func:`pbx.env_section.env_settings`)."""
    strategy_cls: type[Strategy]
    member_cls: type[Member]
    space_source: str
    space: Space


def _choose(given: Input) -> _Choice:
    """The env, search and space, and from them the strategy and member classes, whose defaults then fill the
    ``run`` section under the input.

    The space comes first: it decides the member (DrAC's PPO when it holds an augmentation), and a bandit's
    --cat_exp on a ProcGen game with no space named takes PB2-Mix's space; random and fixed (the PBT spellings)
    train what leaving --cat_exp out trains. A resolved config.yaml carries its space inline; a space named by a
    flag or -m replaces it.
    """
    flat = given.flat
    run_fields = field_names(RunSettings)
    run_raw = {**given.merged["run"], **{k: v for k, v in flat.items() if k in run_fields}}
    env = str(run_raw.get("env", RunSettings.env))
    algo = run_raw["algo"] = str(run_raw.get("algo", RunSettings.algo)).lower()
    search = canonical_search(run_raw.get("search", RunSettings.search))
    run_raw["search"] = search
    strat_cls = strategy_class(search)
    cat_exp = flat.get("strategy.cat_exp", flat.get("cat_exp", given.merged["strategy"].get("cat_exp")))
    bandit = cat_exp is not None and canonical_cat_exp(cat_exp, CAT_EXPS, search) in BANDITS
    # before the member is chosen: they may change the env's spaces (a gymnasium id's env_kwargs)
    env_settings = env_section.env_settings(env, given.merged[env_section.SECTION], given.flat, given.moved)
    space_source, space = _load_space(flat.get("run.space", run_raw.get("space")),
                                      lambda: space_file(env, bandit, algo, env_settings),
                                      None if given.named_space else given.space_spec)
    member_cls = member_class(env, [*space.names, *given.member_input], algo, env_settings)
    run_raw = {**member_cls.run_defaults(env), **strat_cls.run_defaults(), **run_raw}
    return _Choice(env, search, run_raw, env_settings, strat_cls, member_cls, space_source, space)


def _sections(given: Input, choice: _Choice) -> dict[str, dict[str, Any]]:
    """Each section's raw settings: its defaults, its own keys, then each flat key routed to the one section
    that has it (:func:`pbx.config_input.route`); a key no section has is refused with the section's valid names."""
    sections = {"run": RunSettings, "strategy": choice.strategy_cls.settings_cls,
                "member": choice.member_cls.settings_cls}
    routed = {**sections, **({} if choice.env_settings is None else {env_section.SECTION: type(choice.env_settings)})}
    raw = {"run": choice.run_raw, "strategy": dict(given.merged["strategy"]),
           "member": {**choice.member_cls.setting_defaults(choice.env), **given.merged["member"]}}
    for key, value in given.flat.items():
        section, name = route(key, routed, choice.search, choice.env)
        if section in raw:  # the env's settings are made first (_choose)
            raw[section][name] = canonical_search(value) if (section, name) == ("run", "search") else value
    for section, cls in sections.items():
        unknown = set(raw[section]) - field_names(cls)
        if section == "strategy" and unknown & {"cat_exp", "fixed_cat_val"}:
            raise UsageError(f"--cat_exp and --fixed_cat_val are settings of --search PBT and PB2, not "
                             f"{choice.search}")
        if unknown:
            raise UsageError(f"unknown {section} setting(s) {sorted(unknown)}; valid: {sorted(field_names(cls))}")
    return raw


def _build(raw: Mapping[str, dict[str, Any]], choice: _Choice,
           member_input: Mapping[str, tuple[Any, bool]]) -> RunConfig:
    """The typed sections, each checked alone and then against the others (a restart needs a member that can
    reset its weights, a searched setting must not be set too, each class checks the space)."""
    env, search, strat_cls, member_cls = choice.env, choice.search, choice.strategy_cls, choice.member_cls
    run = build(RunSettings, raw["run"])
    if run.t_ready is None or run.max_budget is None:
        raise UsageError(f"t_ready and max_budget must be set for --env {env}")
    if issubclass(strat_cls, ExploitExplore) and run.pop_size < 2:
        raise UsageError(f"--search {search} needs a population of at least 2, got pop_size={run.pop_size}")
    strategy = build(strat_cls.settings_cls, raw["strategy"])
    member = build(member_cls.settings_cls, raw["member"])
    if strat_cls.resets_weights and not member_cls.resets_weights:
        raise UsageError(f"--search {search} restarts members from fresh or shrunk weights, which --env {env}'s "
                         f"member ({member_cls.__name__}) cannot make (Member.reset_weights)")
    selection(run)
    strat_cls.roles(strategy, run.pop_size)
    _refuse_searched(member_input, member_cls.settings_cls, choice.space, choice.space_source)
    member_cls.validate(choice.space, member, run.device)
    member_cls.validate_env(env, member, choice.env_settings)
    strat_cls.validate(strategy, choice.space)
    return RunConfig(run, strategy, member, choice.space, choice.space_source, member_cls, strat_cls,
                     choice.env_settings, run_record(run.env))


def _check_rounds(cfg: RunConfig) -> None:
    """Refuse a run of more rounds than :data:`pbx.plan.MAX_ROUNDS`, naming the ``t_ready`` that fits: the plan of
    a billion rounds would be built before the start line. Rounds of ``t_ready`` are the most a run plans (a larger
    first round or a longer round after a restart leaves fewer)."""
    run = cfg.run
    assert run.t_ready is not None and run.max_budget is not None  # _build refused a run without them
    rounds = cfg.rules.fixed_rounds
    if rounds > MAX_ROUNDS:
        raise UsageError(f"max_budget {run.max_budget:,} in rounds of t_ready {run.t_ready:,} is {rounds:,} rounds, "
                         f"more than a run may plan ({MAX_ROUNDS:,}): raise t_ready to at least "
                         f"{-(-run.max_budget // MAX_ROUNDS):,} or lower max_budget")


def _check_population(cfg: RunConfig, env: str, builds: int | None) -> None:
    """Refuse a population the run cannot hold or answer with.

    A round trains at most :data:`pbx.settings.MAX_MEMBERS` members, a larger first population's included.
    Off-policy agents' replay buffers, allocated whole for every member built on the machine, must fit in its
    memory: in a larger first or restart population (BG-PBT, IPBT) that is more than pop_size. And the larger
    first population is cut after its round: a run that ends with it would answer uncut.
    """
    run = cfg.run
    assert run.t_ready is not None and run.max_budget is not None  # _build refused a run without them
    if cfg.most_members > MAX_MEMBERS:
        times = cfg.most_members / run.pop_size
        raise UsageError(f"--search {run.search} trains {cfg.most_members:,} members in a round ({times:g} x pop_size "
                         f"{run.pop_size:,}), more than {MAX_MEMBERS:,}: lower pop_size or the strategy's init_factor")
    cfg.member_cls.check_population(env, cfg.most_members if builds is None else builds, cfg.member,
                                    cfg.env_settings)
    if cfg.init_size > run.pop_size and cfg.rules.plan([False]).done:
        cost = cfg.init_size / run.pop_size
        raise UsageError(f"max_budget {run.max_budget:,} leaves no round after the first population's ({cfg.init_size} "
                         f"members for {run.pop_size} cost {cost:g} x t_ready {run.t_ready:,}): raise max_budget "
                         f"above {cost * run.t_ready:,g} or lower t_ready")


def rules(run: RunSettings, strategy_cls: type[Strategy], strategy: StrategySettings,
          chunk: int | None = None) -> Rules:
    """The rules of a run's rounds (:class:`pbx.plan.Rules`) from its settings; ``chunk``: the member's."""
    assert run.t_ready is not None and run.max_budget is not None  # a resolved or stored run has them
    return Rules(run.max_budget, run.t_ready, run.pop_size, strategy_cls.initial_size(strategy, run.pop_size),
                 strategy_cls.restart_size(strategy, run.pop_size), strategy_cls.round_growth(strategy),
                 strategy_cls.last_rounds(strategy), chunk)


@dataclass(frozen=True)
class StoredRun:
    """What a run's stored ``config.yaml`` says of its rounds, read without building its member (reports,
    sweeps): how many members each round trains, and the plan of the rounds its history holds."""

    run: RunSettings
    strategy_cls: type[Strategy]
    strategy: StrategySettings

    @classmethod
    def read(cls, config: Mapping[str, Any]) -> StoredRun:
        run = build(RunSettings, config.get("run") or {})
        strategy_cls = strategy_class(run.search)
        return cls(run, strategy_cls, build(strategy_cls.settings_cls, config.get("strategy") or {}))

    @cached_property
    def rules(self) -> Rules:
        """The rules of its rounds, nominal: steps as asked, not as a member rounds them (the member is not
        built)."""
        return rules(self.run, self.strategy_cls, self.strategy)


def selection(run: RunSettings) -> Selection:
    """The run's exploit rule with its guards (burn-in, replace margin, ties)."""
    return make_selection(run.selection, run.quantile, run.sigma_k,
                          ExploitRules(run.burn_in, run.margin_rel, run.margin_abs, run.tied))


def _refuse_searched(given: Mapping[str, tuple[Any, bool]], settings_cls: type, space: Space,
                     space_source: str) -> None:
    """Refuse a member setting the search space also holds: each member trains with its own value from the
    space, so the setting would be recorded and never used.

    A run's own config.yaml written before searched settings were left out of its
    member section holds them at their defaults; those are not input.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(settings_cls)}
    for name, (value, recorded) in given.items():
        if name in space.params and name in defaults and not (recorded and value == defaults[name]):
            raise UsageError(f"{name}={value} has no effect: {name} is in the search space ({space_source}), which "
                             f"sets it per member; set its default in the space file, or remove it from the space")


def _load_space(named: Any, default: Callable[[], str], spec: Any) -> tuple[str, Space]:
    """The space from an inline spec (a resolved config.yaml), the file ``named`` (a path, or a file
    under search_spaces/), or the ``default`` file of the run's env."""
    if spec is not None:
        return str(named) if named else "inline", Space.from_dict(spec, source="config space")
    name = str(named) if named is not None else default()
    path = Path(name)
    if not path.is_file() and (SEARCH_SPACES / name).is_file():
        path = SEARCH_SPACES / name
    return str(name), Space.load(path)
