"""The input contract, generated from the settings tables: bad input is a :class:`~pbx.errors.UsageError`, never
anything else, and never a value no setting should hold.

Every field of :class:`~pbx.settings.RunSettings`, of each registered strategy's settings
(:data:`pbx.strategies.STRATEGIES`), of each member's settings (each ``--algo`` of :data:`pbx.members.ALGOS`,
DrAC's PPO, the toys) and of each task family's env settings (:data:`pbx.envs.FAMILIES`) is tried through
:func:`pbx.config.resolve`, as ``-m`` and the Python API give it, with a value of the wrong type, an empty string
and an unknown word, and where it is a number with nan, inf, a negative, zero, a huge value and ``1e400`` as the
command line spells it. Each must be refused with a one-line ``UsageError``, or taken where :data:`TAKES` says
that value is one the field means (``burn_in=0``, ``patience`` past any run's length); what is taken is checked
to be what was asked, and finite. A field added tomorrow is tried the same way, and a value it takes that no row
here names fails the test until its check, or its row, is written. Nothing trains: a few thousand resolves, a few seconds.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import shutil
import types
import typing
from typing import Any, Mapping

import pytest

from pbx.config import resolve
from pbx.envs import FAMILIES
from pbx.errors import UsageError
from pbx.members import ALGOS, algo_class
from pbx.members.ppo.drac import DrACMember
from pbx.members.sb3.settings import SB3Settings
from pbx.members.toys.deceptive import DeceptiveToyMember
from pbx.members.toys.toy import ToyMember
from pbx.settings import RunSettings
from pbx.strategies import STRATEGIES

HUGE_INT, HUGE_FLOAT = 10**18, 1e300

TAKES: dict[str, set[str]] = {
    # run: a guard of 0 is off; a guard, a margin or an evaluation period past any run never acts
    "burn_in": {"zero", "huge"}, "margin_rel": {"zero", "huge"}, "margin_abs": {"zero", "huge"},
    "sigma_k": {"huge"}, "eval_every": {"huge"}, "seed": {"zero"},
    "name": {"word"},  # any one folder name
    # strategies: limits that a huge value lifts (a window of all rows, the screen's every start, no cap), periods
    # no run reaches, weights with no upper end (UCB's kappa: pure exploration), zero shares and probabilities
    "resample_prob": {"zero"}, "window": {"huge"}, "fit_rows": {"huge"}, "restarts": {"huge"}, "signal_cap": {"huge"},
    "max_eval_rounds": {"huge"}, "smoothing": {"zero", "huge"}, "ucb_kappa": {"zero", "huge"}, "tr_factor": {"huge"},
    "succ_tol": {"huge"}, "fail_tol": {"huge"}, "patience": {"huge"}, "checkpoint_minutes": {"zero", "huge"}, "slow_rounds": {"huge"},
    "step_factor": {"huge"},  # a restart round that long never fits the budget: no restart
    "shrink": {"zero"}, "perturb": {"zero"}, "random_configs": {"zero"}, "random_weights": {"zero"},
    # members: no evaluation, no clipping (a huge clip), coefficients of 0 (off) or any size (a member whose loss
    # overflows diverges, which pbx handles), levels from 0, thresholds no run reaches
    "eval_episodes": {"zero"}, "eval_max_steps": {"huge"}, "gae_lambda": {"zero"},
    "ent_coef": {"zero", "huge"}, "vf_coef": {"zero", "huge"}, "aug_coef": {"zero", "huge"},
    "learning_rate": {"huge"}, "max_grad_norm": {"huge"}, "clip_range": {"huge"},
    # env settings: levels from 0, no sticky actions, no no-op start
    "num_levels": {"zero"}, "start_level": {"zero"}, "repeat_action_probability": {"zero"}, "noop_max": {"zero"},
    "learning_starts": {"zero", "huge"}, "tau": {"zero"}, "gradient_steps": {"negative"},  # -1: one per env step
    "policy_delay": {"huge"}, "target_policy_noise": {"zero", "huge"}, "target_noise_clip": {"zero", "huge"},
    "noise_std": {"zero", "huge"}, "target_update_interval": {"huge"}, "schedule_timesteps": {"huge"},
    "exploration_initial_eps": {"zero"}, "exploration_final_eps": {"zero"}, "horizon": {"huge"},
}
"""The probes (:func:`probes`) each field takes, by field name: a value that is one the field means. Any other is
refused."""

RUN = {"env": "toy", "search": "PBT"}
MEMBER_ENVS = {"ppo": "bigfish", "a2c": "CartPole-v1", "sac": "Pendulum-v1", "td3": "Pendulum-v1",
               "dqn": "CartPole-v1"}
"""The env each ``--algo`` is tried on."""
FAMILY_ENVS = {"ProcGen": "bigfish", "Atari": "ALE/Pong-v5", "classic control": "CartPole-v1"}
"""The env each family's env settings are tried on (one per settings class)."""
SPACES = {"learning_rate": {"type": "continuous", "low": 1e-4, "high": 1e-3, "log": True},
          "gamma": {"type": "continuous", "low": 0.9, "high": 0.99}}
