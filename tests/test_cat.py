"""Categorical hyperparameters: ``--cat_exp`` on synthetic histories, on toy-cat end to end, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pbx.config import resolve
from pbx.history import History, read_csv
from pbx.space import Categorical, Continuous, Space
from pbx.strategies import PB2, PB2Settings, RunContext
from pbx.strategies.bayes import categorical
from pbx.strategies.bayes.categorical import CategoryBandits
from pbx.train import main

from conftest import kill_after, rate_history, start_train

PEAKS = {"a": 0.2, "b": 0.8}
"""Each category's best x; b's rate peaks higher, so a GP that ignores the category goes to 0.8."""
HEIGHT = {"a": 1.0, "b": 1.5}


@pytest.fixture
def space() -> Space:
    return Space({"x": Continuous(0.0, 1.0), "opt": Categorical(("a", "b"))})


def two_peak_history(space: Space) -> History:
    """8 members, 12 rounds, each drawing a fresh config each round; its rate peaks at its category's best x."""
    return rate_history(space, lambda c: HEIGHT[c["opt"]] * np.exp(-((c["x"] - PEAKS[c["opt"]]) / 0.15) ** 2),
                        rounds=12, pop=8)


def explore(space: Space, cat_exp: str, category: str, monkeypatch) -> tuple[list[float], list[float]]:
    """The continuous picks of PB2 with ``cat_exp``, and the rows of the GPs behind them, when EXP3 gives
    every recipient ``category``."""
    monkeypatch.setattr(CategoryBandits, "draw", lambda self, k, rng: [{"opt": category}] * k)
    strategy = PB2(PB2Settings(cat_exp=cat_exp), context=RunContext(rounds=20, pop_size=8))
    decisions = strategy.decide(two_peak_history(space), space, np.random.default_rng(0))
    explored = [d for d in decisions if d.explored]
    assert explored and all(d.config["opt"] == category and d.info["gp"] == 1 for d in explored)
    return [float(d.config["x"]) for d in explored], [d.info["rows"] for d in explored]


def explored_x(space: Space, cat_exp: str, category: str, monkeypatch) -> list[float]:
    return explore(space, cat_exp, category, monkeypatch)[0]


@pytest.mark.parametrize("category", ["a", "b"])
def test_exp3_dep_fits_only_the_chosen_categorys_rows(space: Space, category: str, monkeypatch) -> None:
    picks, rows = explore(space, "exp3_dep", category, monkeypatch)
    # The round's first pick goes to the category's own peak; later ones are spread from it by the pending
    # points, but a GP fit on every row would send them towards b's higher peak.
    other = PEAKS["b" if category == "a" else "a"]
    assert abs(picks[0] - PEAKS[category]) < 0.15, picks
    assert all(abs(x - PEAKS[category]) < abs(x - other) for x in picks), picks
    frame = two_peak_history(space).frame
    assert rows == [float(np.sum((frame["round"] >= 1) & (frame["opt"] == category)))] * len(rows)


def test_exp3_indep_fits_every_row(space: Space, monkeypatch) -> None:
    _, rows = explore(space, "exp3_indep", "a", monkeypatch)
    assert rows == [float(8 * 11)] * len(rows)


@pytest.mark.parametrize("category", ["a", "b"])
def test_cocabo_conditions_on_the_category_that_runs(space: Space, category: str, monkeypatch) -> None:
    """The donors are best on b (its peak is higher); a recipient given a still goes to a's peak."""
    picks = explored_x(space, "cocabo", category, monkeypatch)
    assert np.mean(np.abs(np.array(picks) - PEAKS[category]) < 0.15) >= 0.5, picks


def test_cocabo_records_lambda_and_the_arm_probabilities(space: Space) -> None:
    strategy = PB2(PB2Settings(cat_exp="cocabo"), context=RunContext(rounds=20, pop_size=8))
    decisions = strategy.decide(two_peak_history(space), space, np.random.default_rng(0))
    info = [d.info for d in decisions if d.explored]
    assert info and all(0 <= i["lambda"] <= 1 and np.isclose(i["exp3.opt.a"] + i["exp3.opt.b"], 1) for i in info)
    assert len({d.config["opt"] for d in decisions if d.explored}) == 2  # two recipients, two distinct arms


def test_bandit_strategies_need_the_run_context(space: Space) -> None:
    with pytest.raises(ValueError, match="RunContext"):
        PB2(PB2Settings(cat_exp="exp3")).decide(two_peak_history(space), space, np.random.default_rng(0))


TOY_CAT = ("--env", "toy-cat", "--seed", "3", "--t_ready", "4", "--max_budget", "24")


