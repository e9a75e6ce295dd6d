"""BG-PBT and IPBT on the toy: a first population larger than the kept one, restarts that change the round's
length and the weights, and the runner's promises kept through them (kill -9 and --resume, two MPI ranks)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pbx.errors import UsageError
from pbx.evaluation import find_target
from pbx.history import read_csv
from pbx.run_dir import RunDir
from pbx.standings import best_rows, generation_ends, member_row
from pbx.train import main as train_main
from conftest import kill_after, run_toy, start_train, toy_config
from test_mpi import history, mpiexec

IPBT_TOY = ("--env", "toy", "--search", "IPBT", "--seed", "0")


def _rounds(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.groupby("round").agg(rows=("member", "count"), steps=("steps", "max"), restart=("restart", "first"))


def test_ipbt_cuts_its_first_population_and_restarts_with_rounds_twice_as_long(tmp_path) -> None:
    frame = run_toy(tmp_path / "run", search="IPBT").frame
    rounds = _rounds(frame)
    assert rounds["rows"].iloc[0] == 8 and (rounds["rows"].iloc[1:][~rounds["restart"].iloc[1:]] == 4).all()
    restarts = list(rounds.index[rounds["restart"]])
    assert restarts, "the toy stagnates: IPBT must restart at least once"
    first = restarts[0]
    assert (rounds.loc[restarts, "rows"] == 8).all()  # the restart's 8 candidates, then the best 4 go on
    lengths = rounds["steps"].diff().fillna(rounds["steps"].iloc[0]).astype(int)
    assert set(lengths.iloc[:first]) == {4} and set(lengths.iloc[first:first + 2]) == {8}  # t_ready 4, then 8
    candidates = frame[frame["round"] == first]
    assert candidates["explored"].all() and candidates["parent"].isin(range(4)).all()
    # half the candidates have fresh weights: their scores fall back near the toy's start (Q(0.9, 0.9) = -0.42)
    before = frame[frame["round"] == first - 1]["score"].max()
    assert (candidates["score"] < before - 0.5).sum() >= 2 and (candidates["score"] > before).any()
    after = frame[frame["round"] == first + 1]
    assert len(after) == 4 and set(after["parent"]) <= set(candidates["member"])
    # budget: the first round and each restart round count twice (8 members for 4), so members end short of 200
    assert frame["steps"].max() == 200 - 4 - sum(4 * 2 ** (k + 1) for k in range(len(restarts)))
    _check_kept(tmp_path / "run", frame)


def _check_kept(folder: Path, frame: pd.DataFrame) -> None:
    """Each generation's best member's checkpoint of its last round is kept (a toy's file is its theta: the score
    the history has for it); ``--member kept`` answers with the best of those and the last round's best (on the
    toy, which every generation climbs, the last round's)."""
    ends, kept = generation_ends(frame), RunDir(folder)
    bests = [best_rows(frame[frame["round"] == r]).iloc[0] for r in ends]
    assert ends and sorted(kept.kept.iterdir()) == sorted(kept.kept_checkpoint(int(b["member"]), r)
                                                          for b, r in zip(bests, ends))
    for best, r in zip(bests, ends):
        state = json.loads(kept.kept_checkpoint(int(best["member"]), r).read_text())
        assert state["steps"] == best["steps"] and 1.2 - np.sum(np.square(state["theta"])) == pytest.approx(best["score"])
    candidates = best_rows(frame[frame["round"].isin([*ends, frame["round"].max()])])
    assert member_row(frame, "kept")["score"] == candidates["score"].max()
    assert member_row(frame, "kept")["round"] in [*ends, frame["round"].max()]


def test_kept_picks_the_best_generation_and_the_newest_on_a_tie() -> None:
    """Rounds 0-1 are a generation (restart at 2), round 2-3 the next (restart at 4), round 4 the last."""
    scores = {0: 1.0, 1: 5.0, 2: 0.5, 3: 5.0, 4: 2.0}
    frame = pd.DataFrame([{"member": m, "round": r, "steps": 10 * (r + 1), "score": s - m, "restart": r in (2, 4)}
                          for r, s in scores.items() for m in range(2)])
    assert generation_ends(frame) == [1, 3]
    assert (member_row(frame, "kept")["round"], member_row(frame, "kept")["member"]) == (3, 0)
    frame.loc[frame["round"] == 4, "score"] = 9.0
    assert member_row(frame, "kept")["round"] == 4
    assert member_row(frame.assign(restart=False), "kept")["round"] == 4  # no restart: the last round's best
    with pytest.raises(UsageError, match="best, kept or a member"):
        member_row(frame, "worst")


