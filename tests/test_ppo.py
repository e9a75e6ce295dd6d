"""The PPO member with real ProcGen and real SB3 at tiny budgets.

The hyperparameter tests look where SB3 *reads* each value (the optimizer's param
groups during an update, the clip range the loss used, the rollout buffer, the
reward normaliser), not at the attribute a careless apply would set.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch

from pbx.config import SEARCH_SPACES
from pbx.errors import UsageError
from pbx.members.base import Diverged, MemberContext
from pbx.members.ppo import LOCAL_RANKS_VARS, PPOMember, PPOSettings, _thread_budget
from pbx.space import Categorical, Continuous, Space

from conftest import tensorboard_tags

SPACES = SEARCH_SPACES
# 2 envs x 16 steps = 32-step rollouts in 2 minibatches: a rollout trains in well under a second.
TINY = {"n_envs": 2, "n_steps": 16, "batch_size": 16, "n_epochs": 2, "eval_episodes": 2}
ROLLOUT = TINY["n_envs"] * TINY["n_steps"]
PROCGEN_CONFIG = {"ent_coef": 0.01, "learning_rate": 5e-4, "clip_range": 0.2}
NEW_CONFIG = {"learning_rate": 2e-5, "clip_range": 0.1, "clip_range_vf": 0.3, "ent_coef": 0.05, "vf_coef": 0.7,
              "max_grad_norm": 0.9, "gamma": 0.95, "gae_lambda": 0.9, "n_epochs": 1, "batch_size": 8}


def make_member(seed: int = 0, env: str = "bigfish", config: dict[str, Any] | None = None,
                log_dir: Path | None = None, **settings: Any) -> PPOMember:
    context = MemberContext(env=env, index=seed, seed=seed, device="cpu", log_dir=log_dir)
    return PPOMember(context, PPOSettings(**{**TINY, **settings}), dict(config or PROCGEN_CONFIG))


def weights(member: PPOMember) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in member.model.policy.state_dict().items()}


def assert_same_tensors(a: Any, b: Any) -> None:
    """Nested dicts / lists of tensors and arrays are equal bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_tensors(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_tensors(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert np.array_equal(a, b)


def same_score(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.fixture(scope="module")
def donor_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A member trained with lr 1e-3 (so its saved optimizer holds lr 1e-3)."""
    donor = make_member(seed=1, config={**PROCGEN_CONFIG, "learning_rate": 1e-3})
    donor.train(2 * ROLLOUT)
    path = tmp_path_factory.mktemp("donor") / "donor.pt"
    donor.save(path)
    return path


class BufferSpy:
    """Records the minibatch sizes the rollout buffer hands to PPO's update."""

    def __init__(self, member: PPOMember) -> None:
        self.sizes: list[int] = []
        buffer = member.model.rollout_buffer
        self._get = buffer.get
        buffer.get = self  # type: ignore[method-assign]

    def __call__(self, batch_size: int | None = None) -> Iterator[Any]:
        for batch in self._get(batch_size):
            self.sizes.append(len(batch.actions))
            yield batch


class LoggerSpy:
    """Records every value SB3's ``train()`` logs (its own record of the hyperparameters it used)."""

    def __init__(self, member: PPOMember) -> None:
        self.values: dict[str, Any] = {}
        logger = member.model.logger
        self._record = logger.record
        logger.record = self  # type: ignore[method-assign]

    def __call__(self, key: str, value: Any, exclude: Any = None) -> None:
        self.values[key] = value
        self._record(key, value, exclude)


def assert_trains_with(member: PPOMember, config: dict[str, Any]) -> None:
    """After one more rollout, every place SB3 reads a hyperparameter holds ``config``'s value."""
    model = member.model
    assert model.rollout_buffer.gamma == config["gamma"]
    assert model.rollout_buffer.gae_lambda == config["gae_lambda"]
    assert member._reward_norm.gamma == config["gamma"]
    # lr in the optimizer before the update (SB3 only resets it inside train())
    assert [g["lr"] for g in model.policy.optimizer.param_groups] == [config["learning_rate"]]
    spy, logged = BufferSpy(member), LoggerSpy(member)
    member.train(ROLLOUT)
    used = logged.values
    assert used["train/learning_rate"] == config["learning_rate"]
    assert used["train/clip_range"] == config["clip_range"]
    assert used["train/clip_range_vf"] == config["clip_range_vf"]
    assert [g["lr"] for g in model.policy.optimizer.param_groups] == [config["learning_rate"]]
    assert spy.sizes == [config["batch_size"]] * (config["n_epochs"] * ROLLOUT // config["batch_size"])
    for name in ("ent_coef", "vf_coef", "max_grad_norm"):
        assert getattr(model, name) == config[name]
    assert member.config == config


def test_apply_reaches_every_place_sb3_reads_a_hyperparameter(tmp_path: Path) -> None:
    member = make_member(log_dir=tmp_path / "tb")
    member.train(ROLLOUT)
    member.apply(NEW_CONFIG)
    assert_trains_with(member, NEW_CONFIG)
    # SB3 writes its own losses to TensorBoard in the member's log folder
    assert {"train/value_loss", "train/entropy_loss", "train/approx_kl"} <= tensorboard_tags(tmp_path / "tb")


def test_exploit_copies_the_donor_and_then_trains_with_the_new_config(donor_file: Path) -> None:
    donor = make_member(seed=9)
    donor.load(donor_file, own=True)  # a faithful copy of the saved donor, to compare against
    recipient = make_member(seed=2)
    recipient.train(ROLLOUT)
    recipient.load(donor_file, own=False)
    # the load restores the donor's config, lr 1e-3 included (the optimizer load brought it back)
    assert recipient.config["learning_rate"] == 1e-3
    recipient.apply(NEW_CONFIG)

    assert_same_tensors(recipient.model.policy.state_dict(), donor.model.policy.state_dict())
    # optimizer moments and step counts; the param groups' lr is the new config's
    assert_same_tensors(recipient.model.policy.optimizer.state_dict()["state"],
                        donor.model.policy.optimizer.state_dict()["state"])
    r_norm, d_norm = recipient._reward_norm, donor._reward_norm
    assert (r_norm.ret_rms.mean, r_norm.ret_rms.var, r_norm.ret_rms.count) == (
        d_norm.ret_rms.mean, d_norm.ret_rms.var, d_norm.ret_rms.count)
    assert recipient.steps == donor.steps == 2 * ROLLOUT
    assert_trains_with(recipient, NEW_CONFIG)


def test_exploit_keeps_the_recipients_own_envs_and_random_stream(donor_file: Path) -> None:
    """Copying the learner must not make the recipient replay the donor's next rollout."""
    donor = make_member(seed=1)  # the member that wrote donor_file, resumed: a full restore
    donor.load(donor_file, own=True)
    recipient = make_member(seed=2)
    recipient.train(ROLLOUT)
    own_returns = recipient._reward_norm.returns.copy()
    recipient.load(donor_file, own=False)
    assert_same_tensors(weights(recipient), weights(donor))
    assert np.array_equal(recipient._reward_norm.returns, own_returns)  # its own episodes in progress
    assert not np.array_equal(recipient.model._last_obs, donor.model._last_obs)
    donor.train(ROLLOUT)
    recipient.train(ROLLOUT)
    assert any(not torch.equal(a, b) for a, b in zip(weights(recipient).values(), weights(donor).values()))


@pytest.mark.parametrize("env, config", [("bigfish", PROCGEN_CONFIG), ("CartPole-v1", None)])
def test_save_load_train_equals_training_on(env: str, config: dict[str, Any] | None, tmp_path: Path) -> None:
    """A checkpoint continues bit for bit (weights and score), and evaluating changes nothing."""
    config = config or Space.load(SPACES / "ppo_classic.yaml").initial()
    original = make_member(seed=3, env=env, config=config)
    original.train(ROLLOUT)
    original.save(tmp_path / "m.pt")
    outer_rng = torch.get_rng_state()
    assert math.isfinite(original.evaluate(0))
    score = original.train(3 * ROLLOUT)
    assert math.isfinite(score) or env == "bigfish"  # no bigfish episode fits in 3 tiny rollouts: weights decide
    # members swap their RNG states in and out: the caller's global RNG is untouched
    assert torch.equal(torch.get_rng_state(), outer_rng)

    resumed = make_member(seed=3, env=env, config=config)  # the same member, rebuilt as on --resume
    resumed.load(tmp_path / "m.pt", own=True)
    assert same_score(resumed.train(3 * ROLLOUT), score)
    assert_same_tensors(weights(resumed), weights(original))
    assert resumed.steps == original.steps == 4 * ROLLOUT


def test_a_recipient_is_not_scored_on_play_from_before_the_copy(tmp_path: Path) -> None:
    """Reward earned before an exploit (here 1e6 per env, as if by a very different policy) never reaches a score."""
    config = Space.load(SPACES / "ppo_classic.yaml").initial()
    donor = make_member(seed=11, env="CartPole-v1", config=config)
    donor.train(2 * ROLLOUT)
    donor.save(tmp_path / "donor.pt")
    recipient = make_member(seed=12, env="CartPole-v1", config=config)
    recipient.train(ROLLOUT)
    in_progress = ~recipient.model._last_episode_starts
    assert in_progress.any()
    for env in recipient._venv.envs:  # each env's Monitor sums this list into the episode's return
        env.rewards.append(1e6)
    recipient.load(tmp_path / "donor.pt", own=False)
    scores = [recipient.train(8 * ROLLOUT) for _ in range(2)]  # 128 steps per env: whole episodes too
    assert any(math.isfinite(s) for s in scores)
    assert all(s < 1e5 for s in scores if math.isfinite(s)), scores


def test_a_round_without_a_whole_episode_says_why_its_score_is_nan() -> None:
    member = make_member(seed=5)  # bigfish episodes last hundreds of steps; a round here is 16 per env
    member.train(ROLLOUT)
    assert math.isnan(member.train(ROLLOUT))
    assert member.score_note() == "no episode both started and ended in the round (0 in progress at its start left out)"


def test_evaluation_uses_the_rounds_seed_and_can_be_off(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_member(seed=3), make_member(seed=4)
    b.model.policy.load_state_dict(a.model.policy.state_dict())  # the same policy in two members
    assert a.evaluate(7) == b.evaluate(7)  # same round seed: same levels, same actions, same score
    off = make_member(seed=3, eval_episodes=0)
    import pbx.members.ppo as ppo

    monkeypatch.setattr(ppo, "make_env", lambda *a, **k: pytest.fail("evaluation is off: no env to build"))
    assert math.isnan(off.evaluate(7))


def test_a_diverging_update_raises_diverged_and_keeps_the_last_good_state(tmp_path: Path) -> None:
    member = make_member(seed=8, env="CartPole-v1", config=Space.load(SPACES / "ppo_classic.yaml").initial())
    member.train(ROLLOUT)
    good = weights(member)
    optimizer = member.model.policy.optimizer
    step = optimizer.step

    def poisoned_step(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.data.fill_(float("nan"))  # as an exploding learning rate would leave them
        return out

    optimizer.step = poisoned_step  # type: ignore[method-assign]
    with pytest.raises(Diverged):
        member.train(ROLLOUT)
    optimizer.step = step  # type: ignore[method-assign]
    assert_same_tensors(weights(member), good)
    assert member.steps == member.model.num_timesteps == 2 * ROLLOUT  # the steps were spent
    member.save(tmp_path / "m.pt")
    member.load(tmp_path / "m.pt", own=True)
    assert math.isfinite(member.train(4 * ROLLOUT))


@pytest.mark.parametrize("damage, match", [
    (lambda p: p.unlink(), "missing checkpoint"),
    (lambda p: p.write_bytes(b""), "unreadable checkpoint \\(empty file\\)"),
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "unreadable checkpoint"),
    (lambda p: torch.save({"format": 99}, p), "not a pbx PPO checkpoint of format 1 \\(found 99\\)"),
    (lambda p: torch.save([1, 2], p), "not a pbx PPO checkpoint"),
])
def test_a_damaged_checkpoint_is_a_one_line_usage_error(damage: Any, match: str, tmp_path: Path) -> None:
    member = make_member(seed=2)
    path = tmp_path / "m.pt"
    member.save(path)
    damage(path)
    with pytest.raises(UsageError, match=match) as err:
        member.load(path, own=True)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_deterministic_setting_trains() -> None:
    member = make_member(seed=2, deterministic=True)
    try:
        member.train(ROLLOUT)
        assert torch.are_deterministic_algorithms_enabled() and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(False)


def test_train_rounds_steps_to_whole_rollouts() -> None:
    member = make_member(seed=6)
    member.train(ROLLOUT // 3)  # less than half a rollout: still one
    assert member.steps == ROLLOUT
    member.train(int(2.4 * ROLLOUT))
    assert member.steps == 3 * ROLLOUT == member.model.num_timesteps


def test_train_and_test_envs_get_their_level_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import pbx.members.ppo as ppo

    calls: list[dict[str, Any]] = []
    real = ppo.make_env

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(ppo, "make_env", spy)
    member = make_member(seed=7, num_levels=50, start_level=1000, distribution_mode="hard")
    member.evaluate(0)
    train, test = calls
    assert (train["num_levels"], train["start_level"], train["distribution_mode"]) == (50, 1000, "hard")
    assert (test["num_levels"], test["distribution_mode"]) == (0, "hard")


def test_cartpole_member_trains_and_scores() -> None:
    space = Space.load(SPACES / PPOMember.space_file("CartPole-v1"))
    settings = PPOSettings(n_envs=4, n_steps=64, batch_size=64, eval_episodes=3)
    PPOMember.validate(space, settings, "auto")
    member = PPOMember(MemberContext(env="CartPole-v1", index=0, seed=0), settings, space.initial())
    scores = [member.train(256) for _ in range(3)]
    assert all(math.isfinite(s) and s > 0 for s in scores)
    assert member.evaluate(0) > 0
    assert member.model.policy.__class__.__name__ == "ActorCriticPolicy"  # an MLP


def test_space_files_match_the_settings_defaults() -> None:
    assert PPOMember.space_file("bigfish") == "ppo_procgen.yaml"
    assert PPOMember.space_file("CartPole-v1") == "ppo_classic.yaml"
    procgen = Space.load(SPACES / "ppo_procgen.yaml")
    defaults = PPOSettings()
    assert procgen.initial() == {name: getattr(defaults, name) for name in procgen.names}
    for file in ("ppo_procgen.yaml", "ppo_classic.yaml"):
        PPOMember.validate(Space.load(SPACES / file), defaults, "cpu")


@pytest.mark.parametrize("space, match", [
    (Space({"learning_rate": Continuous(1e-5, 1e-3), "aug_coef": Continuous(0.0, 1.0)}), "'aug_coef'"),
    (Space({"n_steps": Categorical((128, 256))}), "'n_steps'"),
    (Space({"batch_size": Categorical((2048, 1000))}), "batch_size 1000 does not divide n_envs \\* n_steps = 16384"),
    (Space({"batch_size": Continuous(64.0, 2048.0)}), "batch_size is an integer"),
    (Space({"gamma": Continuous(0.9, 1.5)}), "gamma must be in \\(0, 1\\], got 1.5"),
])
def test_bad_search_space_is_a_usage_error(space: Space, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        PPOMember.validate(space, PPOSettings(), "cpu")


@pytest.mark.parametrize("settings, match", [
    ({"n_envs": 8, "n_steps": 64, "batch_size": 100}, "batch_size 100 does not divide n_envs \\* n_steps = 512"),
    ({"gamma": 0.0}, "gamma must be in \\(0, 1\\], got 0.0"),
    ({"distribution_mode": "medium"}, "distribution_mode must be one of easy, hard"),
    ({"eval_episodes": -1}, "eval_episodes must be an integer >= 0 \\(0: no evaluation\\), got -1"),
])
def test_bad_settings_are_usage_errors(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        PPOSettings(**settings)


def test_cuda_without_a_gpu_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    space = Space.load(SPACES / "ppo_procgen.yaml")
    with pytest.raises(UsageError, match="--device cuda but no CUDA GPU is available; use --device cpu or auto"):
        PPOMember.validate(space, PPOSettings(), "cuda")


@pytest.mark.parametrize("var", ["MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"])
def test_threads_are_shared_among_local_mpi_ranks(var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cores = len(os.sched_getaffinity(0))
    for name in LOCAL_RANKS_VARS:
        monkeypatch.delenv(name, raising=False)
    assert _thread_budget() == cores
    monkeypatch.setenv(var, "2")
    assert _thread_budget() == max(1, cores // 2)
    monkeypatch.setenv(var, str(4 * cores))
    assert _thread_budget() == 1
