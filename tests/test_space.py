import math

import numpy as np
import pytest
import yaml

from pbx.errors import UsageError
from pbx.space import Categorical, Continuous, Integer, Space, shown


def test_unit_cube_round_trip_linear_and_log(mixed_space: Space) -> None:
    config = {"lr": 3e-4, "ent": 0.05, "aug": "flip"}
    u = mixed_space.to_unit(config)
    assert u.shape == (2,)  # categorical parameters stay out of the cube
    assert u[0] == pytest.approx((math.log(3e-4) - math.log(1e-5)) / (math.log(1e-3) - math.log(1e-5)))
    back = mixed_space.from_unit(u, config)
    assert back["lr"] == pytest.approx(3e-4) and back["ent"] == pytest.approx(0.05) and back["aug"] == "flip"


def test_samples_respect_bounds_and_log_scale_spreads_over_decades() -> None:
    p = Continuous(1e-5, 1e-1, log=True)
    rng = np.random.default_rng(0)
    draws = np.array([p.sample(rng) for _ in range(2000)])
    assert draws.min() >= 1e-5 and draws.max() <= 1e-1
    # log-uniform: about a quarter of the draws per decade, not 90% in the top decade
    assert 0.2 < np.mean(draws < 1e-4) < 0.3


def test_clip_and_defaults(mixed_space: Space) -> None:
    assert mixed_space.clip({"lr": 1.0, "ent": -3.0, "aug": "crop"}) == {"lr": 1e-3, "ent": 0.0, "aug": "crop"}
    initial = mixed_space.initial()
    assert initial["aug"] == "crop" and initial["ent"] == pytest.approx(0.1)
    assert initial["lr"] == pytest.approx(1e-4)  # the middle of the range on the log scale


