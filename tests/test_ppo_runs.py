"""Whole runs of real SB3 PPO members through ``python -m pbx.train``, at tiny budgets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pbx.config import resolve
from pbx.curves import read_curves
from pbx.history import read_csv
from pbx.run_dir import RunDir
from pbx.runners import sync
from pbx.runners.sync import SyncRunner

from conftest import check_skips, kill_after, start_train, tensorboard_tags

ROOT = Path(__file__).resolve().parent.parent
# One rollout of 2 envs x 32 steps per round, two rounds, one test episode per member and round.
TINY = ["-m", "n_envs=2", "n_steps=32", "batch_size=32", "eval_episodes=1",
        "--t_ready", "64", "--max_budget", "128", "--device", "cpu"]


def _train(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *TINY, *args, "--run-dir", str(run_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", "third-party banners or warnings reached the terminal"
    return proc


def test_pbt_on_bigfish_two_members_two_rounds(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = _train(run_dir, "--env", "bigfish", "--search", "PBT", "--batchsize", "2")
    history = read_csv(run_dir / "history.csv")
    assert len(history) == 4 and history["steps"].tolist() == [64, 64, 128, 128]
    assert history["test_score"].notna().all()  # one finished test episode each round
    # no bigfish episode ends in 64 steps: both scores are NaN, so nothing is known and nothing is copied
    assert history["score"].isna().all() and (history["parent"] == history["member"]).all()
    assert "no exploit: no member has a score" in proc.stdout
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["member_0.r1.ckpt", "member_1.r1.ckpt"]
    # TensorBoard: per member pbx's scores and hyperparameters and SB3's own losses; the population's best
    for member in ("member_0", "member_1"):
        tags = tensorboard_tags(run_dir / "tb" / member)
        # (no pbx/score: no bigfish episode ends in 64 steps, and NaN scores are not logged)
        assert {"pbx/test_score", "hp/learning_rate", "hp/ent_coef", "train/value_loss"} <= tags
    assert {"pbx/best_member_test_score"} <= tensorboard_tags(run_dir / "tb" / "population")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["member"]["n_envs"] == 2 and config["member"]["value_loss"] == "reference"
    # PB2-Mix's scales: every range linear, the learning rate's too
    assert not any(param.get("log") for param in config["space"].values())


def test_none_on_bigfish_trains_the_fixed_baseline_and_never_copies(tmp_path) -> None:
    run_dir = tmp_path / "run"
    _train(run_dir, "--search", "none", "--batchsize", "2")  # bigfish is the default env
    history = read_csv(run_dir / "history.csv")
    assert (history["parent"] == history["member"]).all() and not history["explored"].any()
    baseline = {"learning_rate": 5e-4, "ent_coef": 0.01, "clip_range": 0.2}  # the ProcGen paper's PPO
    for name, value in baseline.items():
        assert (history[name] == value).all(), name


def test_pb2_on_cartpole_copies_on_merit(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = _train(run_dir, "--env", "CartPole-v1", "--search", "PB2", "--batchsize", "2",
                  "--max_budget", "256")
    history = read_csv(run_dir / "history.csv")
    assert history["round"].max() == 3
    # untrained CartPole episodes last ~20 steps: every member finishes whole ones in its first round
    assert history[history["round"] == 0]["score"].notna().all()
    assert history["n_epochs"].isin([5, 10, 20]).all()
    assert sum(line.startswith("round ") for line in proc.stdout.splitlines()) == 4
    scores = history.set_index(["member", "round"])["score"]
    copies = history[history["parent"] != history["member"]]
    assert len(copies)  # with two members and distinct scores, the worse one copies
    for _, row in copies.iterrows():
        donor, recipient = scores[(row["parent"], row["round"] - 1)], scores[(row["member"], row["round"] - 1)]
        assert np.isfinite(donor) and (np.isnan(recipient) or donor > recipient)


def test_a_diverging_member_gets_a_nan_score_and_is_replaced(tmp_path) -> None:
    from pbx.members.ppo.ppo import PPOMember
    from pbx.runners.sync import SyncRunner

    class Poisoned(PPOMember):
        """Member 1's weights turn NaN inside its second round's gradient update, as a huge step would do."""

        def train(self, steps: int, stop=None) -> float:  # type: ignore[no-untyped-def]
            if self.context.index == 1 and self.steps == 64:
                update = self.model.train

                def poisoned_update() -> None:
                    update()
                    for p in self.model.policy.parameters():
                        p.data.fill_(float("nan"))
                self.model.train = poisoned_update
                try:
                    return super().train(steps, stop)
                finally:
                    del self.model.train
            return super().train(steps, stop)

    cfg = resolve([{"run": {"env": "CartPole-v1", "search": "PBT", "pop_size": 2, "t_ready": 64,
                            "max_budget": 256, "device": "cpu"},
                    "member": {"n_envs": 2, "n_steps": 32, "batch_size": 32, "eval_episodes": 1}}])
    cfg.member_cls = Poisoned
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    run_dir.begin()
    frame = SyncRunner(cfg, run_dir).run().frame.set_index(["member", "round"])
    assert np.isnan(frame.loc[(1, 1), "score"]) and np.isfinite(frame.loc[(0, 1), "score"])
    # the NaN member copies the finite one at the next exploit and trains on (a member with non-finite
    # weights would test NaN): the run finishes
    assert frame.loc[(1, 2), "parent"] == 0 and np.isfinite(frame.loc[(1, 2), "test_score"])
    assert frame.index.get_level_values("round").max() == 3


def test_a_killed_ppo_population_resumes_to_the_uninterrupted_history(tmp_path) -> None:
    args = [*TINY, "--env", "CartPole-v1", "--search", "PB2", "--batchsize", "2", "--max_budget", "384"]
    whole = start_train(*args, "--run-dir", str(tmp_path / "whole"))
    assert whole.wait(timeout=600) == 0, whole.stderr.read()
    killed = start_train(*args, "--run-dir", str(tmp_path / "killed"))
    history = tmp_path / "killed" / "history.csv"
    kill_after(killed, history, rows=2 * 2, timeout=600)
    assert 1 <= read_csv(history)["round"].max() < 5, "the kill should land mid-run"
    resumed = start_train("--resume", str(tmp_path / "killed"))
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    pd.testing.assert_frame_equal(read_csv(history).drop(columns="wall_s"),
                                  read_csv(tmp_path / "whole" / "history.csv").drop(columns="wall_s"))
    curves = read_curves(tmp_path / "whole" / "curves.csv")
    assert len(curves) >= 4  # a point after each rollout (one a round here) in which a scored episode ended
    pd.testing.assert_frame_equal(read_curves(tmp_path / "killed" / "curves.csv"), curves)
    assert "pbx/curve" in tensorboard_tags(tmp_path / "whole" / "tb" / "member_0")  # the points, at their steps


def test_a_drac_run_resumed_with_its_device_given_continues_bit_for_bit(tmp_path, capsys) -> None:
    """DrAC's checkpoint through pbx.train (in-process: imports are most of a tiny run's time), augmentation
    stream included: one round resumed with -m max_budget=64 device=cpu writes the history and weights of two
    rounds run at once. (A GPU on one side needs a machine with one; without one, asking for it is refused in
    one line.)"""
    import torch

    from pbx.train import main

    drac = ["--env", "bigfish", "--search", "none", "--batchsize", "2", "--device", "cpu", "--t_ready", "32",
            "-m", "n_envs=2", "n_steps=16", "batch_size=32", "n_epochs=1", "eval_episodes=0",  # the weights tell
            "aug_type=random_conv", "aug_coef=0.5"]
    assert main([*drac, "--max_budget", "64", "--run-dir", str(tmp_path / "whole")]) == 0
    assert main([*drac, "--max_budget", "32", "--run-dir", str(tmp_path / "cut")]) == 0
    capsys.readouterr()
    assert main(["--resume", str(tmp_path / "cut"), "-m", "max_budget=64", "device=cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no CUDA GPU is available" in err
    assert main(["--resume", str(tmp_path / "cut"), "-m", "max_budget=64", "device=cpu"]) == 0
    pd.testing.assert_frame_equal(read_csv(tmp_path / "cut" / "history.csv").drop(columns="wall_s"),
                                  read_csv(tmp_path / "whole" / "history.csv").drop(columns="wall_s"))
    saved = {(run, m): torch.load(tmp_path / run / "checkpoints" / f"member_{m}.r1.ckpt", weights_only=False)
             for run in ("cut", "whole") for m in (0, 1)}
    for m in (0, 1):
        cut, whole = saved["cut", m], saved["whole", m]
        assert torch.equal(cut["augment_rng"], whole["augment_rng"])
        assert all(torch.equal(cut["policy"][k], whole["policy"][k]) for k in whole["policy"])
    assert not torch.equal(saved["whole", 0]["augment_rng"], saved["whole", 1]["augment_rng"])  # streams per member


@pytest.mark.parametrize("args, message", [
    (["--env", "bigfsh"], "bigfish"),  # the error lists the valid games
    (["--env", "bigfish", "-m", "batch_size=30"], "batch_size 30 does not divide n_envs * n_steps = 64"),
    (["--env", "bigfish", "-m", "space=toy.yaml"], "h0"),
])
def test_ppo_bad_input_is_one_line_and_exit_2(tmp_path, args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *TINY, *args, "--run-dir", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_score100_is_the_mean_of_the_last_100_finished_episodes(tmp_path, monkeypatch) -> None:
    """history.csv's score100 at each round's end is the mean return of the member's last 100 finished training
    episodes, computed here from every episode the training env reported; unlike the round's score it reaches
    back past the round."""
    from pbx.members.sb3.normalize import Normalizer

    finished: list[float] = []
    step_wait = Normalizer.step_wait

    def spy(self: Normalizer):  # every finished training episode's return, as the env reports it
        obs, rewards, dones, infos = step_wait(self)
        if self.training:
            finished.extend(float(info["episode"]["r"]) for info in infos if "episode" in info)
        return obs, rewards, dones, infos

    monkeypatch.setattr(Normalizer, "step_wait", spy)
    cfg = resolve([{"run": {"env": "CartPole-v1", "search": "none", "pop_size": 1, "t_ready": 1024,
                            "max_budget": 3072, "seed": 0, "device": "cpu"},
                    "member": {"n_envs": 4, "n_steps": 256, "batch_size": 256, "eval_episodes": 0}}])
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    run_dir.begin()
    cfg.write(run_dir.config)
    at_round_end: list[float] = []

    train_one = sync.LocalExecutor._train_one

    def mark(self, *args, **kwargs):  # the episodes finished by the end of each round
        trained = train_one(self, *args, **kwargs)
        at_round_end.append(float(np.mean(finished[-100:])))
        return trained

    monkeypatch.setattr(sync.LocalExecutor, "_train_one", mark)
    SyncRunner(cfg, run_dir).run()
    history = read_csv(tmp_path / "run" / "history.csv")
    assert len(finished) > 100  # the window is full before the end, so it drops early episodes
    np.testing.assert_allclose(history["score100"].to_numpy(), at_round_end, rtol=1e-12)
    assert (history["score100"] != history["score"]).any()  # not the round's own episodes' mean
    assert "pbx/score100" in tensorboard_tags(tmp_path / "run" / "tb" / "member_0")


# Every rollout the space allows (2 envs x 48 to 80 steps, minibatches of 32) is longer than t_ready's 64 steps,
# as the PB2 paper's allows 60,000-step rollouts against its 50,000-step interval.
LONG_ROLLOUTS = """\
learning_rate: {type: continuous, low: 1.0e-4, high: 1.0e-3, log: true}
n_steps: {type: integer, low: 48, high: 80}
"""


def test_members_whose_rollout_outlasts_t_ready_end_within_one_rollout_of_the_budget(tmp_path) -> None:
    """A member trained at least one rollout a round, so a rollout longer than t_ready ran ahead by (rollout -
    t_ready) every round without bound. Now a member at or past a round's planned end skips the round (its score
    carried, the round line says why), one behind it trains to the rollout boundary nearest the plan, and every
    member ends fewer than one rollout past max_budget; kill -9 and --resume write the same history."""
    space = tmp_path / "space.yaml"
    space.write_text(LONG_ROLLOUTS)
    args = ["--env", "CartPole-v1", "--search", "PB2", "--batchsize", "2", "--t_ready", "64", "--max_budget", "640",
            "--space", str(space), "-m", "n_envs=2", "batch_size=32", "eval_episodes=1", "--device", "cpu"]
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *args, "--run-dir", str(tmp_path / "run")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    history = read_csv(tmp_path / "run" / "history.csv")
    killed = start_train(*args, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=2 * 2, timeout=600)
    assert 1 <= read_csv(tmp_path / "killed" / "history.csv")["round"].max() < 9, "the kill should land mid-run"
    resumed = start_train("--resume", str(tmp_path / "killed"))
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    pd.testing.assert_frame_equal(read_csv(tmp_path / "killed" / "history.csv").drop(columns="wall_s"),
                                  history.drop(columns="wall_s"))
    final = history[history["round"] == 9]
    assert (final["steps"] < 640 + 2 * 80).all(), final["steps"].tolist()  # the space's longest rollout
    skipped = check_skips(history, 64, 2 * history["n_steps"])
    assert skipped.any()
    # a member that skipped is tested as the others are, and saved: the last round's checkpoints are every member's
    assert history.loc[skipped, "test_score"].notna().all()
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["member_0.r9.ckpt",
                                                                                   "member_1.r9.ckpt"]
    # a skipped round carries the score of the state the member holds: its parent's in the round before
    scores = history.set_index(["member", "round"])["score"]
    carried = [scores[(p, r - 1)] for p, r in zip(history["parent"][skipped], history["round"][skipped])]
    np.testing.assert_array_equal(history.loc[skipped, "score"].to_numpy(), carried)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("round ")]
    for _, row in history[skipped].iterrows():
        assert f"m{row['member']} no score: skipped the round" in lines[row["round"]], lines[row["round"]]