def test_a_kept_off_policy_member_loads_without_the_runs_replay_segments(tmp_path: Path) -> None:
    """An off-policy member keeps its replay buffer in segments beside its checkpoints, which the prune deletes:
    a kept checkpoint loads (as ``--member kept`` loads it, a donor's) once they and the run's files are gone.
    A run trained before pbx kept generations' bests (its history marked as restarted, no ``kept/``) is told so."""
    run = tmp_path / "dqn"
    assert train_main(["--env", "CartPole-v1", "--algo", "dqn", "--search", "none", "--batchsize", "1", "--device",
                       "cpu", "--t_ready", "100", "--max_budget", "200", "-m", "buffer_size=1000", "learning_starts=64",
                       "net_arch=[16,16]", "eval_episodes=0", "train_freq=4", "--run-dir", str(run)]) == 0
    target = find_target(run, "kept")
    assert not target.kept and target.round == 1
    assert any(".replay." in f.name for f in RunDir(run).checkpoints.iterdir())
    RunDir(run).keep(target.member, target.round)
    shutil.rmtree(RunDir(run).checkpoints)
    member = dataclasses.replace(target, kept=True).load_member("cpu")
    try:
        assert member.steps == 200 and member.model.replay_buffer.size() == 0  # the policy, not the buffer
    finally:
        member.close()
    shutil.rmtree(RunDir(run).kept)
    frame = pd.read_csv(RunDir(run).history, dtype=str)  # as written, but for the marks below
    frame["restart"] = (frame["round"] == "1").map(str)
    frame.loc[frame["round"] == "0", "score"] = "1000.0"  # round 0 ended a generation, and scored higher
    frame.to_csv(RunDir(run).history, index=False)
    with pytest.raises(UsageError, match="trained before pbx kept each generation's best"):
        find_target(run, "kept")



def test_the_report_counts_the_members_of_the_last_round(tmp_path: Path) -> None:
    """IPBT's first round trains 8 members for a population of 4: the summary counts the population that ends
    the run, not every member id the run ever had; and it gives the kept answer, from the last round or from
    a generation a restart ended, whichever scored higher."""
    run = tmp_path / "run"
    run_toy(run, search="IPBT")
    from pbx.report import main as report_main
    assert report_main([str(run)]) == 0
    summary = (RunDir(run).report / "summary.md").read_text()
    assert ", 4 members in the last round," in summary
    frame = read_csv(RunDir(run).history)
    kept, ends = member_row(frame, "kept"), generation_ends(frame)
    assert ends == [22] and int(kept["round"]) == 34  # one restart; the last round's best beat the first generation's
    assert (f"**Kept answer: train {kept['score']:.4g}, test {kept['test_score']:.4g}** (member "
            f"{int(kept['member'])} of the last round; the best on train score of the 2 generations' best "
            "members") in summary
    best = int(best_rows(frame[frame["round"] == 22]).iloc[0]["member"])
    raw = pd.read_csv(RunDir(run).history, dtype=str)  # as written, but: the first generation's best scored highest
    raw.loc[(raw["round"] == "22") & (raw["member"] == str(best)), ["score", "test_score"]] = "1000.0"
    raw.to_csv(RunDir(run).history, index=False)
    assert report_main([str(run)]) == 0
    assert (f"**Kept answer: train 1000, test 1000** (member {best}'s best, kept at the restart after round 23; "
            in (RunDir(run).report / "summary.md").read_text())


def test_an_ipbt_run_ends_with_its_population_when_a_restart_would_take_the_last_round(tmp_path: Path) -> None:
    """At max_budget 112 (pop 4, t_ready 4) the toy's restart after round 23, 8 candidates at 8 steps, uses up the
    budget exactly: the run ends on the uncut candidates (the reference cuts them inside the round). A restart
    needs a round after it, so that the last round holds the population."""
    frame = run_toy(tmp_path / "run", search="IPBT", max_budget=112).frame
    last = frame[frame["round"] == frame["round"].max()]
    assert len(last) == 4, f"the last round holds {len(last)} members (population mean {last['score'].mean():.4g})"


