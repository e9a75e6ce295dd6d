"""The PPO member with real ProcGen and real SB3 at tiny budgets.

The hyperparameter tests look where SB3 *reads* each value (the optimizer's param
groups during an update, the clip range the loss used, the rollout buffer, the
reward normaliser), not at the attribute a careless apply would set.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any, Iterator

import gymnasium
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
CLASSIC_CONFIG = Space.load(SPACES / "ppo_classic.yaml").initial()


class ActionPaysEnv(gymnasium.Env):
    """Episodes of exactly ``length`` steps (endless with 0) paying the action taken (0 or 1) each step.

    A policy that always takes action 1 scores ``length`` per episode, one that takes 0 scores 0:
    two policies whose returns differ by construction, with episode ends known to the step.
    """

    metadata = {"render_modes": ["rgb_array"]}  # SB3's make_vec_env asks for rgb_array

    def __init__(self, length: int, image: bool = False, render_mode: str | None = None) -> None:
        self.length = length
        self.render_mode = render_mode
        self.action_space = gymnasium.spaces.Discrete(2)
        # an image channels last, as most gymnasium image envs give them
        self.observation_space = (gymnasium.spaces.Box(0, 255, (8, 8, 3), np.uint8) if image
                                  else gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32))
        self.obs = np.zeros(self.observation_space.shape, self.observation_space.dtype)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self.obs.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.obs.copy(), float(action), self.t == self.length, False, {}


EPISODE = 12
FIXED = "pbx-test/ActionPays-v0"
gymnasium.register(FIXED, entry_point=ActionPaysEnv, kwargs={"length": EPISODE})
ENDLESS_IMAGE = "pbx-test/EndlessImage-v0"  # no time limit: registered without max_episode_steps
gymnasium.register(ENDLESS_IMAGE, entry_point=ActionPaysEnv, kwargs={"length": 0, "image": True})


def make_member(seed: int = 0, env: str = "bigfish", config: dict[str, Any] | None = None,
                log_dir: Path | None = None, index: int | None = None, **settings: Any) -> PPOMember:
    context = MemberContext(env=env, index=seed if index is None else index, seed=seed, device="cpu",
                            log_dir=log_dir)
    return PPOMember(context, PPOSettings(**{**TINY, **settings}), dict(config or PROCGEN_CONFIG))


def always(member: PPOMember, action: int) -> PPOMember:
    """Make ``member``'s MLP policy take ``action`` (with probability 1 - e^-40): a policy known in advance."""
    with torch.no_grad():
        member.model.policy.action_net.bias.copy_(torch.tensor([20.0, -20.0] if action == 0 else [-20.0, 20.0]))
    return member


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
    donor = make_member(seed=1, index=5)  # the member that wrote donor_file, resumed under another index
    donor.load(donor_file, own=True)
    # the file's member index is the recipient's own (as after an MPI re-index): only the flag decides
    recipient = make_member(seed=2, index=1)
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


def test_a_recipient_is_scored_only_on_episodes_started_after_the_copy(tmp_path: Path) -> None:
    """The recipient's envs are mid-episode at the copy: that episode mixes both policies and is left out."""
    donor = always(make_member(seed=11, env=FIXED, config=CLASSIC_CONFIG), action=1)
    assert donor.train(ROLLOUT) == EPISODE  # 16 steps per env: one whole episode, then 4 steps of the next
    donor.save(tmp_path / "donor.pt")
    recipient = always(make_member(seed=12, env=FIXED, config=CLASSIC_CONFIG), action=0)
    assert recipient.train(ROLLOUT) == 0.0  # and 4 steps, paid 0, into its next episode
    recipient.load(tmp_path / "donor.pt", own=False)
    # 32 steps per env: the episode in progress ends at step 8 (paid 4 x 0 + 8 x 1), then two whole ones
    assert recipient.train(2 * ROLLOUT) == EPISODE  # not the mean of 8, 12, 12 per env


def test_a_round_without_a_whole_episode_says_why_its_score_is_nan() -> None:
    member = always(make_member(seed=5, env=FIXED, config=CLASSIC_CONFIG), action=1)
    assert member.train(ROLLOUT) == EPISODE  # every env starts fresh: steps 1-12 are a whole episode
    # steps 13-16 and 1-8 of this round finish each env's episode, and 9-16 start one that does not end
    assert math.isnan(member.train(ROLLOUT))
    assert member.score_note() == "no episode both started and ended in the round (2 in progress at its start left out)"


