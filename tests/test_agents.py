"""SAC, TD3, DQN and A2C members (``--algo``) with real SB3 at tiny budgets: the guarantees PPO's tests give.

Per agent: a killed run resumes to the uninterrupted history and ``mpiexec -n 2`` writes it too
(one set of runs); a hyperparameter set by ``apply`` changes what the next update does (each test
fails if ``apply`` is ignored). For the off-policy agents: an exploit copies the learner (target
networks, optimizers, SAC's entropy coefficient) and keeps the recipient's replay buffer unless
``copy_buffer``; the buffer is saved beside the checkpoints without a copy per round; schedules and
``learning_starts`` count the member's own steps across rounds. And the bad input, one line each.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from pbx.config import resolve
from pbx.curves import read_curves
from pbx.errors import UsageError
from pbx.history import read_csv
from pbx.members.base import MemberContext
from pbx.members.offpolicy.dqn import DQNMember, DQNSettings
from pbx.members.offpolicy.replay_store import FIELDS
from pbx.members.offpolicy.sac import SACMember, SACSettings
from pbx.members.offpolicy.td3 import TD3Member, TD3Settings
from pbx.space import Space
from pbx.train import main

from conftest import ROOT, kill_after, start_train

MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
OFF_POLICY = ["-m", "buffer_size=2000", "learning_starts=64", "net_arch=[16,16]"]
# (DQN's classic space searches batch_size.) Pendulum's episodes last 200 steps: rounds of 200 score one whole
# episode each, so members are ranked and copied. SAC and TD3 update every 4 steps: a quarter of the updates, the
# same checkpoint and resume paths.
RUNS = {
    "sac": ["--env", "Pendulum-v1", "--t_ready", "200", "--max_budget", "800", *OFF_POLICY, "batch_size=32",
            "train_freq=4"],
    "td3": ["--env", "Pendulum-v1", "--t_ready", "200", "--max_budget", "800", *OFF_POLICY, "batch_size=32",
            "train_freq=4"],
    "dqn": ["--env", "CartPole-v1", "--t_ready", "128", "--max_budget", "512", *OFF_POLICY, "train_freq=16",
            "gradient_steps=8", "schedule_timesteps=512"],
    "a2c": ["--env", "CartPole-v1", "--t_ready", "200", "--max_budget", "800", "-m", "n_envs=4",
            "net_arch=[16,16]"],
}


def _train(*args: str, mpi: bool = False) -> None:
    launcher = [MPIEXEC, "-n", "2"] if mpi else []
    proc = subprocess.run([*launcher, sys.executable, "-m", "pbx.train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def _history(run_dir: Path) -> pd.DataFrame:
    return read_csv(run_dir / "history.csv").drop(columns="wall_s")


@pytest.mark.parametrize("algo", list(RUNS))
def test_a_killed_run_resumes_to_the_uninterrupted_history_which_two_ranks_write_too(algo: str,
                                                                                    tmp_path: Path) -> None:
    """A killed single-process run resumes to the history and curves of the uninterrupted run on two ranks: a
    resume's restore and the ranks' exchange of weights and buffers, two paths apart, agree to the bit."""
    args = ["--algo", algo, "--search", "PBT", "--batchsize", "2", "--quantile", "0.5", "--device", "cpu",
            "-m", "eval_episodes=1", *RUNS[algo]]
    _train(*args, "--run-dir", str(tmp_path / "mpi"), mpi=True)
    expected = _history(tmp_path / "mpi")
    assert (expected["parent"] != expected["member"]).any(), "the run should copy a donor"
    killed = start_train(*args, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=2)
    assert read_csv(tmp_path / "killed" / "history.csv")["round"].max() < 3, "the kill should land mid-run"
    _train("--resume", str(tmp_path / "killed"))
    curves = read_curves(tmp_path / "mpi" / "curves.csv")
    assert len(curves) >= 8  # points within the rounds, where episodes ended
    pd.testing.assert_frame_equal(_history(tmp_path / "killed"), expected)
    pd.testing.assert_frame_equal(read_curves(tmp_path / "killed" / "curves.csv"), curves)


def _member(cls: type, settings: Any, env: str, seed: int = 0, config: dict[str, Any] | None = None) -> Any:
    return cls(MemberContext(env=env, index=seed, seed=seed, device="cpu"), settings, config or {})


def _sac(seed: int = 0, **settings: Any) -> SACMember:
    return _member(SACMember, SACSettings(**{"buffer_size": 1000, "learning_starts": 32, "batch_size": 32,
                                             "net_arch": [16, 16], "eval_episodes": 1, **settings}),
                   "Pendulum-v1", seed)


def _td3(seed: int = 0) -> TD3Member:
    return _member(TD3Member, TD3Settings(buffer_size=1000, learning_starts=32, batch_size=32, net_arch=[16, 16],
                                          policy_delay=1), "Pendulum-v1", seed)


def _dqn(seed: int = 0, **settings: Any) -> DQNMember:
    return _member(DQNMember, DQNSettings(**{"buffer_size": 1000, "learning_starts": 32, "batch_size": 32,
                                             "net_arch": [16, 16], "target_update_interval": 8, **settings}),
                   "CartPole-v1", seed)


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _moved(before: dict[str, torch.Tensor], module: torch.nn.Module) -> bool:
    return any(not torch.equal(v, module.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("make, targets", [
    (_sac, lambda m: [m.model.critic_target]),
    (_td3, lambda m: [m.model.actor_target, m.model.critic_target]),
    (_dqn, lambda m: [m.model.q_net_target]),
])
def test_tau_set_by_apply_holds_the_target_networks_still(make: Any, targets: Any) -> None:
    """Polyak averaging reads ``tau`` at each update: 0 from apply freezes the targets while the online
    networks learn; the same round with the settings' tau moves them (so an ignored apply fails)."""
    for tau, frozen in ((0.0, True), (None, False)):
        member = make()
        member.train(64)  # past learning_starts
        if tau is not None:
            member.apply({"tau": tau})
        before = [_state(t) for t in targets(member)]
        online = _state(member.model.policy)
        member.train(64)
        assert _moved(online, member.model.policy)
        assert all(not _moved(b, t) for b, t in zip(before, targets(member))) == frozen


