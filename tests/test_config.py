"""Resolving a run's config: every input either takes effect or is refused, and config.yaml says what runs."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

import pbx
from pbx.config import resolve
from pbx.config_input import route
from pbx.settings import load_yaml
from pbx.errors import UsageError
from pbx.fingerprint import code_hash, differing_keys, env_sources, provenance
from pbx.sweep_file import load_sweep

ROOT = Path(__file__).resolve().parent.parent
CARTPOLE = {"run": {"env": "CartPole-v1", "search": "none"}}


@pytest.mark.parametrize("experiment", sorted((ROOT / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_experiment_files_resolve(experiment: Path) -> None:
    if "sweep" in load_yaml(experiment):  # a sweep's file: every variant must resolve
        sweep = load_sweep(experiment)
        configs = [resolve([sweep.experiment, v.settings]) for v in sweep.variants]
        assert len(configs) >= 1 and len(sweep.seeds) >= 1
    else:
        configs = [resolve([load_yaml(experiment)])]
    # every run exploits at least once (a t_ready or budget typo would leave one round); the step-size study's
    # long step exploits exactly once, by design
    rounds = [cfg.rules.fixed_rounds for cfg in configs]
    assert all(n >= 2 for n in rounds) and max(rounds) >= 3


@pytest.mark.parametrize("spelling, name", [("pb2", "PB2"), ("Fixed", "none"), ("Random", "random"), ("NONE", "none")])
def test_search_takes_the_reference_spellings(spelling: str, name: str) -> None:
    assert resolve([{"run": {"env": "toy", "search": spelling}}]).run.search == name


def test_a_key_of_two_sections_needs_its_section() -> None:
    # No two shipped sections share a name today; a strategy or member that adds one must not win silently.
    one = dataclasses.make_dataclass("One", [("seed", int)])
    two = dataclasses.make_dataclass("Two", [("seed", int)])
    with pytest.raises(UsageError, match="'seed' is a setting of the run and the member sections; say which: "
                                         "run.seed, member.seed"):
        route("seed", {"run": one, "member": two}, "PBT", "toy")
    assert route("member.seed", {"run": one, "member": two}, "PBT", "toy") == ("member", "seed")


@pytest.mark.parametrize("layer, overrides", [
    (CARTPOLE, ["learning_rate=1e-4"]),
    (CARTPOLE, ["member.learning_rate=1e-4"]),
    ({**CARTPOLE, "member": {"learning_rate": 1e-4}}, []),
    ({**CARTPOLE, "learning_rate": 1e-4}, []),
], ids=["-m", "-m member.", "member section", "flat key"])
def test_a_setting_of_a_searched_hyperparameter_is_refused(layer: dict, overrides: list[str]) -> None:
    with pytest.raises(UsageError, match="learning_rate=\\S+ has no effect: learning_rate is in the search "
                                         "space \\(ppo_classic.yaml\\), which sets it per member; set its default"):
        resolve([layer], overrides)


def test_a_setting_outside_the_space_applies() -> None:
    assert resolve([CARTPOLE], ["vf_coef=0.7"]).member.vf_coef == 0.7


def test_config_yaml_records_searched_hyperparameters_only_in_the_space() -> None:
    config = resolve([CARTPOLE]).to_dict()
    assert "learning_rate" not in config["member"] and config["space"]["learning_rate"]["default"] == 1e-3
    assert resolve([config]).to_dict() == config  # the record rebuilds the same run


def test_an_older_run_config_with_searched_settings_at_their_defaults_still_resolves() -> None:
    config = resolve([CARTPOLE]).to_dict()
    older = {**config, "member": {**config["member"], "learning_rate": 5e-4}}  # what pbx wrote before
    assert resolve([older]).to_dict() == config
    with pytest.raises(UsageError, match="learning_rate=0.0001 has no effect"):
        resolve([{**config, "member": {**config["member"], "learning_rate": 1e-4}}])


def test_a_space_named_by_m_replaces_the_inline_space_of_a_run_config(tmp_path) -> None:
    config = resolve([{"run": {"env": "toy"}}]).to_dict()
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text("h0: {type: continuous, low: 0.1, high: 0.2}\nh1: {type: continuous, low: 0.1, high: 0.2}\n")
    cfg = resolve([config], [f"space={narrow}"])
    assert cfg.space.params["h0"].high == 0.2 and cfg.to_dict()["run"]["space"] == str(narrow)
    assert resolve([config]).space.params["h0"].high == 1.0  # no space named: the inline one stands


@pytest.mark.parametrize("search, cat_exp", [("PBT", "random"), ("PB2", "random"), ("PBT", "fixed")])
def test_cat_exp_random_or_fixed_trains_what_leaving_it_out_trains(search: str, cat_exp: str) -> None:
    from pbx.members.ppo.ppo import PPOMember

    plain = resolve([{"run": {"env": "bigfish", "search": search}}])
    spelled = resolve([{"run": {"env": "bigfish", "search": search}}], [f"cat_exp={cat_exp}"])
    assert spelled.member_cls is plain.member_cls is PPOMember and spelled.space_source == "ppo_procgen.yaml"
    assert differing_keys(plain.to_dict(), spelled.to_dict()) == ([] if cat_exp == "random" else ["strategy.cat_exp"])
    # a bandit picks categories: PB2-Mix's space, whose augmentation makes the member DrAC's PPO
    assert resolve([{"run": {"env": "bigfish", "search": "PB2"}}], ["cat_exp=cocabo"]).space_source == \
        "ppo_procgen_mix.yaml"


def test_config_yaml_records_the_pbx_that_started_the_run_and_takes_it_back() -> None:
    config = resolve([{"run": {"env": "toy"}}]).to_dict()
    assert config["pbx"] == {**provenance(), "libraries": {"numpy": np.__version__}}  # a toy computes with NumPy only
    assert config["pbx"]["version"] == pbx.__version__
    assert config["pbx"]["commit"] is None or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", config["pbx"]["commit"])
    other = {**config, "pbx": {"version": "0.0.1", "commit": None}}
    assert resolve([other]).to_dict() == config  # a new run from another's record is this pbx's
    older = {k: v for k, v in config.items() if k != "pbx"}  # a folder from before the record
    assert resolve([older]).to_dict() == config
    with pytest.raises(UsageError, match="config section 'pbx' .* must be a mapping of version, commit and code"):
        resolve([{**config, "pbx": "0.1.0"}])


def test_the_code_hash_covers_every_file_of_the_package_committed_or_not(tmp_path) -> None:
    package = Path(pbx.__file__).resolve().parent
    copy = tmp_path / "pbx"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert code_hash(copy) == code_hash(package) == provenance()["code"]
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "space.cpython-311.pyc").write_bytes(b"compiled")
    assert code_hash(copy) == code_hash(package)  # caches are not code
    (copy / "extra.py").write_text("X = 1\n")  # a new, untracked module
    with_module = code_hash(copy)
    (copy / "extra.py").unlink()
    (copy / "space.py").write_text((copy / "space.py").read_text() + "\n# an uncommitted edit\n")
    assert len({with_module, code_hash(copy), code_hash(package)}) == 3


def test_runs_of_the_same_code_pool_and_runs_of_other_code_never_do() -> None:
    config = resolve([{"run": {"env": "toy"}}]).to_dict()
    record = config["pbx"]
    docs_only = {**config, "pbx": {**record, "commit": "f" * 40}}  # another commit, the same pbx/ files
    assert differing_keys(config, docs_only) == []
    edited = {**config, "pbx": {**record, "code": "0" * 16}}
    assert differing_keys(config, edited) == ["pbx.code"]
    resumed = {**config, "pbx": {**record, "continued": ["1" * 16]}}  # rounds trained by other code
    assert differing_keys(config, resumed) == ["pbx.continued"]
    before = [{**config, "pbx": {"version": "0.1.0", "commit": c * 40}} for c in "ab"]  # records without a hash
    assert differing_keys(*before) == ["pbx.commit"]


OWN_ENV = """import gymnasium as gym
import numpy as np

