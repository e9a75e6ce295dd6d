"""Search spaces: the hyperparameters a population explores, and their bounds.

A space maps names to parameters. Continuous parameters live on ``[low, high]``
(optionally on a log scale, or a discount on the log of its horizon ``1 / (1 - value)``)
and map to and from ``[0, 1]`` so that strategies
such as PB2 can work on the unit cube; categorical parameters hold a fixed tuple
of choices. Spaces are read from YAML files like ``search_spaces/toy.yaml``::

    h0: {type: continuous, low: 0.0, high: 1.0, default: 0.5}
    lr: {type: continuous, low: 1.0e-5, high: 1.0e-3, log: true}
    gamma: {type: continuous, low: 0.95, high: 0.9999, horizon: true}
    n_steps: {type: integer, low: 250, high: 15000, default: 512}
    n_epochs: {type: integer, low: 1, high: 20, log: true}
    aug: {type: categorical, choices: [crop, flip]}

Integer parameters are continuous ones whose values are rounded: strategies that work
on the unit cube (PB2) model them there, and every value the space hands out (a draw,
a clip, a point of the cube) is a Python ``int``. Their bounds and default must be
whole numbers (``1.0e3`` is).

``default`` is optional: it is the value the fixed-hyperparameter baseline
(``--search none``) uses. Without it the default is the middle of the range (on
the log scale for log parameters) or the first choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Union

import numpy as np

from pbx.errors import UsageError
from pbx.yaml_files import read_yaml

Value = Union[float, str, int, bool]
Config = dict[str, Value]


@dataclass(frozen=True)
class Continuous:
    """A real-valued hyperparameter on ``[low, high]``."""

    low: float
    high: float
    log: bool = False
    """Sample, perturb and model on ``log(value)`` (learning rates, coefficients spanning decades)."""
    default: float | None = None
    horizon: bool = False
    """Sample, perturb and model a discount on the log of the horizon it sets, ``1 / (1 - value)``: PBT's
    x0.8 / x1.2 on the value itself takes 0.99 to a bound of [0.95, 0.9999] in one step (0.99 x 1.2 clips to
    0.9999, 0.99 x 0.8 to 0.95); on the horizon it takes 0.99 to 0.9917 or 0.9875."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise UsageError(f"bounds must be finite numbers, got low={self.low}, high={self.high}")
        if self.low >= self.high:
            raise UsageError(f"low must be below high, got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise UsageError(f"a log-scale parameter needs low > 0, got low={self.low}")
        if self.horizon and self.log:
            raise UsageError("a parameter takes one of log and horizon, got both")
        if self.horizon and not 0 <= self.low < self.high < 1:
            raise UsageError(f"a horizon-scale parameter (a discount) needs 0 <= low < high < 1, got "
                             f"low={self.low}, high={self.high}")
        if self.default is not None and not self.low <= self.default <= self.high:
            raise UsageError(f"default {self.default} is outside [{self.low}, {self.high}]")

    def to_unit(self, value: float) -> float:
        """Map a value in ``[low, high]`` to ``[0, 1]``, linearly on its scale (the value, its log, or the log of
        its horizon)."""
        return (self._scale(value) - self._scale(self.low)) / (self._scale(self.high) - self._scale(self.low))

    def from_unit(self, u: float) -> float:
        """Inverse of :meth:`to_unit`; ``u`` is clipped to ``[0, 1]`` first."""
        u = min(max(float(u), 0.0), 1.0)
        s = self._scale(self.low) + u * (self._scale(self.high) - self._scale(self.low))
        return self.clip(math.exp(s) if self.log else -math.expm1(-s) if self.horizon else s)

    def scaled(self, value: float, factor: float) -> float:
        """PBT's perturbation: ``value`` times ``factor``, or its horizon times ``factor`` on the horizon scale,
        clipped to the bounds."""
        return self.clip(1 - (1 - value) / factor if self.horizon else value * factor)

    def _scale(self, value: float) -> float:
        return math.log(value) if self.log else -math.log1p(-value) if self.horizon else value

    def clip(self, value: float) -> float:
        return min(max(float(value), self.low), self.high)

    def sample(self, rng: np.random.Generator) -> float:
        return self.from_unit(rng.uniform())

    def initial(self) -> float:
        return self.default if self.default is not None else self.from_unit(0.5)


@dataclass(frozen=True)
class Integer(Continuous):
    """A whole-number hyperparameter on ``[low, high]`` (a rollout length, a number of epochs).

    A :class:`Continuous` whose every value is rounded to the nearest whole number, so PB2 models it on
    the unit cube like any continuous parameter and PBT's perturbation moves it by at least one.
    """

    def __post_init__(self) -> None:
        for key in ("low", "high", "default"):
            value = getattr(self, key)
            if value is None:
                continue
            if not math.isfinite(value) or value != int(value):
                options = f" (use {math.floor(value)} or {math.ceil(value)})" if math.isfinite(value) else ""
                raise UsageError(f"{key} must be a whole number for an integer parameter, got {value}{options}")
            # YAML's 1.0e3 arrives as a float: stored as the int it is, so to_dict writes 1000, not 1000.0
            object.__setattr__(self, key, int(value))
        super().__post_init__()

    def clip(self, value: float) -> int:  # type: ignore[override]
        return min(max(round(float(value)), int(self.low)), int(self.high))

    def from_unit(self, u: float) -> int:  # type: ignore[override]
        return self.clip(super().from_unit(u))

    def sample(self, rng: np.random.Generator) -> int:  # type: ignore[override]
        return self.from_unit(rng.uniform())

    def initial(self) -> int:  # type: ignore[override]
        return int(self.default) if self.default is not None else self.from_unit(0.5)


@dataclass(frozen=True)
class Categorical:
    """A hyperparameter taking one of a fixed tuple of choices."""

    choices: tuple[Value, ...]
    default: Value | None = None

    def __post_init__(self) -> None:
        if len(self.choices) == 0:
            raise UsageError("a categorical parameter needs at least one choice, got an empty list")
        odd = [c for c in self.choices if c is not None and not isinstance(c, (str, int, float))]
        if odd:  # history.csv stores a choice as text and reads it back through this tuple
            raise UsageError(f"categorical choices must be numbers, strings, booleans or null, got {odd[0]!r}")
        if len(set(self.choices)) != len(self.choices):
            raise UsageError(f"categorical choices must be distinct, got {list(self.choices)}")
        if len({str(c) for c in self.choices}) != len(self.choices):
            # history.csv stores text: 1 and "1" (or True and "True") would read back as one choice
            raise UsageError(f"categorical choices must differ as text, got {list(self.choices)}")
        if self.default is not None and self.default not in self.choices:
            raise UsageError(f"default {self.default!r} is not one of {list(self.choices)}")

    def sample(self, rng: np.random.Generator) -> Value:
        return self.choices[int(rng.integers(len(self.choices)))]

    def initial(self) -> Value:
        return self.default if self.default is not None else self.choices[0]


Param = Union[Continuous, Integer, Categorical]


@dataclass(frozen=True)
class Space:
    """An ordered mapping of hyperparameter names to parameters."""

    params: Mapping[str, Param] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.params:
            raise UsageError("a search space needs at least one hyperparameter")

    @property
    def names(self) -> list[str]:
        return list(self.params)

    @property
    def continuous(self) -> list[str]:
        """Names of the continuous parameters, in space order (the columns of :meth:`to_unit`)."""
        return [n for n, p in self.params.items() if isinstance(p, Continuous)]

    @property
    def categorical(self) -> list[str]:
        return [n for n, p in self.params.items() if isinstance(p, Categorical)]

    def sample(self, rng: np.random.Generator) -> Config:
        """Draw every parameter from its prior (uniform, or log-uniform for log parameters)."""
        return {name: p.sample(rng) for name, p in self.params.items()}

    def with_uniform(self, name: str, low: float, high: float) -> Space:
        """This space with ``name`` drawn uniformly from ``[low, high]`` (a task's own first draw,
        :meth:`pbx.members.Member.prior`)."""
        if name not in self.params:
            raise UsageError(f"the search space has no parameter {name!r}")
        return Space({**self.params, name: Continuous(low, high)})

    def initial(self) -> Config:
        """The fixed baseline configuration (each parameter's ``default``)."""
        return {name: p.initial() for name, p in self.params.items()}

    def clip(self, config: Mapping[str, Value]) -> Config:
        """Clip continuous values into their bounds; categorical values are returned unchanged."""
        return {
            name: p.clip(config[name]) if isinstance(p, Continuous) else config[name]
            for name, p in self.params.items()
        }

    def to_unit(self, config: Mapping[str, Value]) -> np.ndarray:
        """The continuous part of ``config`` as a point of ``[0, 1]^d`` (d = number of continuous params)."""
        return np.array([self.params[n].to_unit(float(config[n])) for n in self.continuous])  # type: ignore[union-attr]

    def from_unit(self, u: np.ndarray, base: Mapping[str, Value]) -> Config:
        """Replace the continuous values of ``base`` by the point ``u`` of the unit cube."""
        out = dict(base)
        for name, ui in zip(self.continuous, np.asarray(u, dtype=float)):
            out[name] = self.params[name].from_unit(ui)  # type: ignore[union-attr]
        return out

    @classmethod
    def from_dict(cls, raw: Any, source: str = "search space") -> Space:
        """Build a space from the parsed YAML mapping; every malformed entry raises :class:`UsageError`."""
        if not isinstance(raw, dict) or not raw:
            raise UsageError(f"{source}: expected a mapping of parameter names to specs, got {raw!r}")
        params: dict[str, Param] = {}
        for name, spec in raw.items():
            try:
                params[str(name)] = _param_from_spec(spec)
            except UsageError as err:
                raise UsageError(f"{source}: parameter {name!r}: {err}") from None
        return cls(params)

    @classmethod
    def load(cls, path: str | Path) -> Space:
        """A search-space file, or the ``space:`` section of an experiment file or a run's ``config.yaml``."""
        raw = read_yaml(path, "search space file")
        if isinstance(raw, dict) and isinstance(raw.get("space"), dict) and "type" not in raw["space"]:
            return cls.from_dict(raw["space"], source=f"{path} (space:)")
        return cls.from_dict(raw, source=str(path))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The YAML form, as written into a run's ``config.yaml``."""
        out: dict[str, dict[str, Any]] = {}
        for name, p in self.params.items():
            if isinstance(p, Continuous):  # an Integer's bounds and default are ints already
                kind = "integer" if isinstance(p, Integer) else "continuous"
                spec: dict[str, Any] = {"type": kind, "low": p.low, "high": p.high, "log": p.log}
                if p.horizon:  # written only when set: the runs before it had no such key, and pool by config
                    spec["horizon"] = True
            else:
                spec = {"type": "categorical", "choices": list(p.choices)}
            if p.default is not None:
                spec["default"] = p.default
            out[name] = spec
        return out


def shown(value: Value, digits: int = 3) -> str:
    """``value`` as a round line and ``strategy.csv`` show it: a float to ``digits`` significant digits, more
    where that many would make a fraction look whole (a discount of 0.9999 is not 1, an undiscounted return);
    an integer whole (1.23e+03 would not say which rollout length it is)."""
    if not isinstance(value, float):
        return str(value)
    text = f"{value:.{digits}g}"
    while float(text).is_integer() and not value.is_integer() and digits < 17:
        digits += 1
        text = f"{value:.{digits}g}"
    return text


def _number(spec: Mapping[str, Any], key: str) -> float:
    # YAML 1.1 reads ``1e-5`` (no dot) as a string; accept it as the number the user meant.
    value = spec[key]
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{key} must be a number, got {value!r}") from None


def _param_from_spec(spec: Any) -> Param:
    if not isinstance(spec, dict):
        raise UsageError(f"expected a mapping with a 'type', got {spec!r}")
    kind = spec.get("type")
    allowed = {"continuous": {"type", "low", "high", "log", "horizon", "default"},
               "integer": {"type", "low", "high", "log", "default"},
               "categorical": {"type", "choices", "default"}}
    if kind not in allowed:
        raise UsageError(f"unknown type {kind!r}; use 'continuous', 'integer' or 'categorical'")
    unknown = set(spec) - allowed[kind]
    if unknown:
        raise UsageError(f"unknown key(s) {sorted(unknown)} for a {kind} parameter")
    if kind in ("continuous", "integer"):
        for key in ("low", "high"):
            if key not in spec:
                raise UsageError(f"a{'n' if kind == 'integer' else ''} {kind} parameter needs '{key}'")
        default = _number(spec, "default") if spec.get("default") is not None else None
        flags = {key: spec.get(key, False) for key in ("log", "horizon") if key in allowed[kind]}
        for key, flag in flags.items():
            if not isinstance(flag, bool):
                raise UsageError(f"{key} must be true or false, got {flag!r}")
        numeric = Integer if kind == "integer" else Continuous
        return numeric(_number(spec, "low"), _number(spec, "high"), default=default, **flags)
    choices = spec.get("choices")
    if not isinstance(choices, list):
        raise UsageError(f"choices must be a list, got {choices!r}")
    return Categorical(tuple(choices), default=spec.get("default"))