def test_learning_rate_set_by_apply_reaches_every_optimizer_sac_has() -> None:
    member = _sac()
    member.train(64)
    member.apply({"learning_rate": 2e-5, "gamma": 0.9, "batch_size": 16})
    optimizers = [member.model.actor.optimizer, member.model.critic.optimizer, member.model.ent_coef_optimizer]
    sampled = []
    sample = member.model.replay_buffer.sample
    member.model.replay_buffer.sample = lambda n, env=None: (sampled.append(n), sample(n, env))[1]
    member.train(64)
    assert all(g["lr"] == 2e-5 for o in optimizers for g in o.param_groups)  # SB3 reset them from the schedule
    assert set(sampled) == {16} and member.model.gamma == 0.9
    assert member.config == {"learning_rate": 2e-5, "gamma": 0.9, "batch_size": 16}


def test_a_restart_keeps_the_optimizer_state_as_ipbts_reference_unless_told() -> None:
    """IPBT's reference shrinks or re-initialises only the checkpoint's ``model_state_dict``: Adam's moments stay.
    ``clear_optimizer`` (IPBT's ``optimizer_state: clear``) starts them afresh."""
    member = _sac()
    member.train(64)
    optimizers = [member.model.actor.optimizer, member.model.critic.optimizer, member.model.ent_coef_optimizer]
    moments = [{k: v.clone() for k, v in o.state[p].items()} for o in optimizers for p in o.state]
    before = _state(member.model.policy)
    assert moments
    member.reset_weights("shrink_perturb", 7, 0.2, 0.1)
    assert _moved(before, member.model.policy)
    kept = [o.state[p] for o in optimizers for p in o.state]
    assert len(kept) == len(moments) and all(torch.equal(a[k], b[k]) for a, b in zip(moments, kept) for k in a)
    member.reset_weights("reinit", 7, clear_optimizer=True)
    assert all(not o.state for o in optimizers)