def test_evaluation_uses_the_rounds_seed_and_can_be_off(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_member(seed=3), make_member(seed=4)
    b.model.policy.load_state_dict(a.model.policy.state_dict())  # the same policy in two members
    assert a.evaluate(7) == b.evaluate(7)  # same round seed: same levels, same actions, same score
    off = make_member(seed=3, eval_episodes=0)
    import pbx.members.ppo as ppo

    monkeypatch.setattr(ppo, "make_env", lambda *a, **k: pytest.fail("evaluation is off: no env to build"))
    assert math.isnan(off.evaluate(7))


def test_non_finite_weights_test_nan_instead_of_raising() -> None:
    """A file written by a member that diverged outside a guarded update (or edited by hand) must not
    crash the round in evaluation: SB3's Categorical refuses NaN logits."""
    member = make_member(seed=3)
    poison(member.model.policy.parameters())
    assert math.isnan(member.evaluate(7))


def test_a_channels_last_image_env_trains_and_its_evaluation_cannot_hang() -> None:
    """A gymnasium image env: SB3 transposes it for the CNN, first observations included; with no
    time limit, evaluation stops at eval_max_steps and says so instead of looping for ever."""
    member = make_member(seed=4, env=ENDLESS_IMAGE, config=CLASSIC_CONFIG, eval_max_steps=50)
    assert member.model._last_obs.shape == (TINY["n_envs"], 3, 8, 8)
    assert math.isnan(member.train(ROLLOUT))
    with pytest.warns(UserWarning, match="evaluation stopped at eval_max_steps=50 vector steps with 0 of 2 test"):
        assert math.isnan(member.evaluate(0))


def poison(params: Iterator[torch.nn.Parameter]) -> None:
    with torch.no_grad():
        for param in params:
            param.fill_(float("nan"))  # as an exploding learning rate would leave them


@pytest.mark.parametrize("where", ["optimizer step", "after the last update"])
def test_a_diverging_update_raises_diverged_and_keeps_the_last_good_state(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN weights in mid-update make the next forward pass raise (SB3's Categorical); NaN weights
    left by the last update raise nothing and are caught by the finite check after learning."""
    member = make_member(seed=8, env="CartPole-v1", config=CLASSIC_CONFIG)
    member.train(ROLLOUT)
    good, good_optimizer = weights(member), copy.deepcopy(member.model.policy.optimizer.state_dict())
    model = member.model
    owner, name = (model.policy.optimizer, "step") if where == "optimizer step" else (model, "train")
    real = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: (real(*a, **k), poison(model.policy.parameters()))[0])
    with pytest.raises(Diverged):
        member.train(ROLLOUT)
    monkeypatch.undo()
    assert_same_tensors(weights(member), good)
    assert_same_tensors(member.model.policy.optimizer.state_dict(), good_optimizer)
    assert member.steps == member.model.num_timesteps == 2 * ROLLOUT  # the steps were spent
    member.save(tmp_path / "m.pt")
    member.load(tmp_path / "m.pt", own=True)
    assert member.steps == 2 * ROLLOUT
    assert math.isfinite(member.train(4 * ROLLOUT))


def test_an_error_that_is_no_divergence_still_raises() -> None:
    member = make_member(seed=8, env="CartPole-v1", config=CLASSIC_CONFIG)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug, with information in the message")

    member.model.policy.optimizer.step = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="a bug"):
        member.train(ROLLOUT)


def edit_checkpoint(path: Path, **changes: Any) -> None:
    """Rewrite a checkpoint with keys changed (None: removed)."""
    state = torch.load(path, weights_only=False)
    state.update(changes)
    torch.save({k: v for k, v in state.items() if v is not None}, path)


@pytest.mark.parametrize("damage, match", [
    (lambda p: p.unlink(), "missing checkpoint"),
    (lambda p: p.write_bytes(b""), "unreadable checkpoint \\(empty file\\)"),
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "unreadable checkpoint"),
    (lambda p: torch.save({"format": 99}, p), "not a pbx PPO checkpoint of format 1 \\(found 99\\)"),
    (lambda p: torch.save([1, 2], p), "not a pbx PPO checkpoint"),
    (lambda p: p.write_text("not a checkpoint"), "unreadable checkpoint"),
    (lambda p: edit_checkpoint(p, policy=None), "checkpoint lacks \\['policy'\\]"),
    (lambda p: edit_checkpoint(p, env="coinrun"), "trained on coinrun with 2 envs; this member runs bigfish with 2"),
    (lambda p: edit_checkpoint(p, n_envs=4), "trained on bigfish with 4 envs; this member runs bigfish with 2"),
])
def test_a_damaged_checkpoint_is_a_one_line_usage_error(damage: Any, match: str, tmp_path: Path) -> None:
    member = make_member(seed=2)
    path = tmp_path / "m.pt"
    member.save(path)
    damage(path)
    with pytest.raises(UsageError, match=match) as err:
        member.load(path, own=True)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_checkpoint_is_on_disk_when_save_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    member = make_member(seed=2, env="CartPole-v1", config=CLASSIC_CONFIG)
    synced: list[str] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd))[1])
    member.save(tmp_path / "m.pt")
    assert synced == [str(tmp_path / "m.pt.tmp"), str(tmp_path)]  # the data, then the folder after the rename
    assert [f.name for f in tmp_path.iterdir()] == ["m.pt"]


def test_deterministic_setting_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # monkeypatch restores all three afterwards
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    member = make_member(seed=2, deterministic=True)
    try:
        assert torch.are_deterministic_algorithms_enabled() and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        member.train(ROLLOUT)
        assert all(torch.isfinite(w).all() for w in weights(member).values())
    finally:
        torch.use_deterministic_algorithms(False)


def test_train_rounds_steps_to_whole_rollouts() -> None:
    member = make_member(seed=6)
    for asked, rollouts in [(ROLLOUT // 3, 1), (int(2.4 * ROLLOUT), 2), (int(1.6 * ROLLOUT), 2)]:
        before = member.steps
        member.train(asked)
        assert member.steps - before == PPOMember.round_steps(member.settings, asked) == rollouts * ROLLOUT
    assert member.steps == 5 * ROLLOUT == member.model.num_timesteps


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
