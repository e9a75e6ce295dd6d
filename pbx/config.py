"""Run configuration: typed settings, their layers, and the resolved ``config.yaml``.

A run's config has three sections, each a dataclass:

- ``run``: :class:`RunSettings`, what every run has (env, search, population, budget);
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
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from pbx.errors import UsageError
from pbx.files import durable_write
from pbx.fingerprint import PROVENANCE, run_record
from pbx.yaml_files import read_yaml
from pbx.members import Member, MemberSettings, member_class, space_file
from pbx.space import Config, Space
from pbx.strategies import (ExploitExplore, ExploitRules, RunContext, Selection, Strategy, StrategySettings,
                            canonical_search, make_selection, strategy_class)
from pbx.strategies.categorical import BANDITS, CAT_EXPS, canonical_cat_exp

SEARCH_SPACES = Path(__file__).resolve().parent / "search_spaces"
"""The shipped search spaces: package data, so a non-editable install finds them too."""
SECTIONS = ("run", "strategy", "member")


RUNNERS = ("auto", "sync", "mpi")
COMM_MODES = ("p2p", "collective")


@dataclass
class RunSettings:
    """Settings every run has (the ``run`` section)."""

    env: str = "bigfish"
    """``toy``, ``toy-cat`` (the toy with a categorical optimiser), ``toy-deceptive``, a ProcGen game
    (``bigfish``) or a gymnasium id (``CartPole-v1``)."""
    algo: str = "ppo"
    """The Stable-Baselines3 agent a member trains: ``ppo``, ``a2c``, ``sac``, ``td3`` or ``dqn``
    (:data:`pbx.members.ALGOS`); toys and registered members train their own."""
    search: str = "PBT"
    """Strategy: ``none``, ``random``, ``PBT``, ``PB2`` or ``FIRE`` (``replay``: a stored schedule,
    :mod:`pbx.replay`)."""
    selection: str = "truncation"
    """Exploit rule: ``truncation`` (bottom quantile copies top quantile), ``wta`` (all copy the best) or
    ``sigma`` (members below mean - k std copy members above mean + k std)."""
    quantile: float = 0.25
    """Fraction of the population in the top and in the bottom group for truncation selection."""
    sigma_k: float = 1.0
    """``sigma`` selection: leaders score above mean + k std of the population, underperformers below mean - k std."""
    burn_in: int = 0
    """Env steps every member trains before the first exploit (0: exploit from the first round on)."""
    margin_rel: float = 0.0
    """A donor must beat the recipient by more than this fraction of the recipient's absolute score."""
    margin_abs: float = 0.0
    """... and by more than this many score units (0 and 0: any better donor)."""
    tied: str = "keep"
    """A recipient whose donor has exactly its score: ``keep`` going unchanged, or ``explore`` its own config."""
    pop_size: int = 4
    """Number of members (``--batchsize`` in the PB2 code)."""
    t_ready: int | None = None
    """Env steps each member trains between two exploit/explore steps (None: the member's default)."""
    max_budget: int | None = None
    """Env steps each member trains in total (None: the member's default)."""
    seed: int = 0
    """Seeds the strategy's decisions and, derived per member, every member's learner."""
    space: str | None = None
    """Search-space YAML: a path, or a file name under ``search_spaces/`` (None: the member's default)."""
    device: str = "auto"
    """``auto`` (a GPU when there is one), ``cpu`` or ``cuda``."""
    name: str | None = None
    """Run name; the folder is ``runs/<name>`` unless ``--run-dir`` says otherwise."""
    eval_every: int = 1
    """Evaluate the test score every this many rounds (and always in the last round)."""
    runner: str = "auto"
    """``auto`` (MPI when started by an MPI launcher with several ranks, else synchronous), ``sync`` or ``mpi``."""
    comm: str = "p2p"
    """How the MPI runner moves a donor's checkpoint: ``p2p`` (send to each rank that needs it) or
    ``collective`` (one broadcast per donor; suits winner-takes-all)."""

    def __post_init__(self) -> None:
        self.algo = self.algo.lower()
        if self.pop_size < 1:
            raise UsageError(f"pop_size must be at least 1, got {self.pop_size}")
        if self.t_ready is not None and self.t_ready <= 0:
            raise UsageError(f"t_ready must be a positive number of steps, got {self.t_ready}")
        if self.max_budget is not None and self.t_ready is not None and self.max_budget < self.t_ready:
            raise UsageError(f"max_budget ({self.max_budget}) must be at least t_ready ({self.t_ready})")
        if self.eval_every < 1:
            raise UsageError(f"eval_every must be a positive number of rounds, got {self.eval_every}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise UsageError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.runner not in RUNNERS:
            raise UsageError(f"runner must be one of {', '.join(RUNNERS)}, got {self.runner!r}")
        if self.comm not in COMM_MODES:
            raise UsageError(f"comm must be one of {', '.join(COMM_MODES)}, got {self.comm!r}")

    @property
    def rounds(self) -> int:
        """Rounds of training; the last one may be shorter when t_ready does not divide max_budget."""
        assert self.t_ready is not None and self.max_budget is not None  # filled in by resolve()
        return -(-self.max_budget // self.t_ready)


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
    provenance: dict[str, Any] | None = None
    """What started the run (:func:`pbx.fingerprint.run_record`: the pbx, the env's own code, the library
    versions), written as config.yaml's ``pbx`` section: :func:`resolve` gives this process's, a resume the
    stored record (None: a folder written before pbx recorded itself)."""

    def round_steps(self, round_: int) -> int:
        """Steps each member is asked to train in ``round_`` (the last round takes the rest of the budget)."""
        assert self.run.t_ready is not None and self.run.max_budget is not None  # filled in by resolve()
        return min(self.run.t_ready, self.run.max_budget - round_ * self.run.t_ready)

    def trained_steps(self, round_: int) -> int:
        """Steps each member really trains in ``round_``: :meth:`round_steps` as the member rounds them (PPO: to
        whole rollouts; a searched rollout length rounds each member's own, see :meth:`round_end`)."""
        return self.member_cls.round_steps(self.member, self.round_steps(round_), self.space)

    def round_end(self, round_: int) -> int:
        """The steps every member has trained, by plan, at the end of ``round_``.

        Each member trains to this count, not a fixed number of steps per round (:meth:`steps_due`): a member
        whose rollout length a search changes ends each round near the plan in whole rollouts of its own,
        instead of drifting apart from the others (the history records each one's steps).
        """
        return sum(self.trained_steps(r) for r in range(round_ + 1))

    def steps_due(self, steps: int, until: int, config: Config) -> int:
        """The env steps a member at ``steps`` with ``config`` trains in a round whose planned end is ``until``
        (:meth:`round_end`): whole chunks (PPO: rollouts) to the boundary nearest ``until``, at least one; none,
        so that the member skips the round, when it is already at or past ``until``.

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

    def total_steps(self) -> int:
        """Steps each member really trains over the run."""
        return sum(self.trained_steps(r) for r in range(self.run.rounds))

    def build_strategy(self) -> Strategy:
        """The run's strategy, told the run's planned length, population and roles (EXP3's rates, FIRE)."""
        return self.strategy_cls(self.strategy, selection(self.run),
                                 RunContext(rounds=self.run.rounds, pop_size=self.run.pop_size, roles=self.roles()))

    def roles(self) -> tuple[str, ...]:
        """Each member's role, as the history records it (:meth:`pbx.strategies.Strategy.roles`)."""
        return self.strategy_cls.roles(self.strategy, self.run.pop_size)

    def to_dict(self) -> dict[str, Any]:
        run = dataclasses.asdict(self.run)
        run["space"] = self.space_source
        # A searched hyperparameter's member setting is never used: the space records what the members train with.
        member = {k: v for k, v in dataclasses.asdict(self.member).items() if k not in self.space.params}
        return {
            **({PROVENANCE: dict(self.provenance)} if self.provenance is not None else {}),
            "run": run,
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
    merged: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    flat: dict[str, Any] = {}
    space_spec: Any = None
    named_space = False
    """Whether a space file is named after the inline space (a flag or -m on a resolved config.yaml)."""
    member_input: dict[str, tuple[Any, bool]] = {}
    """Possible member settings the input sets: value, and whether a run's own config.yaml holds it."""
    for layer in layers:
        inline = isinstance(layer.get("space"), Mapping)
        for key, value in layer.items():
            if key in SECTIONS:
                if not isinstance(value, Mapping):
                    raise UsageError(f"config section {key!r} must be a mapping, got {value!r}")
                merged[key].update(value)
                if key == "member":
                    member_input.update({name: (v, inline) for name, v in value.items()})
            elif key == "space" and inline:
                space_spec = value
            elif key == PROVENANCE:
                if not isinstance(value, Mapping):
                    raise UsageError(f"config section {key!r} (the pbx that started the run) must be a mapping of "
                                     f"version, commit and code, got {value!r}")
            else:
                flat[key] = value
                member_input[key.removeprefix("member.")] = (value, False)
        names = "space" in layer or "space" in (layer.get("run") or {})
        named_space = False if inline else named_space or names
    for item in overrides:
        key, value = parse_override(item)
        flat[key] = value
        member_input[key.removeprefix("member.")] = (value, False)
        named_space |= key in ("space", "run.space")

    run_fields = _field_names(RunSettings)
    run_raw = {**merged["run"], **{k: v for k, v in flat.items() if k in run_fields}}
    env = str(run_raw.get("env", RunSettings.env))
    algo = run_raw["algo"] = str(run_raw.get("algo", RunSettings.algo)).lower()
    search = canonical_search(run_raw.get("search", RunSettings.search))
    run_raw["search"] = search
    strat_cls = strategy_class(search)
    # The space comes first: it decides the member (DrAC's PPO when it holds an augmentation), and a
    # bandit's --cat_exp on a ProcGen game with no space named takes PB2-Mix's space; random and fixed
    # (the PBT spellings) train what leaving --cat_exp out trains.
    # A resolved config.yaml carries its space inline; a space named by a flag or -m replaces it.
    cat_exp = flat.get("strategy.cat_exp", flat.get("cat_exp", merged["strategy"].get("cat_exp")))
    bandit = cat_exp is not None and canonical_cat_exp(cat_exp, CAT_EXPS, search) in BANDITS
    space_source, space = _load_space(flat.get("run.space", run_raw.get("space")),
                                      lambda: space_file(env, bandit, algo), None if named_space else space_spec)
    member_cls = member_class(env, [*space.names, *member_input], algo)
    run_raw = {**member_cls.run_defaults(env), **run_raw}

    sections = {"run": RunSettings, "strategy": strat_cls.settings_cls, "member": member_cls.settings_cls}
    raw = {"run": run_raw, "strategy": dict(merged["strategy"]),
           "member": {**member_cls.setting_defaults(env), **merged["member"]}}
    for key, value in flat.items():
        section, name = _route(key, sections, search, env)
        raw[section][name] = canonical_search(value) if (section, name) == ("run", "search") else value
    for section, cls in sections.items():
        unknown = set(raw[section]) - _field_names(cls)
        if section == "strategy" and unknown & {"cat_exp", "fixed_cat_val"}:
            raise UsageError(f"--cat_exp and --fixed_cat_val are settings of --search PBT and PB2, not {search}")
        if unknown:
            raise UsageError(f"unknown {section} setting(s) {sorted(unknown)}; valid: {sorted(_field_names(cls))}")

    run = build(RunSettings, raw["run"])
    if run.t_ready is None or run.max_budget is None:
        raise UsageError(f"t_ready and max_budget must be set for --env {env}")
    if issubclass(strat_cls, ExploitExplore) and run.pop_size < 2:
        raise UsageError(f"--search {search} needs a population of at least 2, got pop_size={run.pop_size}")
    strategy = build(strat_cls.settings_cls, raw["strategy"])
    member = build(member_cls.settings_cls, raw["member"])
    selection(run)
    strat_cls.roles(strategy, run.pop_size)

    _refuse_searched(member_input, member_cls.settings_cls, space, space_source)
    member_cls.validate(space, member, run.device)
    # Off-policy agents' replay buffers, allocated whole for every member built on the machine, must fit in its memory.
    member_cls.check_population(env, run.pop_size if builds is None else builds, member)
    strat_cls.validate(strategy, space)
    return RunConfig(run, strategy, member, space, space_source, member_cls, strat_cls, run_record(run.env))


def selection(run: RunSettings) -> Selection:
    """The run's exploit rule with its guards (burn-in, replace margin, ties)."""
    return make_selection(run.selection, run.quantile, run.sigma_k,
                          ExploitRules(run.burn_in, run.margin_rel, run.margin_abs, run.tied))


def parse_override(item: str) -> tuple[str, Any]:
    """``key=value`` of a ``-m`` item, the value read as YAML (``1e-4``, ``true``, ``null``)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"-m takes key=value items, got {item!r} (e.g. -m n_envs=16; "
                         f"the reference code's -mb, -tr, -b, -s, -sd are --max_budget, --t_ready, --batchsize, "
                         f"--search, --seed here)")
    return key.strip(), yaml.safe_load(value) if value.strip() else ""


def build(cls: type, raw: Mapping[str, Any]) -> Any:
    """Instantiate a settings dataclass from raw (YAML or string) values, coercing to the field types."""
    hints = typing.get_type_hints(cls)
    values = {name: _coerce(name, value, hints[name]) for name, value in raw.items()}
    try:
        return cls(**values)
    except TypeError as err:
        raise UsageError(str(err)) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    data = read_yaml(path, "config file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


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


def _route(key: str, sections: Mapping[str, type], search: str, env: str) -> tuple[str, str]:
    """Find the section of a flat or dotted ``-m`` key."""
    if "." in key:
        section, name = key.split(".", 1)
        if section not in sections:
            raise UsageError(f"unknown config section {section!r} in {key!r}; use one of {list(sections)}")
        return section, name
    matches = [s for s, cls in sections.items() if key in _field_names(cls)]
    if not matches:
        valid = sorted(set().union(*(_field_names(c) for c in sections.values())))
        raise UsageError(f"unknown key {key!r} for --search {search} --env {env}; valid keys: {', '.join(valid)}")
    if len(matches) > 1:
        raise UsageError(f"{key!r} is a setting of the {' and the '.join(matches)} sections; "
                         f"say which: {', '.join(f'{s}.{key}' for s in matches)}")
    return matches[0], key


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """Convert ``value`` to the type ``hint`` (int, float, str, bool or Optional of one)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        hint = next(a for a in args if a is not type(None))
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if hint is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)
        if hint is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if hint is str:
            if isinstance(value, (dict, list)):
                raise ValueError
            return str(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be {getattr(hint, '__name__', hint)}, got {value!r}") from None
    return value


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