"""An SB3 member is tried with a space of one hyperparameter, the first of these that is not the field tried: a
searched hyperparameter's setting is refused whatever its value, which would hide the check of its own."""


def _base(hint: Any) -> Any:
    """The type a field holds (``int`` for ``int | None``; ``list`` for ``list[int] | None``)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def probes(hint: Any) -> dict[str, Any]:
    """The bad or edge values a field of type ``hint`` is tried with, by name."""
    kind = _base(hint)
    found: dict[str, Any] = {"wrong type": {"a": 1}, "empty": "", "word": "bogus"}
    if kind in (int, float):
        found.update({"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "negative": -1, "zero": 0,
                      "huge": HUGE_INT if kind is int else HUGE_FLOAT, "1e400": "1e400"})
    elif kind is bool:
        found["two"] = 2
    elif kind is list and typing.get_args(hint) and _base(typing.get_args(hint)[0]) is int:
        found.update({"nan item": [math.nan], "negative item": [-1], "zero item": [0], "huge item": [HUGE_INT]})
    return found


def _cases() -> dict[str, tuple[str, type, dict[str, Any]]]:
    """Each settings class to try: its section, the class, and a layer that resolves with it."""
    cases: dict[str, tuple[str, type, dict[str, Any]]] = {"run": ("run", RunSettings, {"run": RUN})}
    for name, cls in STRATEGIES.items():
        layer: dict[str, Any] = {"run": {**RUN, "search": name, "pop_size": 8}}  # FIRE needs 6
        if name == "replay":
            layer["strategy"] = {"schedule": [{"steps": 0, "config": {"h0": 0.5, "h1": 0.5}}]}
        cases[f"strategy {name}"] = ("strategy", cls.settings_cls, layer)
    for algo, env in MEMBER_ENVS.items():
        layer = {"run": {**RUN, "env": env, "algo": algo}}
        cases[f"member {algo}"] = ("member", algo_class(algo).settings_cls, layer)
    cases["member DrAC"] = ("member", DrACMember.settings_cls,
                            {"run": {**RUN, "env": "bigfish"}, "member": {"aug_coef": 0.1}})
    for family, env in FAMILY_ENVS.items():
        task = next(task for task in FAMILIES if task.name == family)
        if task.simulator is None or importlib.util.find_spec(task.simulator) is not None:  # Atari: the extra
            cases[f"env_settings {family}"] = ("env_settings", task.settings, {"run": {**RUN, "env": env}})
    cases["member toy"] = ("member", ToyMember.settings_cls, {"run": RUN})
    cases["member toy-deceptive"] = ("member", DeceptiveToyMember.settings_cls,
                                     {"run": {**RUN, "env": "toy-deceptive"}})
    return {name: case for name, case in cases.items() if dataclasses.fields(case[1])}  # none and random have none


CASES = _cases()


def test_every_agent_is_tried_and_takes_names_only_fields_tried() -> None:
    assert set(MEMBER_ENVS) == set(ALGOS), "give a new --algo an env in MEMBER_ENVS"
    tried = {next(task.settings for task in FAMILIES if task.name == family) for family in FAMILY_ENVS}
    assert tried == {task.settings for task in FAMILIES}, "give a new family's env settings an env in FAMILY_ENVS"
    fields = {f.name for _, cls, _ in CASES.values() for f in dataclasses.fields(cls)}
    qualified = {f"{cls.__name__}.{f.name}" for _, cls, _ in CASES.values() for f in dataclasses.fields(cls)}
    assert set(TAKES) <= fields | qualified, f"TAKES names no field: {sorted(set(TAKES) - fields - qualified)}"


def _layer(base: Mapping[str, Any], section: str, cls: type, name: str, value: Any) -> dict[str, Any]:
    layer = {key: dict(part) for key, part in base.items()}
    layer[section] = {**layer.get(section, {}), name: value}
    if issubclass(cls, SB3Settings):
        searched = next(p for p in SPACES if p != name)
        layer["space"] = {searched: SPACES[searched]}
    return layer


def _valid(value: Any, asked: Any, hint: Any) -> bool:
    """Whether a taken value is what was asked, of the field's type, and finite."""
    kind = _base(hint)
    if kind is float:
        return isinstance(value, float) and math.isfinite(value) and value == float(asked)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value == asked
    if kind is str:
        return isinstance(value, str) and value == str(asked)
    return value == asked