def test_a2c_trains_with_the_values_apply_set() -> None:
    from pbx.members.a2c.a2c import A2CMember, A2CSettings

    member = _member(A2CMember, A2CSettings(n_envs=2, net_arch=[16, 16]), "CartPole-v1")
    member.train(40)
    member.apply({"learning_rate": 3e-5, "n_steps": 8, "gamma": 0.9, "gae_lambda": 0.8, "vf_coef": 0.1})
    logged: dict[str, Any] = {}
    record = member.model.logger.record
    member.model.logger.record = lambda key, value, exclude=None: (logged.update({key: value}),
                                                                   record(key, value, exclude))[1]
    member.train(48)  # whole rollouts of the new length: 3 of 2 envs x 8 steps
    assert member.steps == 40 + 48 and member.model.rollout_buffer.buffer_size == 8
    assert logged["train/learning_rate"] == 3e-5
    buffer = member.model.rollout_buffer
    assert (buffer.gamma, buffer.gae_lambda, member.model.vf_coef) == (0.9, 0.8, 0.1)


def test_dqn_explores_and_starts_learning_by_the_members_own_steps_across_rounds(tmp_path: Path) -> None:
    """Plain SB3 restarts its schedules at each learn() (a round): epsilon would be at its end after every
    round. Here it falls over schedule_timesteps of the member's steps, across rounds and a resume."""
    member = _dqn(exploration_fraction=0.5, schedule_timesteps=1000, learning_starts=100, train_freq=1,
                  gradient_steps=1)
    member.train(100)
    assert member.model._n_updates == 0  # nothing learnt before learning_starts
    member.train(100)
    assert member.model._n_updates == 100  # steps 101 to 200, not 100 more of warm-up
    assert member.model.exploration_rate == pytest.approx(1.0 - 0.95 * 200 / 500)
    member.apply({"exploration_final_eps": 0.5})  # the next action already explores at the new rate
    assert member.model.exploration_rate == pytest.approx(1.0 - 0.5 * 200 / 500)
    member.save(tmp_path / "m.ckpt")
    resumed = _dqn(exploration_fraction=0.5, schedule_timesteps=1000, learning_starts=100, train_freq=1,
                   gradient_steps=1)
    resumed.load(tmp_path / "m.ckpt", own=True)
    assert resumed.model.exploration_rate == member.model.exploration_rate
    assert resumed.model._n_calls == member.model._n_calls == 200
    member.train(100)
    resumed.train(100)
    assert all(torch.equal(a, b) for a, b in zip(member.model.policy.parameters(), resumed.model.policy.parameters()))


def _get(member: Any, name: str) -> Any:
    obj = member.model
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _same(a: Any, b: Any) -> bool:
    """Nested dicts and lists of tensors and numbers are equal bit for bit."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def _buffer(member: Any) -> dict[str, np.ndarray]:
    buffer = member.model.replay_buffer
    return {name: getattr(buffer, name).copy() for name in FIELDS} | {"pos": buffer.pos, "full": buffer.full}


def _same_buffers(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("copy_buffer", [False, True])
def test_an_exploit_copies_the_learner_and_keeps_the_recipients_buffer_unless_told(copy_buffer: bool,
                                                                                 tmp_path: Path) -> None:
    donor, recipient = _sac(1, copy_buffer=copy_buffer), _sac(2, copy_buffer=copy_buffer)
    donor.train(192)
    recipient.train(96)
    donor.save(tmp_path / "donor.ckpt")
    own = _buffer(recipient)
    recipient.load(tmp_path / "donor.ckpt", own=False)
    assert not _moved(_state(donor.model.policy), recipient.model.policy)  # actor, critics, target critics
    for optimizer in ("actor.optimizer", "critic.optimizer", "ent_coef_optimizer"):
        assert _same(_get(recipient, optimizer).state_dict(), _get(donor, optimizer).state_dict()), optimizer
    assert torch.equal(recipient.model.log_ent_coef, donor.model.log_ent_coef)
    assert recipient.model.log_ent_coef is recipient.model.ent_coef_optimizer.param_groups[0]["params"][0]
    assert _same_buffers(_buffer(recipient), _buffer(donor) if copy_buffer else own)
    recipient.train(32)  # and trains on from there


def test_the_buffer_is_saved_once_beside_the_checkpoints_and_a_resume_rebuilds_it(tmp_path: Path) -> None:
    """Rounds write their own rows; files no checkpoint of the last two saves needs go. The runner keeps the
    previous round's checkpoint until the next is in the history: either one rebuilds its buffer exactly."""
    member = _sac(buffer_size=300)
    saved = {}
    for r in range(6):
        member.train(100)
        member.save(tmp_path / f"member_0.r{r}.ckpt")
        saved[r] = _buffer(member)
        (tmp_path / f"member_0.r{r - 2}.ckpt").unlink(missing_ok=True)  # as the runner prunes
        segments = sorted(p.name for p in tmp_path.glob("member_0.replay.*"))
        rows = sum(len(np.load(tmp_path / name)["rewards"]) for name in segments)
        assert rows <= 300 + 2 * 100  # the buffer and at most two rounds' rows, whatever the number of rounds
    assert len(segments) < 6
    for r in (4, 5):
        resumed = _sac(buffer_size=300)
        resumed.load(tmp_path / f"member_0.r{r}.ckpt", own=True)
        assert _same_buffers(_buffer(resumed), saved[r])


