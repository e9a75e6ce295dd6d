"""Which runs may be pooled: a label per run, and groups of runs that are one experiment.

Statistics over seeds mean something only when the pooled runs differ in nothing
but the seed. Runs are labelled by their strategy (a sweep's variant, or
``search`` and ``cat_exp``, with the selection and the member kind where the runs
differ in them), and the runs under one label are pooled only when their
fingerprints (:mod:`pbx.fingerprint`: the resolved config less seed, name and how
it ran, plus the code that trained it: pbx's, and an env's own) agree. Otherwise
:func:`pool` names the differing keys, or, when asked to split, groups the runs by
those keys' values and puts the values in the labels. Across games the env is the
one key allowed to differ (the hash of an env's own code must still agree among the
runs of each env). The versions of the libraries that trained the runs are not part
of a fingerprint: a group whose runs differ in them is pooled, with a note naming
them (:attr:`Pooled.notes`).
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

from pbx.errors import UsageError
from pbx.fingerprint import ENV_CODE, ENV_CONTINUED, PROVENANCE, fingerprint, library_versions
from pbx.members import AUGMENTATION
from pbx.members.toys.toy import TOY_ENVS
from pbx.reporting.runs import Run

ENV_KEY = "run.env"
ENV_CODE_KEYS = (f"{PROVENANCE}.{ENV_CODE}", f"{PROVENANCE}.{ENV_CONTINUED}")
"""The hash of an env's own code: where the env may differ within a group (a strategy over several games), runs
of one env must still agree in it."""


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
    notes: tuple[str, ...] = ()
    """One line for each group whose runs were trained with other library versions (pooled all the same)."""

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
        ignore: fingerprint keys allowed to differ within a group (the env: a strategy over several games;
            the runs of each env then agree in the hash of its code, :data:`ENV_CODE_KEYS`).

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
        keys = _differing(prints, [run.env for run in members] if ENV_KEY in ignore else None)
        if keys and not split:
            raise UsageError(f"runs under {label!r} are not one experiment: {_difference(members, prints, keys)}; "
                             f"report them apart, or give --split to group them by those values")
        for run, p in zip(members, prints):
            name = f"{label} ({_values(p, keys, short=True)})" if keys else label
            groups.setdefault(name, []).append(run)
            origin[name] = named[label]
    notes = [*(_library_note(label, members) for label, members in groups.items()), _budget_note(groups)]
    return Pooled(groups, origin, tuple(note for note in notes if note))


def _budget_note(groups: Mapping[str, Sequence[Run]]) -> str:
    """``the strategies were not trained on one budget ...: PBT max_budget 40, t_ready 4, members trained 40
    steps; none ...`` where the groups differ in ``max_budget``, ``t_ready`` or the steps their members really
    trained (BG-PBT's and IPBT's larger rounds leave theirs short by design); "" where they agree. A score
    comparison between them measures the budget too, which the reader must know to judge it."""
    def values(runs: Sequence[Run], read: Any) -> str:
        found = sorted({read(run) for run in runs})
        return f"{found[0]:,}" if len(found) == 1 else f"{found[0]:,} to {found[-1]:,}"

    budgets = {label: (values(runs, lambda run: int(run.config["run"]["max_budget"])),
                       values(runs, lambda run: int(run.config["run"]["t_ready"])),
                       values(runs, lambda run: int(run.frame["steps"].max())))
               for label, runs in groups.items()}
    if len(set(budgets.values())) <= 1:
        return ""
    return ("the strategies were not trained on one budget, so their scores differ by it too: "
            + "; ".join(f"{label} max_budget {budget}, t_ready {t_ready}, members trained {steps} steps"
                        for label, (budget, t_ready, steps) in budgets.items()))


def _library_note(label: str, runs: Sequence[Run]) -> str:
    """``runs under 'PBT' were trained with other library versions, pooled all the same (...): torch 2.1.0 (1 of
    3 runs), 2.3.0 (2 of 3 runs)``; "" where they agree. A resumed run's versions read ``2.1.0 then 2.3.0``."""
    versions = [library_versions(run.config.get(PROVENANCE)) for run in runs]
    names = dict.fromkeys(name for found in versions for name in found)
    parts = []
    for name in names:
        each = [" then ".join(found.get(name, ("unrecorded",))) for found in versions]
        if len(set(each)) > 1:
            counts = {version: each.count(version) for version in each}
            parts.append(f"{name} " + ", ".join(f"{version} ({count} of {len(runs)} runs)"
                                                for version, count in counts.items()))
    return (f"runs under {label!r} were trained with other library versions, pooled all the same (pbx compares "
            f"code and settings, not versions): {'; '.join(parts)}") if parts else ""


MOST_KEYS_SHOWN = 4
"""A refusal names at most this many differing keys with their values; past it, the first difference that matters
(:func:`_difference`)."""
BUDGET_KEYS = ("run.max_budget", "run.t_ready")


def _difference(members: Sequence[Run], prints: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    """What keeps ``members`` apart, in one short line: the differing keys with each value, where they are few;
    else the first difference that matters, the env, then the agent (:func:`member_kind`), then the budget, which
    the other keys differ with (a toy run and a CartPole run differ in some 80 settings)."""
    if len(keys) <= MOST_KEYS_SHOWN:
        shown = "; ".join(f"{run.path}: {_values(p, keys)}" for run, p in _first_per_value(members, prints, keys))
        return f"they differ in {', '.join(keys)} ({shown})"
    for what, read in (("env", lambda run: run.env), ("agent", member_kind)):
        firsts: dict[str, Run] = {}
        for run in members:
            firsts.setdefault(str(read(run)), run)
        if len(firsts) > 1:
            trains = ", ".join(f"{run.path}: {value}" for value, run in firsts.items())
            return f"they train other {what}s ({trains}), and {len(keys)} settings differ with the {what}"
    budget = [k for k in BUDGET_KEYS if k in keys]
    if budget:
        shown = "; ".join(f"{run.path}: {_values(p, budget)}" for run, p in _first_per_value(members, prints, budget))
        return f"they differ in their budget ({shown}), and in {len(keys) - len(budget)} other settings"
    return (f"they differ in {len(keys)} settings, {', '.join(keys[:MOST_KEYS_SHOWN])} and "
            f"{len(keys) - MOST_KEYS_SHOWN} more")


def _differing(prints: Sequence[Mapping[str, Any]], games: Sequence[str] | None = None) -> list[str]:
    """The keys whose values differ among ``prints``; given each run's game, the keys of an env's code
    (:data:`ENV_CODE_KEYS`) only where they differ among the runs of one game."""
    missing = object()

    def differ(key: str, among: Sequence[Mapping[str, Any]]) -> bool:
        return len({repr(p.get(key, missing)) for p in among}) > 1

    by_game: dict[str, list[Mapping[str, Any]]] = {}
    for game, p in zip(games or [], prints):
        by_game.setdefault(game, []).append(p)
    keys = {k for p in prints for k in p}
    return sorted(k for k in keys if (any(differ(k, among) for among in by_game.values())
                                      if games is not None and k in ENV_CODE_KEYS else differ(k, prints)))


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