@pytest.mark.parametrize("case", list(CASES))
def test_every_field_refuses_bad_input_with_one_line_and_takes_only_what_it_means(case: str) -> None:
    section, cls, base = CASES[case]
    resolve([base])  # the layer itself resolves: a probe's refusal is the probe's
    hints = typing.get_type_hints(cls)
    wrong: list[str] = []
    tried = 0  # probes
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        takes = TAKES.get(f"{cls.__name__}.{field.name}", TAKES.get(field.name, set()))
        for probe, value in probes(hint).items():
            tried += 1
            where = f"{field.name}={value!r} ({probe})"
            try:
                cfg = resolve([_layer(base, section, cls, field.name, value)])
            except UsageError as err:
                if "\n" in str(err):
                    wrong.append(f"{where}: a refusal of more than one line: {err}")
                elif probe in takes:
                    wrong.append(f"{where}: refused, but TAKES says the field takes it: {err}")
                continue
            except Exception as err:  # noqa: BLE001  (the contract: nothing but UsageError)
                wrong.append(f"{where}: {type(err).__name__}: {err}")
                continue
            got = getattr(getattr(cfg, section), field.name)
            if probe not in takes:
                wrong.append(f"{where}: taken (as {got!r}); refuse it, or add {probe!r} to TAKES[{field.name!r}]")
            elif not _valid(got, value, hint):
                wrong.append(f"{where}: taken as {got!r}, not the finite value asked")
    assert not wrong, f"{case}: {len(wrong)} of {tried} probes broke the contract:\n" + "\n".join(wrong)


SWEEP = {"run": {"env": "toy", "pop_size": 4, "t_ready": 4, "max_budget": 40}, "sweep": {"search": ["none", "PBT"]},
         "seeds": 2}
"""An experiment file that loads; each probe replaces one of its keys (or one field of its ``slurm:``)."""
SWEEP_TAKES: dict[str, set[str]] = {
    "time_limit": {"huge"},  # a limit no sweep reaches
    "slurm.time": {"word"}, "slurm.mem": {"word"}, "slurm.partition": {"word"}, "slurm.gpus": {"zero", "huge"},
    "slurm.ranks": {"huge"}, "slurm.cpus_per_task": {"huge"}, "slurm.max_parallel": {"huge"},
}
"""The probes each sweep-file key takes, as :data:`TAKES` for settings: any word names a Slurm time, memory or
partition and any count is a request, which Slurm checks against its cluster when the script is submitted; no
GPU is a GPU count."""


def _sweep_keys() -> dict[str, Any]:
    """Each key of an experiment file besides the run's settings, by name, and its type."""
    from pbx.slurm import SlurmSettings

    keys: dict[str, Any] = {"seeds": int, "time_limit": float}
    keys.update({f"slurm.{f.name}": hint for f in dataclasses.fields(SlurmSettings)
                 for hint in [typing.get_type_hints(SlurmSettings)[f.name]]})
    return keys


