import math

import numpy as np
import pytest
import yaml

from pbx.errors import UsageError
from pbx.space import Categorical, Continuous, Space


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
    ("a: {type: uniform, low: 0, high: 1}", "unknown type 'uniform'"),
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
