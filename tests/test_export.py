"""``python -m pbx.export``: a member's checkpoint as plain SB3 files that load, without pbx, to the same policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import yaml
from stable_baselines3.common.buffers import ReplayBuffer

from pbx import evaluate, export, train
from pbx.evaluation import find_target
from pbx.members.offpolicy import member as offpolicy

from conftest import ROOT, run_toy

OFF_POLICY = ["--t_ready", "200", "--max_budget", "200", "-m", "buffer_size=1000", "learning_starts=64",
              "net_arch=[16,16]", "eval_episodes=0"]
ON_POLICY = ["--t_ready", "64", "--max_budget", "64", "-m", "n_envs=2", "n_steps=32", "net_arch=[16,16]",
             "eval_episodes=0"]
RUNS = {  # algo: its SB3 class, env, settings; PPO's normalises observations, so its export has vecnormalize.pkl
    "ppo": ("PPO", "Pendulum-v1", [*ON_POLICY, "batch_size=32", "normalize_obs=true"]),
    "a2c": ("A2C", "CartPole-v1", ON_POLICY),
    "sac": ("SAC", "Pendulum-v1", [*OFF_POLICY, "batch_size=32"]),
    "td3": ("TD3", "Pendulum-v1", [*OFF_POLICY, "batch_size=32"]),
    "dqn": ("DQN", "CartPole-v1", [*OFF_POLICY, "train_freq=4"]),  # its space searches batch_size
}
# Loads every export in a process where pbx cannot be imported, and prints the deterministic actions on the
# observations given: what a user without pbx gets.
LOAD = """
import json, sys
sys.modules["pbx"] = None
import gymnasium as gym, numpy as np, stable_baselines3
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
actions = {}
for algo, (cls, env, folder, obs) in json.loads(sys.argv[1]).items():
    model = getattr(stable_baselines3, cls).load(f"{folder}/model.zip", device="cpu")
    obs = np.asarray(obs, dtype=np.float32)
    if algo == "ppo":
        norm = VecNormalize.load(f"{folder}/vecnormalize.pkl", DummyVecEnv([lambda: gym.make(env)]))
        assert not norm.training
        obs = norm.normalize_obs(obs)
    actions[algo] = model.predict(obs, deterministic=True)[0].tolist()
print(json.dumps(actions))
"""


def test_every_agents_export_loads_without_pbx_and_acts_as_the_member(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    given, expected = {}, {}
    for algo, (cls, env, settings) in RUNS.items():
        run = tmp_path / algo
        assert train.main(["--env", env, "--algo", algo, "--search", "none", "--batchsize", "1", "--device", "cpu",
                           *settings, "--run-dir", str(run)]) == 0
        capsys.readouterr()
        assert export.main([str(run)]) == 0
        out = capsys.readouterr().out.splitlines()
        folder = run / "export" / "m0_round1"
        assert out[0].startswith(f"wrote {folder / 'model.zip'}: {cls}, member 0 after round 1")
        load = next(line for line in out if line.startswith("load with: "))
        assert load.startswith(f'load with: {cls}.load("{folder / "model.zip"}")')  # the SB3 class, not pbx's
        assert (folder / "vecnormalize.pkl").is_file() == (algo == "ppo")
        assert yaml.safe_load((folder / "env.yaml").read_text()) == {"env_id": env, "env_kwargs": {}}
        member = find_target(run).load_member()
        obs = rng.normal(size=(3, *member.model.observation_space.shape)).astype(np.float32)
        expected[algo] = member.act(obs, deterministic=True).tolist()
        member.close()
        given[algo] = (cls, env, str(folder), obs.tolist())
    proc = subprocess.run([sys.executable, "-c", LOAD, json.dumps(given)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == expected


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_toy(tmp_path / "toy", max_budget=8)
    run = tmp_path / "cartpole"
    assert train.main(["--env", "CartPole-v1", "--search", "none", "--batchsize", "1", *ON_POLICY, "batch_size=32",
                       "--run-dir", str(run)]) == 0
    (tmp_path / "file").write_text("")
    capsys.readouterr()
    for args, message in [
        ([str(tmp_path / "toy")], "trains toy, which has no episodes to play: pbx.evaluate and pbx.export take SB3 "
                                  "members"),
        ([str(run), "--member", "3"], "--member must be best, kept or a member of the run (0 to 0), got '3'"),
        ([str(run), "--out", str(tmp_path / "file")], f"{tmp_path / 'file'}: File exists"),
    ]:
        assert export.main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_export_and_evaluate_need_memory_for_the_one_member_they_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """With memory for one member's replay buffer and not for the population's, training refuses the run while
    pbx.export and pbx.evaluate, which build one member, go ahead; pbx.evaluate marks the policy the run's test
    score plays."""
    run = tmp_path / "run"
    assert train.main(["--env", "Pendulum-v1", "--algo", "sac", "--search", "none", "--batchsize", "2", "--device",
                       "cpu", *RUNS["sac"][2], "--run-dir", str(run)]) == 0
    env = gymnasium.make("Pendulum-v1")
    one = ReplayBuffer(1000, env.observation_space, env.action_space, device="cpu")
    need = sum(getattr(one, name).nbytes for name in ("observations", "next_observations", "actions", "rewards",
                                                      "dones", "timeouts"))
    monkeypatch.setattr(offpolicy, "_available_memory", lambda: need * 3 // 2)
    capsys.readouterr()
    assert train.main(["--resume", str(run)]) == 2
    assert "buffer_size 1,000 x 2 members needs" in capsys.readouterr().err
    assert export.main([str(run)]) == 0
    assert evaluate.main([str(run), "--episodes", "1", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marked = [line.split()[0] for line in lines if line.endswith(" <- the run's test score plays this policy")]
    assert marked == ["deterministic"]  # SAC's test episodes take the most likely action
    assert json.loads((run / "report" / "evaluate_m0_test_seed0.json").read_text())["test_policy"] == "deterministic"