def test_every_sweep_file_key_refuses_bad_input_with_one_line(tmp_path) -> None:
    """The experiment file's own keys (``seeds``, ``time_limit``, each ``slurm:`` field) through ``load_sweep``, the
    probes of the settings' test: refused in one line, or taken where :data:`SWEEP_TAKES` says, and nothing written
    either way (the sweep folder is made only when the sweep runs)."""
    import yaml

    from pbx.sweep_file import load_sweep

    wrong: list[str] = []
    file = tmp_path / "exp.yaml"
    for key, hint in _sweep_keys().items():
        for probe, value in probes(hint).items():
            content = {k: (dict(v) if isinstance(v, dict) else v) for k, v in SWEEP.items()}
            section, _, name = key.rpartition(".")
            (content.setdefault(section, {}) if section else content)[name] = value
            file.write_text(yaml.safe_dump(content))
            try:
                load_sweep(file, out=tmp_path / "out", ranks=None if section else 1)
            except UsageError as err:
                if "\n" in str(err):
                    wrong.append(f"{key}={value!r} ({probe}): a refusal of more than one line: {err}")
                continue
            except Exception as err:  # noqa: BLE001  (the contract: nothing but UsageError)
                wrong.append(f"{key}={value!r} ({probe}): {type(err).__name__}: {err}")
                continue
            if probe not in SWEEP_TAKES.get(key, set()):
                wrong.append(f"{key}={value!r} ({probe}): taken; refuse it, or add {probe!r} to SWEEP_TAKES")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]
    assert not wrong, f"{len(wrong)} probes broke the contract:\n" + "\n".join(wrong)


FLAGS: dict[str, tuple[list[str], set[str]]] = {
    # the commands' own flags, beyond the run settings' (tried above): the probes each takes
    "pbx.train --time-limit": (["--env", "toy", "--time-limit"], {"huge"}),
    "pbx.train --run-dir": (["--env", "toy", "-m", "max_budget=8", "--run-dir"], {"word", "zero", "negative", "nan",
                                                                                  "inf", "1e400", "huge"}),
    "pbx.train --resume": (["--resume"], set()),
    "pbx.train --config": (["--config"], set()),
    "pbx.sweep --seeds": (["SWEEP", "--seeds"], {"zero"}),
    "pbx.sweep --only": (["SWEEP", "--only"], {"zero"}),
    "pbx.sweep --time-limit": (["SWEEP", "--time-limit"], {"huge"}),
}
"""Each flag, the command line before its value (``SWEEP``: the experiment file), and the probes it takes (any name
is a folder for ``--run-dir``; ``--seeds 0`` is seed list [0]; ``--only 0`` the first run; a time limit no run
reaches)."""


@pytest.mark.parametrize("flag", list(FLAGS))
def test_every_command_flag_refuses_bad_input_with_one_line_and_exit_2(flag: str, tmp_path, monkeypatch,
                                                                      capsys) -> None:
    """The values the settings are tried with, as a user types them after each flag of the commands' own: exit 2
    and one ``error:`` line, nothing written, or (where :data:`FLAGS` says the flag takes it) a run or sweep."""
    import importlib

    import yaml

    command, (before, takes) = flag.split()[0], FLAGS[flag]
    main = importlib.import_module(command).main
    work = tmp_path / "work"
    work.mkdir()
    (work / "exp.yaml").write_text(yaml.safe_dump({**SWEEP, "run": {**SWEEP["run"], "max_budget": 8}}))
    monkeypatch.chdir(work)
    spelled = {"empty": "", "word": "bogus", "nan": "nan", "inf": "inf", "-inf": "-inf", "negative": "-1",
               "zero": "0", "huge": str(10**18), "1e400": "1e400"}
    wrong = []
    for probe, text in spelled.items():
        argv = [a if a != "SWEEP" else "exp.yaml" for a in before] + [text]
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own refusal (pbx's parser: one error line, exit 2)
            code = exit_.code
        out, err = capsys.readouterr()
        written = sorted(p.name for p in work.iterdir() if p.name != "exp.yaml")
        if probe in takes:
            if code not in (0, 2):
                wrong.append(f"{probe} ({text!r}): exit {code}: {err}")
        elif code != 2 or not err.startswith("error: ") or err.count("\n") != 1 or written:
            wrong.append(f"{probe} ({text!r}): exit {code}, {err!r}, wrote {written}")
        for name in written:  # what a taken value made, out of the next probe's way
            shutil.rmtree(work / name) if (work / name).is_dir() else (work / name).unlink()
    assert not wrong, f"{flag}:\n" + "\n".join(wrong)
