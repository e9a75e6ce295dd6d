"""Which runs may be pooled: a label per run, and groups of runs that are one experiment.

Statistics over seeds mean something only when the pooled runs differ in nothing
but the seed. Runs are labelled by their strategy (a sweep's variant, or
``search`` and ``cat_exp``, with the selection and the member kind where the runs
differ in them), and the runs under one label are pooled only when their
fingerprints (:mod:`pbx.fingerprint`: the resolved config less seed, name and how
it ran, plus the pbx that trained it) agree. Otherwise :func:`pool` names the
differing keys, or, when asked to split, groups the runs by those keys' values
and puts the values in the labels. Across games the env is the one key allowed to
differ.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

from pbx.errors import UsageError
from pbx.fingerprint import fingerprint
from pbx.members import AUGMENTATION
from pbx.members.toy import TOY_ENVS
from pbx.reporting.runs import Run

ENV_KEY = "run.env"


def member_kind(run: Run) -> str:
    """What the run's members train: ``toy``; ``DrAC`` when its space or member settings hold DrAC's
    hyperparameters (:data:`pbx.members.AUGMENTATION`, as :func:`pbx.members.member_class` decides); else its
    ``--algo`` (``PPO``, ``SAC``, ...; runs from before ``--algo`` trained PPO)."""
    if run.env in TOY_ENVS:
        return "toy"
    names = set(run.space.names) | {key for key, value in run.member.items() if value is not None}
    return "DrAC" if names & set(AUGMENTATION) else str(run.config["run"].get("algo", "ppo")).upper()


def run_labels(runs: Sequence[Run]) -> list[str]:
    """Each loose run's strategy label: its ``search`` (and ``cat_exp``), plus its selection when the runs
    differ in selection."""
    with_selection = len({run.selection for run in runs}) > 1
    return [f"{run.strategy} ({run.selection})" if with_selection else run.strategy for run in runs]


def with_member_kind(runs: Sequence[Run], labels: Sequence[str]) -> list[str]:
    """``labels`` with each run's member kind added (``PBT [DrAC]``) when runs on one game differ in it: a PBT
    that trains DrAC-PPO is not the PBT that trains PPO (a toy and a ProcGen game differ by their env alone).
    A label that names its kind already as a word (a sweep variant called ``PBT-PPO``) is left as it is."""
    kinds = [member_kind(run) for run in runs]
    if len(set(zip(kinds, (run.env for run in runs)))) == len({run.env for run in runs}):
        return list(labels)
    return [label if kind.lower() in re.split(r"[-_ ]", label.lower()) else f"{label} [{kind}]"
            for label, kind in zip(labels, kinds)]


@dataclass(frozen=True)
class Pooled:
    """Runs grouped into experiments: label -> runs, in order of first appearance."""

    groups: dict[str, list[Run]]
    origin: dict[str, str]
    """Each group's label before splitting and member kinds were added (what ``--baseline`` may name)."""

    def label(self, name: str | None, flag: str = "--baseline") -> str | None:
        """The group ``name`` means: a label, or the unique group it was split into or decorated as."""
        if name is None or name in self.groups:
            return name
        matches = [label for label, origin in self.origin.items() if origin == name]
        if len(matches) == 1:
            return matches[0]
        choices = ", ".join(self.groups)
        if matches:
            raise UsageError(f"{flag} {name!r} was split into {', '.join(matches)}: name one of them")
        raise UsageError(f"{flag} {name!r} is not among the strategies ({choices})")


def pool(runs: Sequence[Run], labels: Sequence[str], split: bool, names: Sequence[str] | None = None,
         ignore: Collection[str] = (ENV_KEY,)) -> Pooled:
    """Group ``runs`` by label, one experiment per group.

    Args:
        runs: the runs, and ``labels`` each one's label.
        names: each run's label as the user may name it (before member kinds were added; default ``labels``).
        split: where one label's fingerprints differ, split its runs by the differing keys' values (the
            label then says them, ``PBT (pop_size=4)``) instead of refusing.
        ignore: fingerprint keys allowed to differ within a group (the env: a strategy over several games).

    Raises:
        UsageError: runs under one label differ and ``split`` is off; the message names the keys.
    """
    by_label: dict[str, list[Run]] = {}
    named = dict(zip(labels, names or labels))
    for label, run in zip(labels, runs):
        by_label.setdefault(label, []).append(run)
    groups: dict[str, list[Run]] = {}
    origin: dict[str, str] = {}
    for label, members in by_label.items():
        prints = [{k: v for k, v in fingerprint(run.config).items() if k not in ignore} for run in members]
        keys = _differing(prints)
        if keys and not split:
            shown = "; ".join(f"{run.path}: {_values(p, keys)}" for run, p in _first_per_value(members, prints, keys))
            raise UsageError(f"runs under {label!r} are not one experiment: they differ in {', '.join(keys)} "
                             f"({shown}); report them apart, or give --split to group them by those values")
        for run, p in zip(members, prints):
            name = f"{label} ({_values(p, keys, short=True)})" if keys else label
            groups.setdefault(name, []).append(run)
            origin[name] = named[label]
    return Pooled(groups, origin)


def _differing(prints: Sequence[Mapping[str, Any]]) -> list[str]:
    missing = object()
    keys = {k for p in prints for k in p}
    return sorted(k for k in keys if len({repr(p.get(k, missing)) for p in prints}) > 1)


def _values(print_: Mapping[str, Any], keys: Sequence[str], short: bool = False) -> str:
    """``key=value, ...``; ``short`` names a key by its last part where that is unambiguous among ``keys``."""
    lasts = [k.rsplit(".", 1)[-1] for k in keys]
    names = [last if short and lasts.count(last) == 1 else k for k, last in zip(keys, lasts)]
    return ", ".join(f"{name}={print_.get(k, 'unset')}" for name, k in zip(names, keys))


def _first_per_value(members: Sequence[Run], prints: Sequence[Mapping[str, Any]],
                     keys: Sequence[str]) -> list[tuple[Run, Mapping[str, Any]]]:
    """One run for each distinct combination of the differing keys' values, so the message stays one line."""
    seen: dict[str, tuple[Run, Mapping[str, Any]]] = {}
    for run, p in zip(members, prints):
        seen.setdefault(_values(p, keys), (run, p))
    return list(seen.values())