@pytest.mark.parametrize("search, members", [("PBT", None), ("BGPBT", 12), ("IPBT", 8)])
def test_the_memory_check_counts_a_larger_first_population(search: str, members: int | None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """SAC on Pendulum keeps 40-byte rows: 1M of them are 40 MB a member, 160 MB for 4. With 300 MB free, PBT's
    4 members fit; BG-PBT's first population of 12 and IPBT's of 8 do not (the check counted 4)."""
    from pbx.members.offpolicy import member

    monkeypatch.setattr(member, "_available_memory", lambda: 300_000_000)
    layers = [{"run": {"env": "Pendulum-v1", "algo": "sac", "search": search, "pop_size": 4, "t_ready": 1000,
                       "max_budget": 100_000}, "member": {"buffer_size": 1_000_000}}]
    if members is None:
        resolve(layers)
        return
    with pytest.raises(UsageError, match=rf"buffer_size 1,000,000 x {members} members needs {members * 0.04:.1f} GB"):
        resolve(layers)


@pytest.mark.parametrize("argv, message", [
    (["--algo", "dqn", "--env", "Pendulum-v1"], "--algo dqn cannot act in Pendulum-v1's action space Box("),
    (["--algo", "sac", "--env", "CartPole-v1"], "use --algo ppo, a2c or dqn"),
    (["--algo", "td3", "--env", "CartPole-v1"], "--algo td3 cannot act in CartPole-v1's action space Discrete(2)"),
    (["--algo", "ddpg", "--env", "Pendulum-v1"], "unknown --algo 'ddpg': use one of ppo, a2c, sac, td3, dqn"),
    (["--algo", "sac", "--env", "bigfish"], "--algo sac cannot act in bigfish's action space Discrete(15): SAC needs "
                                            "continuous (Box) actions and bigfish's are discrete; use --algo ppo"),
    (["--algo", "sac", "--env", "toy"], "--algo sac trains an SB3 agent on a gymnasium id; toy trains its own"),
    (["--algo", "sac", "--env", "Pendulum-v1", "-m", "clip_range=0.2"], "unknown key 'clip_range'"),
    (["--algo", "sac", "--env", "Pendulum-v1", "-m", "buffer_size=100000000000"],
     "buffer_size 100,000,000,000 x 4 members needs"),
    (["--algo", "dqn", "--env", "CartPole-v1", "-m", "exploration_final_eps=2"],
     "exploration_final_eps must be in [0, 1], got 2"),
    (["--algo", "dqn", "--env", "FrozenLake-v1", "--t_ready", "256", "--max_budget", "512", "-m",
      "learning_starts=16", "buffer_size=1000"],
     "--algo dqn cannot take FrozenLake-v1's observations, a Discrete space: SB3's off-policy agents store them "
     "through pbx's observation normaliser, which needs a row of features per env; use --algo ppo or a2c, or "
     "register the env wrapped in gymnasium.wrappers.FlattenObservation, which makes them one-hot in a Box"),
])
def test_bad_agent_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_a_search_space_with_a_hyperparameter_the_agent_lacks_is_refused(tmp_path: Path, capsys) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("clip_range: {type: continuous, low: 0.1, high: 0.3}\n")
    assert main(["--algo", "sac", "--env", "Pendulum-v1", "--space", str(space), "--run-dir",
                 str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: SAC has no hyperparameter 'clip_range' to search over; it can change "
                          "learning_rate, gamma, tau, batch_size, train_freq, gradient_steps") and err.count("\n") == 1


@pytest.mark.parametrize("algo", ["sac", "dqn"])
def test_an_integer_range_holding_an_invalid_value_is_refused_before_the_run(algo: str, tmp_path: Path,
                                                                            capsys) -> None:
    """Both ends of [-1, 8] are valid numbers of gradient steps (-1: one per env step), 0 between them is not: a
    member may draw or explore to it, so the space is refused at the start, not when a member first trains 0."""
    space = tmp_path / "space.yaml"
    space.write_text("gradient_steps: {type: integer, low: -1, high: 8}\n")
    env = "Pendulum-v1" if algo == "sac" else "CartPole-v1"
    short = ["--batchsize", "2", "--t_ready", "64", "--max_budget", "128", "-m", "learning_starts=32",
             "buffer_size=1000", "eval_episodes=1", "net_arch=[16]"]  # should it start, a short run
    assert main(["--algo", algo, "--env", env, "--space", str(space), *short, "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        "error: search space: gradient_steps must be a positive integer up to 10,000,000, or -1 (one per env step), "
        "got 0, which its range [-1, 8] holds (a member may draw or explore to any whole number of it): give the values as "
        "categorical choices instead\n")
    assert not (tmp_path / "run").exists()
    space.write_text("gradient_steps: {type: integer, low: 1, high: 8}\n")
    settings = SACSettings() if algo == "sac" else DQNSettings()
    settings.check_space(Space.load(space))


def test_a_box2d_resume_restarts_the_episodes_and_rebuilds_the_buffer(tmp_path: Path) -> None:
    """A Box2D world cannot be saved: the resume starts new episodes, whose first raw observations the next
    transition starts from, and the replay buffer comes back as it was."""
    settings = SACSettings(buffer_size=1000, learning_starts=32, batch_size=32, net_arch=[16, 16])
    member = _member(SACMember, settings, "LunarLanderContinuous-v3")
    member.train(64)
    member.save(tmp_path / "m.ckpt")
    resumed = _member(SACMember, settings, "LunarLanderContinuous-v3")
    resumed.load(tmp_path / "m.ckpt", own=True)
    assert _same_buffers(_buffer(resumed), _buffer(member))
    assert np.array_equal(resumed.model._last_original_obs, resumed._norm.raw_obs())
    assert not np.array_equal(resumed.model._last_original_obs, member.model._last_original_obs)
    resumed.train(64)
    assert resumed.steps == 128 and resumed.model.replay_buffer.pos == 128


@pytest.mark.parametrize("chosen, expected", [(None, True), (False, False), (True, True)])
def test_test_episodes_play_the_agents_own_policy_unless_eval_deterministic_says(chosen: bool | None,
                                                                                expected: bool) -> None:
    """SAC's test episodes act on its most likely action (SB3's and rl-zoo's evaluation) unless the setting picks."""
    member = _sac(eval_deterministic=chosen)
    asked: list[bool] = []
    play = member.play

    def spy(*args: Any, deterministic: bool = False, **kwargs: Any) -> Any:
        asked.append(deterministic)
        return play(*args, deterministic=deterministic, **kwargs)

    member.play = spy
    try:
        assert np.isfinite(member.evaluate(seed=3))
    finally:
        member.close()
    assert asked == [expected]