def test_every_cat_exp_runs_end_to_end_on_toy_cat(tmp_path, capsys) -> None:
    """cocabo as a user starts it, in a subprocess; the others through the same ``main`` in this process
    (a subprocess is 4 s of imports on a busy 2-core machine)."""
    cocabo = start_train(*TOY_CAT, "--search", "PB2", "--cat_exp", "cocabo", "--run-dir", str(tmp_path / "cocabo"))
    variants = {"random": (), "fixed": ("--fixed_cat_val", "adam"), "exp3": (), "exp3_indep": ()}
    for name, extra in variants.items():
        assert main([*TOY_CAT, "--search", "PB2", "--cat_exp", name, *extra, "--run-dir", str(tmp_path / name)]) == 0
    assert main([*TOY_CAT, "--search", "PBT", "--cat_exp", "fixed", "--run-dir", str(tmp_path / "pbt")]) == 0
    assert capsys.readouterr().err == ""
    out, err = cocabo.communicate(timeout=120)
    assert cocabo.returncode == 0 and err == "" and out.splitlines()[-1].startswith("done:"), err
    frames = {name: read_csv(tmp_path / name / "history.csv") for name in [*variants, "pbt", "cocabo"]}
    assert (frames["fixed"]["optimiser"] == "adam").all()
    assert (frames["pbt"]["optimiser"] == "sgd").all()  # the space's default
    for name in ("exp3", "cocabo"):
        frame = frames[name]
        assert frame["optimiser"].nunique() > 1 and len(frame) == 4 * 6
        reasons = pd.json_normalize(pd.read_csv(tmp_path / name / "strategy.csv")["info"].map(json.loads).tolist())
        assert {f"exp3.optimiser.{c}" for c in ("sgd", "momentum", "rmsprop", "adam")} <= set(reasons)
    config = (tmp_path / "exp3" / "config.yaml").read_text()
    assert "cat_exp: exp3_dep" in config and "optimiser" in config


def test_a_killed_exp3_run_resumes_to_the_uninterrupted_history(tmp_path, capsys) -> None:
    """EXP3's weights are replayed from the history: the resumed run makes the uninterrupted run's picks."""
    args = ("--env", "toy-cat", "--search", "PB2", "--cat_exp", "exp3", "--seed", "1")
    killed = start_train(*args, "--run-dir", str(tmp_path / "killed"))
    history = tmp_path / "killed" / "history.csv"
    kill_after(killed, history, rows=4 * 6)
    assert 5 <= read_csv(history)["round"].max() < 24, "the kill should land mid-run"
    assert main([*args, "--run-dir", str(tmp_path / "whole")]) == 0
    resumed = start_train("--resume", str(tmp_path / "killed"))
    assert resumed.wait(timeout=120) == 0, resumed.stderr.read()
    a, b = (read_csv(tmp_path / name / "history.csv").drop(columns="wall_s") for name in ("whole", "killed"))
    pd.testing.assert_frame_equal(a, b)
    assert a["optimiser"].nunique() > 1


BAD = [
    (["--env", "toy-cat", "--search", "PB2", "--cat_exp", "exp4"], "unknown cat_exp 'exp4'"),
    (["--env", "toy-cat", "--search", "PB2", "--cat_exp", "fixed", "--fixed_cat_val", "lion"],
     "fixed_cat_val 'lion' is not a choice"),
    (["--env", "toy-cat", "--search", "PB2", "--fixed_cat_val", "adam"], "fixed_cat_val applies to cat_exp fixed"),
    (["--env", "toy", "--search", "PB2", "--cat_exp", "exp3"], "the search space has none"),
    (["--env", "toy", "--search", "PB2", "--cat_exp", "cocabo"], "the search space has none"),
    (["--env", "toy-cat", "--search", "PBT", "--cat_exp", "exp3"], "needs --search PB2"),
    # the trust region's GP models the continuous hyperparameters alone: EXP3 and CoCaBO would have nothing to act on
    (["--env", "toy-cat", "--search", "BGPBT", "--cat_exp", "cocabo"], "needs --search PB2; --search BGPBT takes"),
    (["--env", "toy-cat", "--search", "IPBT", "--cat_exp", "exp3"], "needs --search PB2; --search IPBT takes"),
    (["--env", "toy-cat", "--search", "none", "--cat_exp", "fixed"], "settings of --search PBT and PB2, not none"),
]


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_categorical_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path, capsys) -> None:
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "run").exists()


def test_cat_exp_on_a_procgen_game_takes_the_mixed_space_and_drac() -> None:
    cfg = resolve([{"run": {"env": "bigfish", "search": "PB2"}, "strategy": {"cat_exp": "exp3"}}])
    assert cfg.space_source == "ppo_procgen_mix.yaml" and cfg.member_cls.__name__ == "DrACMember"
    assert "aug_type" in cfg.space.categorical
    plain = resolve([{"run": {"env": "bigfish", "search": "none"}}])
    assert plain.member_cls.__name__ == "PPOMember" and not plain.space.categorical
    asked = resolve([{"run": {"env": "bigfish", "search": "none"}, "member": {"aug_type": "flip"}}])
    assert asked.member_cls.__name__ == "DrACMember"


def test_fixed_holds_the_category_from_the_start(space: Space) -> None:
    settings = PB2Settings(cat_exp="fixed", fixed_cat_val="b")
    configs = PB2(settings).initial_configs(space, 6, np.random.default_rng(0))
    assert [c["opt"] for c in configs] == ["b"] * 6 and len({c["x"] for c in configs}) == 6
    assert categorical.fixed_values(space, None) == {"opt": "a"}