def test_load_yaml_accepts_exponents_without_dot(tmp_path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("lr: {type: continuous, low: 1e-5, high: 1e-3, log: true, default: 5e-4}\n"
                 "aug: {type: categorical, choices: [crop, flip]}\n")
    space = Space.load(f)
    assert space.params["lr"] == Continuous(1e-5, 1e-3, log=True, default=5e-4)
    assert space.params["aug"] == Categorical(("crop", "flip"))
    assert Space.from_dict(space.to_dict()) == space


@pytest.mark.parametrize("text, fragment", [
    ("a: {type: continuous, low: 1, high: 0}", "low must be below high"),
    ("a: {type: continuous, low: 0, high: 1, log: true}", "log-scale parameter needs low > 0"),
    ("a: {type: categorical, choices: []}", "at least one choice"),
    ("a: {type: uniform, low: 0, high: 1}", "unknown type 'uniform'; use 'continuous', 'integer' or 'categorical'"),
    ("a: {type: integer, high: 10}", "an integer parameter needs 'low'"),
    ("a: {type: integer, low: 0, high: 10, log: true}", "log-scale parameter needs low > 0"),
    ("a: {type: integer, low: 1, high: 10, default: 11}", "default 11 is outside [1, 10]"),
    ("a: {type: continuous, low: zero, high: 1}", "low must be a number"),
    ("a: {type: continuous, high: 1}", "needs 'low'"),
    ("a: {type: continuous, low: 0, high: 1, step: 2}", "unknown key(s) ['step']"),
    ("a: [1, 2", "not valid YAML"),
    ("- a\n- b", "expected a mapping"),
])
def test_malformed_yaml_gives_clear_errors(tmp_path, text: str, fragment: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(UsageError, match=None) as err:
        Space.load(f)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_choices_that_read_the_same_as_text_are_refused() -> None:
    with pytest.raises(UsageError, match="differ as text"):
        Categorical((1, "1"))


@pytest.mark.parametrize("choices", ["[[1, 2], 3]", "[{a: 1}]"])
def test_choices_that_are_not_plain_values_are_refused(choices: str) -> None:
    with pytest.raises(UsageError, match="categorical choices must be numbers, strings, booleans or null"):
        Space.from_dict({"a": {"type": "categorical", "choices": yaml.safe_load(choices)}})


def test_integer_parameters_round_trip_through_yaml_as_whole_numbers(tmp_path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("n_steps: {type: integer, low: 250, high: 1.5e4, default: 512}\n"
                 "n_epochs: {type: integer, low: 1, high: 20, log: true}\n")
    space = Space.load(f)
    assert space.params["n_steps"] == Integer(250, 15_000, default=512)
    assert space.params["n_epochs"] == Integer(1, 20, log=True)
    assert space.params["n_steps"] != Continuous(250.0, 15_000.0, default=512.0)  # the type survives
    written = yaml.safe_dump(space.to_dict())
    assert "high: 15000\n" in written and "default: 512\n" in written and "type: integer" in written
    assert Space.from_dict(yaml.safe_load(written)) == space
    assert space.initial() == {"n_steps": 512, "n_epochs": 4}  # 4.47 on the log scale, rounded
    assert all(type(v) is int for v in space.initial().values())


@pytest.mark.parametrize("spec, message", [
    ({"low": 2.5, "high": 10}, "low must be a whole number for an integer parameter, got 2.5 (use 2 or 3)"),
    ({"low": 1, "high": 10.5}, "high must be a whole number for an integer parameter, got 10.5 (use 10 or 11)"),
    ({"low": 1, "high": 10, "default": 3.25},
     "default must be a whole number for an integer parameter, got 3.25 (use 3 or 4)"),
])
def test_a_fractional_integer_bound_names_the_value_and_the_fix(spec: dict, message: str) -> None:
    with pytest.raises(UsageError) as err:
        Space.from_dict({"n": {"type": "integer", **spec}})
    assert str(err.value) == f"search space: parameter 'n': {message}"


@pytest.mark.parametrize("log", [False, True])
def test_integer_draws_points_and_clips_are_ints_within_bounds(log: bool) -> None:
    p = Integer(1, 1000, log=log)
    rng = np.random.default_rng(0)
    draws = [p.sample(rng) for _ in range(3000)]
    units = [p.from_unit(u) for u in np.linspace(-0.5, 1.5, 101)]
    clips = [p.clip(v) for v in (-7, 0.4, 2.5000001, 999.6, 1e9)]
    assert all(type(v) is int and 1 <= v <= 1000 for v in draws + units + clips)
    assert clips == [1, 1, 3, 1000, 1000]
    assert (p.from_unit(0.0), p.from_unit(1.0)) == (1, 1000)
    # log-uniform: a third of the draws in 1..10; uniform: about 1%
    share = np.mean(np.array(draws) <= 10)
    assert 0.28 < share < 0.38 if log else share < 0.02
    assert p.from_unit(0.5) == (32 if log else 500)  # sqrt(1000) = 31.6, 1 + 999 / 2 = 500.5 (to even)


def test_a_space_hands_out_ints_for_integer_parameters_and_floats_for_continuous_ones() -> None:
    space = Space({"n": Integer(2, 64, log=True), "x": Continuous(0.0, 1.0)})
    clipped = space.clip({"n": 80.0, "x": 2})
    assert clipped == {"n": 64, "x": 1.0} and type(clipped["n"]) is int and type(clipped["x"]) is float
    picked = space.from_unit(np.array([0.5, 0.25]), {"n": 2, "x": 0.0})
    assert picked == {"n": 11, "x": 0.25} and type(picked["n"]) is int  # 2 * 32 ** 0.5 = 11.3
    assert space.to_unit({"n": 8, "x": 0.5}) == pytest.approx([0.4, 0.5])


@pytest.mark.parametrize("value, digits, text", [
    (0.000188123, 3, "0.000188"),  # significant digits, not decimals
    (0.9999, 3, "0.9999"),  # 3 digits would read "1": a discount of 1 is another objective
    (0.99996, 4, "0.99996"),
    (1.0, 3, "1"),  # a whole value may look whole
    (0.5, 3, "0.5"),
    (12345, 3, "12345"),  # an integer whole, never 1.23e+04
    ("crop", 3, "crop"),
])
def test_values_are_shown_short_but_never_falsely_whole(value: object, digits: int, text: str) -> None:
    assert shown(value, digits) == text


def test_a_discount_on_the_horizon_scale_spreads_over_horizons_and_round_trips_through_yaml() -> None:
    space = Space.from_dict({"gamma": {"type": "continuous", "low": 0.9, "high": 0.999, "horizon": True}})
    p = space.params["gamma"]
    # horizons 10, 100, 1000: 0.99 is the middle of the cube, as 1e-3 is of a log-scale [1e-4, 1e-2]
    assert p.to_unit(0.99) == pytest.approx(0.5) and p.from_unit(0.5) == pytest.approx(0.99)
    assert p.initial() == pytest.approx(0.99)
    draws = np.array([p.sample(np.random.default_rng(i)) for i in range(2000)])
    assert draws.min() >= 0.9 and draws.max() <= 0.999
    assert 0.4 < (draws > 0.99).mean() < 0.6  # linear on the value, 91% would be below 0.99
    written = space.to_dict()
    assert written["gamma"]["horizon"] is True and Space.from_dict(written) == space
    assert "horizon" not in Space.from_dict({"g": {"type": "continuous", "low": 0.9, "high": 0.99}}).to_dict()["g"]


@pytest.mark.parametrize("spec, message", [
    ({"low": 0.9, "high": 1.0, "horizon": True}, "needs 0 <= low < high < 1, got low=0.9, high=1.0"),
    ({"low": 0.9, "high": 0.99, "horizon": True, "log": True}, "one of log and horizon"),
    ({"low": 0.9, "high": 0.99, "horizon": "yes"}, "horizon must be true or false, got 'yes'"),
])
def test_a_bad_horizon_scale_is_one_clear_error(spec: dict, message: str) -> None:
    with pytest.raises(UsageError, match=None) as err:
        Space.from_dict({"gamma": {"type": "continuous", **spec}})
    assert message in str(err.value)
    with pytest.raises(UsageError, match=r"unknown key\(s\) \['horizon'\]"):
        Space.from_dict({"n": {"type": "integer", "low": 1, "high": 9, "horizon": True}})