from {package}.physics import reward


class Line(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {{}}

    def step(self, action):
        return np.zeros(1, np.float32), reward(action), False, True, {{}}


gym.register("{name}", entry_point=Line)
"""


def test_an_env_of_the_users_own_counts_by_its_code_and_library_versions_are_recorded_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record of a run on ``package.line:Name-v0`` holds a hash of the package's Python files (a helper the env
    imports among them) and the versions of SB3's stack; the hash counts in the fingerprint, the versions do not."""
    package = tmp_path / "own_tasks"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "line.py").write_text(OWN_ENV.format(package="own_tasks", name="OwnLine-v0"))
    (package / "physics.py").write_text("def reward(action):\n    return -float(abs(action[0]))\n")
    (package / "__pycache__" / "physics.cpython-311.pyc").write_bytes(b"compiled")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = "own_tasks.line:OwnLine-v0"
    assert [name for name, _ in env_sources(env)[0]] == ["own_tasks/__init__.py", "own_tasks/line.py",
                                                         "own_tasks/physics.py"]
    config = resolve([{"run": {"env": env, "algo": "sac", "search": "none"}}]).to_dict()
    record = config["pbx"]
    assert re.fullmatch(r"[0-9a-f]{16}", record["env_code"])
    assert list(record["libraries"]) == ["numpy", "torch", "gymnasium", "stable_baselines3"]
    assert yaml.safe_load(yaml.safe_dump(config)) == config  # every version is plain text in config.yaml
    (package / "physics.py").write_text("def reward(action):\n    return -10 * float(abs(action[0]))\n")
    edited = resolve([{"run": {"env": env, "algo": "sac", "search": "none"}}]).to_dict()
    assert differing_keys(config, edited) == ["pbx.env_code"]
    other_torch = {**config, "pbx": {**record, "libraries": {**record["libraries"], "torch": "0.0.1"},
                                     "libraries_continued": [{"torch": "0.0.2"}]}}
    assert differing_keys(config, other_torch) == []
    assert "env_code" not in resolve([CARTPOLE]).to_dict()["pbx"]  # gymnasium's own env: its version counts


def test_how_a_run_ran_never_splits_a_pool() -> None:
    cpu = resolve([{"run": {"env": "CartPole-v1", "device": "cpu"}}]).to_dict()
    gpu = resolve([{"run": {"env": "CartPole-v1", "device": "auto"}, "member": {"deterministic": True}}]).to_dict()
    assert differing_keys(cpu, gpu) == []
    assert differing_keys(cpu, resolve([{"run": {"env": "CartPole-v1", "seed": 3}, "member": {"vf_coef": 0.4}}])
                          .to_dict()) == ["member.vf_coef"]


def test_a_name_may_hold_a_folder_inside_runs_as_an_atari_runs_default_name_does() -> None:
    """``--env ALE/Pong-v5``'s default name is ``ALE/Pong-v5-PBT-s0-<time>``: its stored config.yaml must still
    resolve (a resume) now that a name outside runs/ is refused."""
    name = "ALE/Pong-v5-PBT-s0-20260101-000000"
    assert resolve([{"run": {"env": "toy", "name": name}}]).run.name == name
    for bad in ("", ".", "../x", "a/../../x", "/tmp/x"):
        with pytest.raises(UsageError, match="name must name a folder inside runs/"):
            resolve([{"run": {"env": "toy", "name": bad}}])