def test_a_cartpole_ipbt_run_ends_with_its_population_when_a_restart_would_take_the_last_round(
        tmp_path: Path) -> None:
    """PPO on CartPole, population 2, rounds of 64 steps (``patience`` 2): at max_budget 1,792 the population
    restarts after rounds 2 and 8, the second time when round 8 ends at 1,152 of the budget, in rounds of 128.
    At 1,664 that restart round, 4 candidates at 256 steps, would use up the budget exactly (the reference's
    late-restart rule allows it: 1,152 + 2 x 2 x 128 is not past 1,664) and end the run on 4 uncut members: the
    run goes on without it, ends on 2, and its report counts 2."""
    from pbx.report import main as report_main

    def run(budget: int) -> pd.DataFrame:
        folder = tmp_path / str(budget)
        assert train_main(["--env", "CartPole-v1", "--search", "IPBT", "--batchsize", "2", "--t_ready", "64",
                           "--max_budget", str(budget), "--device", "cpu", "-m", "n_envs=2", "n_steps=32",
                           "batch_size=32", "eval_episodes=0", "net_arch=[16,16]", "patience=2",
                           "--run-dir", str(folder)]) == 0
        return read_csv(RunDir(folder).history)

    longer = run(1792)
    assert sorted(longer.loc[longer["restart"], "round"].unique()) == [3, 9]
    exact = run(1664)
    last = exact[exact["round"] == exact["round"].max()]
    assert sorted(exact.loc[exact["restart"], "round"].unique()) == [3] and len(last) == 2, \
        f"the last round holds {len(last)} members"
    assert report_main([str(tmp_path / "1664")]) == 0
    assert ", 2 members in the last round," in (RunDir(tmp_path / "1664").report / "summary.md").read_text()


@pytest.mark.parametrize("search, budget", [("IPBT", 8), ("BGPBT", 12)])
def test_a_budget_the_first_population_uses_up_is_refused(search: str, budget: int) -> None:
    """A first population larger than the kept one is cut after its round: a budget that round uses up (x2 for
    IPBT, x3 for BG-PBT, at t_ready 4) would end the run on the uncut candidates."""
    with pytest.raises(UsageError, match="max_budget .* leaves no round after the first population's"):
        toy_config(search=search, max_budget=budget)


def test_each_generations_states_are_scored_before_its_first_round_through_kill_and_two_ranks(tmp_path: Path) -> None:
    """IPBT (restarting early: ``slow_rounds: 2``) scores each candidate's state once before round 0 and before
    its restart round, as the reference's eval-only call; the first explore of each generation then asks the GP
    (``strategy.csv``'s ``gp``). The scores are the same after kill -9 and --resume (the restart's reset is
    replayed, then scored again) and on two MPI ranks."""
    config = tmp_path / "ipbt.yaml"
    config.write_text("run: {env: toy, search: IPBT, seed: 0, pop_size: 4, t_ready: 4, max_budget: 64}\n"
                      "strategy: {slow_rounds: 2}\n")
    whole = run_toy(tmp_path / "whole", {"slow_rounds": 2}, search="IPBT", max_budget=64).frame.drop(columns="wall_s")
    starts = sorted({0, *whole.loc[whole["restart"], "round"]})
    assert len(starts) == 2 and whole["start_score"].notna().tolist() == whole["round"].isin(starts).tolist()
    assert whole.loc[whole["round"] == 0, "start_score"].tolist() == pytest.approx([1.2 - 2 * 0.9**2] * 8)
    reasons = pd.read_csv(tmp_path / "whole" / "strategy.csv")
    firsts = reasons[reasons["round"].isin(starts) & reasons["explored"]]
    assert set(firsts["round"]) == set(starts) and all(json.loads(i)["gp"] == 1.0 for i in firsts["info"])

    killed = start_train("--config", str(config), "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=len(whole[whole["round"] < starts[1]]) - 1)
    resumed = start_train("--resume", str(tmp_path / "killed"))
    assert resumed.wait(timeout=240) == 0, resumed.stderr.read()
    pd.testing.assert_frame_equal(read_csv(tmp_path / "killed" / "history.csv").drop(columns="wall_s"), whole)

    mpi = mpiexec("-m", "pbx.train", "--config", str(config), "--run-dir", str(tmp_path / "mpi"))
    assert mpi.returncode == 0, mpi.stderr
    pd.testing.assert_frame_equal(history(tmp_path / "mpi"), whole)
