"""The input of a run's config: its layers and ``-m`` overrides merged, before the sections are known, and a flat
key routed to the one section that has it (:mod:`pbx.config` resolves the sections from them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pbx import env_section
from pbx.env_section import MOVED
from pbx.errors import UsageError
from pbx.fingerprint import PROVENANCE
from pbx.settings import field_names, parse_override

SECTIONS = ("run", env_section.SECTION, "strategy", "member")


@dataclass
class Input:
    """The layers and overrides merged, before the sections are known: a flat key's section depends on the
    strategy and member, which the input itself names."""

    merged: dict[str, dict[str, Any]]
    """Each section's keys, as the layers' sections gave them."""
    flat: dict[str, Any]
    """Flat and dotted keys, the overrides last."""
    space_spec: Any
    """The last inline space (a resolved config.yaml's), or None."""
    named_space: bool
    """Whether a space file is named after the inline space (a flag or -m on a resolved config.yaml)."""
    member_input: dict[str, tuple[Any, bool]]
    """Possible member settings the input sets: value, and whether a run's own config.yaml holds it."""
    moved: dict[str, bool] = field(default_factory=dict)
    """Env settings given in a ``member`` section (:data:`pbx.env_section.MOVED`), and whether a run's own
    config.yaml holds each."""


def merge(layers: Sequence[Mapping[str, Any]], overrides: Sequence[str]) -> Input:
    """The layers, later winning, then the ``-m`` overrides. Section keys are kept apart from flat ones: a flat
    key's section is known only once the input's strategy and member are (:func:`pbx.config._sections` routes it)."""
    given = Input({s: {} for s in SECTIONS}, {}, None, False, {})
    for layer in layers:
        inline = isinstance(layer.get("space"), Mapping)
        for key, value in layer.items():
            if key in SECTIONS:
                if not isinstance(value, Mapping):
                    raise UsageError(f"config section {key!r} must be a mapping, got {value!r}")
                if key == "member":  # a config.yaml written before the env settings had their own section
                    given.moved.update({name: inline for name in MOVED if name in value})
                    given.merged[env_section.SECTION].update({k: v for k, v in value.items() if k in MOVED})
                    value = {k: v for k, v in value.items() if k not in MOVED}
                    given.member_input.update({name: (v, inline) for name, v in value.items()})
                given.merged[key].update(value)
            elif key == "space" and inline:
                given.space_spec = value
            elif key == PROVENANCE:
                if not isinstance(value, Mapping):
                    raise UsageError(f"config section {key!r} (the pbx that started the run) must be a mapping of "
                                     f"version, commit and code, got {value!r}")
            else:
                given.flat[key] = value
                given.member_input[key.removeprefix("member.")] = (value, False)
        names = "space" in layer or "space" in (layer.get("run") or {})
        given.named_space = False if inline else given.named_space or names
    for item in overrides:
        key, value = parse_override(item)
        given.flat[key] = value
        given.member_input[key.removeprefix("member.")] = (value, False)
        given.named_space |= key in ("space", "run.space")
    return given


def route(key: str, sections: Mapping[str, type], search: str, env: str) -> tuple[str, str]:
    """Find the section of a flat or dotted ``-m`` key."""
    if "." in key:
        section, name = key.split(".", 1)
        if section not in sections:
            raise UsageError(f"unknown config section {section!r} in {key!r}; use one of {list(sections)}")
        return section, name
    matches = [s for s, cls in sections.items() if key in field_names(cls)]
    if not matches:
        valid = sorted(set().union(*(field_names(c) for c in sections.values())))
        raise UsageError(env_section.refusal(key, env)
                         or f"unknown key {key!r} for --search {search} --env {env}; valid keys: {', '.join(valid)}")
    if len(matches) > 1:
        raise UsageError(f"{key!r} is a setting of the {' and the '.join(matches)} sections; "
                         f"say which: {', '.join(f'{s}.{key}' for s in matches)}")
    return matches[0], key
