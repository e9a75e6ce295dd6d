"""FIRE PBT and the deceptive toy: roles, curve comparisons, an evaluator's win, runs that resume after kill -9
and under ``mpiexec -n 2`` write the synchronous history, and bad input."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pbx import train
from pbx.curves import read_curves
from pbx.errors import UsageError
from pbx.history import History, Row, read_csv
from pbx.standings import best_rows
from pbx.members.base import MemberContext
from pbx.members.toys.deceptive import DeceptiveToyMember, DeceptiveToySettings, target
from pbx.runners.start import launch, new_run
from pbx.schedule import plan_replay
from pbx.space import Continuous, Space
from pbx.strategies import FIRE, FIRESettings, RunContext
from pbx.strategies.fire.curves import Evaluation, Rounds, overlap

from conftest import ROOT, kill_after, run_toy, start_train

SPACE = Space({"h": Continuous(0.0001, 1.1)})
ROLES = ("pop1", "pop1", "pop2", "pop2", "eval", "eval")
FIRE_TOY = ("--env", "toy-deceptive", "--search", "FIRE", "--batchsize", "6", "--seed", "1", "--max_budget", "500")
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")


def _fire(**settings: object) -> FIRE:
    return FIRE(FIRESettings(**settings), context=RunContext(rounds=20, pop_size=6, roles=ROLES))


def _history(curves: dict[int, list[float]] | dict[int, list[list[float]]],
             starts: dict[int, tuple[int, int]]) -> History:
    """Rows of the 6 members of :data:`ROLES`: member m scores ``curves[m]`` over the rounds (a list per round:
    the 20 points within it, one per step, the last its score); an evaluator ``e`` in ``starts`` copied member
    ``starts[e][1]`` to start at round ``starts[e][0]``, with h 0.5."""
    rows = []
    for m, scores in curves.items():
        for r, score in enumerate(scores):
            start, parent = starts.get(m, (-1, m))
            within = tuple((20 * r + k + 1, v) for k, v in enumerate(score)) if isinstance(score, list) else ()
            last = within[-1][1] if within else score
            rows.append(Row(member=m, round=r, steps=20 * (r + 1), wall_s=0.0, score=last, test_score=last,
                            parent=parent if r == start else m, explored=r == start, config={"h": 0.5 + m / 10},
                            role=ROLES[m], curve=within))
    return History(SPACE.names).with_rows(rows)


def test_roles_split_the_population_as_pbt_zoo_does() -> None:
    assert FIRE.roles(FIRESettings(), 22) == ("pop1",) * 8 + ("pop2",) * 8 + ("eval",) * 6
    assert FIRE.roles(FIRESettings(), 6) == ROLES
    assert FIRE.roles(FIRESettings(sub_pops=[2, 2, 2], evaluators=3), 9)[4:] == ("pop3", "pop3", "eval", "eval", "eval")


def test_curves_compare_where_they_reach_the_same_score() -> None:
    fire = _fire()
    slow, fast = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0]
    # fast starts where slow was at step 2: compared with slow's 2, 3, 4 it leads by 6 - 4
    assert fire.compare.score_diff(fast, slow) == 2.0 and fire.compare.score_diff(slow, fast) == -2.0
    assert fire.compare.binomial(fast, slow) == pytest.approx(0.5)  # 2 of 3 points better: P(X >= 2 | 3) = 1/2
    above, below = [10.0, 11.0], [1.0, 2.0]  # never the same score, the same rate: no better, though above
    assert fire.compare.score_diff(above, below) == 0.0 and fire.compare.binomial(above, below) == 0.0
    assert fire.compare.score_diff(below, above) == 0.0 and fire.compare.binomial(below, above) == 1.0
    # above and faster: shifted down onto the slower curve (PBT-Zoo), it leads by 6 - 3 where they meet at 2
    assert fire.compare.score_diff([10.0, 14.0, 18.0], [1.0, 2.0, 3.0]) == 3.0
    assert fire.compare.score_diff([12.0], [1.0, 2.0, 3.0]) == 0.0  # one point above a curve is no rate
    assert overlap(np.array([]), np.array(below)) is None and fire.compare.binomial([], below) == 1.0  # all NaN
    # smoothing over 1 round: weights exp(-d^2 / 2) of the distance d in rounds, e.g. 3 e^-2 / (1 + e^-0.5 + e^-2)
    assert _fire(smoothing=1.0).compare.smooth([0.0, 0.0, 3.0]).round(3).tolist() == [0.233, 0.822, 1.722]


def test_an_evaluator_that_beats_the_child_hands_it_its_weights() -> None:
    rounds = 12
    child = [float(r) for r in range(rounds)]  # member 0, P1's best
    curves = {0: child, 1: [r / 2 for r in range(rounds)], 2: [0.0] * rounds, 3: [0.0] * rounds,
              # evaluator 4 took member 2's weights at round 1 and improves twice as fast from the same score;
              # evaluator 5 took member 3's at round 8 and is worse than the child from the start
              4: [0.0] + [2.0 * r for r in range(rounds - 1)], 5: [0.0] * 8 + [1.0] * 4}
    history = _history(curves, {4: (1, 2), 5: (8, 3)})
    decisions = _fire(max_eval_rounds=8).decide(history, SPACE, np.random.default_rng(0))
    win = decisions[0]
    assert (win.donor, win.explored, dict(win.config)) == (4, False, {"h": 0.9}) and win.info["p_value"] < 0.01
    # P2's fitness: from the score where they meet, 5 trails 4 by 8 - 1 (member 3: -7, member 2: +7)
    assert (decisions[3].donor, decisions[3].explored) == (2, True) and decisions[3].info["fitness"] == -7.0
    assert decisions[2].info == {} and decisions[1].donor == 0  # and P1 runs PBT on the score
    # both evaluators take a new task: 4 evaluates member 2 with the best P1 member's config; member 3 is being
    # replaced, so 5 has no member to evaluate and copies P1's best until one is free
    assert [(d.donor, d.explored, dict(d.config)) for d in decisions[4:]] == [(2, True, {"h": 0.5}),
                                                                              (0, True, {"h": 0.5})]
    assert decisions[4].ops == ("FIRE: won", "FIRE: evaluate m2 with m0's config")
    assert decisions[5].ops == ("FIRE: stop, child or parent replaced", "FIRE: idle, copies P1's best")


def _stepwise(rate: float, start: float, rounds: int) -> list[list[float]]:
    """A curve of 20 points per round rising by ``rate`` per step from ``start`` (its first point: start + rate)."""
    return [[start + rate * (20 * r + k + 1) for k in range(20)] for r in range(rounds)]


@pytest.mark.parametrize("start, rate, wins", [
    (0.0, 0.02, True),   # from below the child's score, twice its rate: compared where they meet, it wins
    (2.0, 0.02, True),   # from above the child's whole curve, twice its rate: shifted onto it, it wins
    (0.0, 0.01, False),  # from below at the child's rate: never better
    (2.0, 0.01, False),  # above it at its rate: a head start, not a rate
])
def test_at_default_settings_an_evaluator_rising_faster_than_its_child_hands_its_weights_over(
        start: float, rate: float, wins: bool) -> None:
    """Curves of 20 points a round (a step each, as the deceptive toy reports): two rounds of evaluation are
    40 paired points, so the binomial test can reach p < 0.01 inside the default 3 rounds; one point a round
    could not (p = 1/8 at best after 3)."""
    rounds = 6
    curves = {0: _stepwise(0.01, 0.0, rounds), 1: _stepwise(0.005, 0.0, rounds),  # P1: member 0 is the child
              2: [[0.0] * 20] * rounds, 3: [[0.0] * 20] * rounds, 5: [[0.0] * 20] * rounds,
              4: [[0.0] * 20] * 4 + _stepwise(rate, start, 2)}  # evaluator 4 took member 2's weights at round 4
    decisions = _fire().decide(_history(curves, {4: (4, 2)}), SPACE, np.random.default_rng(0))
    if wins:
        assert (decisions[0].donor, decisions[0].explored) == (4, False) and decisions[0].info["p_value"] < 0.01
        assert decisions[0].info["score_diff"] > 0 and decisions[4].ops[0] == "FIRE: won"
    else:
        assert decisions[0].donor == 0 and not any("won" in op for op in decisions[4].ops)


@pytest.mark.parametrize("start, stops", [(2, True), (4, False)])
def test_max_eval_rounds_ends_an_evaluation_the_test_passes_but_the_score_does_not(start: int, stops: bool) -> None:
    """The evaluator beats the child at 78 of 79 points (p far below 0.01), yet the child's one spike keeps the
    child's best score above it: no win. At the default 3 rounds an evaluation in its 4th stops; in its 2nd it goes
    on. (Before, it went on while p stayed below p_value, for as many rounds as that lasted.) The next task goes
    to member 3, which has waited longest."""
    rounds = 6
    child = _stepwise(0.01, 0.0, rounds)
    child[0][9] = 100.0
    evaluator = [[0.02 * (20 * r + k + 1) - 0.015 for k in range(20)] for r in range(rounds - start)]
    curves = {0: child, 1: _stepwise(0.005, 0.0, rounds), 2: [[0.0] * 20] * rounds, 3: [[0.0] * 20] * rounds,
              5: [[0.0] * 20] * rounds, 4: [[0.0] * 20] * start + evaluator}
    decisions = _fire().decide(_history(curves, {4: (start, 2)}), SPACE, np.random.default_rng(0))
    assert decisions[0].donor == 0  # the child keeps its own weights
    if stops:
        assert decisions[4].ops == ("FIRE: stop, not better", "FIRE: evaluate m3 with m0's config")
        info = decisions[4].info
        assert info["eval_rounds"] == 4 and info["p_value"] < 1e-6 and info["score_diff"] < 0
    else:
        assert decisions[4].ops == () and decisions[4].donor == 4


def test_a_parent_member_with_a_nan_score_is_replaced_and_never_evaluated() -> None:
    rounds = 12
    curves = {0: [float(r) for r in range(rounds)], 1: [r / 2 for r in range(rounds)], 2: [0.0] * rounds,
              # member 3 diverged in the last round, though its evaluator (5) improves faster than member 2's (4)
              3: [0.0] * (rounds - 1) + [float("nan")],
              4: [0.0] * 8 + [1.0] * 4, 5: [0.0] * 8 + [9.0, 10.0, 11.0, 12.0]}
    decisions = _fire().decide(_history(curves, {4: (8, 2), 5: (8, 3)}), SPACE, np.random.default_rng(0))
    assert (decisions[3].donor, decisions[3].explored) == (2, True) and "fitness" not in decisions[3].info
    assert decisions[2].donor == 2  # the member with a finite fitness is the donor, never the recipient
    assert not any("evaluate m3" in op for d in decisions for op in d.ops)


def test_a_child_is_never_a_member_being_replaced_that_round() -> None:
    roles = ("pop1", "pop1", "pop2", "pop2", "pop3", "pop3", "eval", "eval", "eval")
    curves = {0: [0, 5, 10, 20, 30, 40], 1: [0, 1, 2, 3, 4, 5], 4: [0] * 6, 5: [0] * 6, 8: [0] * 6,
              # P2: member 2 scores best but its evaluator (6) improves slower than member 3's (7), so it is replaced
              2: [0, 1, 2, 3, 4, 5], 3: [0, 0, 0, 0, 0, 1], 6: [0, 0, 0, 0.5, 1, 1.5], 7: [0, 0, 1, 2, 3, 4]}
    starts = {6: (2, 2), 7: (2, 3)}
    rows = [Row(member=m, round=r, steps=20 * (r + 1), wall_s=0.0, score=float(score), test_score=float(score),
                parent=starts.get(m, (-1, m))[1] if r == starts.get(m, (-1, m))[0] else m,
                explored=r == starts.get(m, (-1, m))[0], config={"h": 0.1 + m / 10}, role=roles[m])
            for m, scores in curves.items() for r, score in enumerate(scores)]
    fire = FIRE(FIRESettings(sub_pops=[2, 2, 2], evaluators=3), context=RunContext(rounds=20, pop_size=9, roles=roles))
    decisions = fire.decide(History(SPACE.names).with_rows(rows), SPACE, np.random.default_rng(0))
    assert (decisions[2].donor, decisions[2].explored) == (3, True)
    # P3's members are evaluated with the config of P2's best that stays: member 3, not member 2
    assert [d.ops[-1] for d in decisions[6:8]] == ["FIRE: evaluate m4 with m3's config",
                                                   "FIRE: evaluate m5 with m3's config"]


def test_a_p3_member_is_evaluated_with_the_config_of_p2s_best_by_fitness_and_its_child_is_found_again() -> None:
    """P2's member 2 scores best, but member 3's weights improve fastest (its evaluator's curve): P3's evaluation
    takes member 3's config (fitness, what P2 is selected on, as PBT-Zoo does), and the next round's decisions
    still know member 3 as the child, from the config the evaluator took."""
    roles = ("pop1", "pop1", "pop2", "pop2", "pop2", "pop3", "pop3", "eval", "eval", "eval", "eval")
    curves = {0: [0, 5, 10, 20, 30, 40], 1: [0, 1, 2, 3, 4, 5], 2: [0, 1, 2, 3, 4, 6], 3: [0, 0, 0, 0, 0, 1],
              4: [0] * 6, 5: [0] * 6, 6: [0] * 6, 10: [0] * 6,
              # evaluators 7, 8, 9 took members 2, 3, 4 at round 2: 8's rises fastest, 9's slowest
              7: [0, 0, 0, 1, 2, 3], 8: [0, 0, 0, 2, 4, 6], 9: [0, 0, 0, 0.1, 0.2, 0.3]}
    starts = {7: (2, 2), 8: (2, 3), 9: (2, 4)}
    rows = [Row(member=m, round=r, steps=20 * (r + 1), wall_s=0.0, score=float(score), test_score=float(score),
                parent=starts.get(m, (-1, m))[1] if r == starts.get(m, (-1, m))[0] else m,
                explored=r == starts.get(m, (-1, m))[0], config={"h": 0.1 + m / 20}, role=roles[m])
            for m, scores in curves.items() for r, score in enumerate(scores)]
    fire = FIRE(FIRESettings(sub_pops=[2, 3, 2], evaluators=4),
                context=RunContext(rounds=20, pop_size=11, roles=roles))
    history = History(SPACE.names).with_rows(rows)
    decisions = fire.decide(history, SPACE, np.random.default_rng(0))
    assert (decisions[4].donor, decisions[4].explored) == (3, True)  # lowest fitness (8.7 > -0.3 > -8.4)
    p3 = [d for d in decisions if any(op.startswith("FIRE: evaluate m5") for op in d.ops)]
    assert len(p3) == 1 and p3[0].ops[-1] == "FIRE: evaluate m5 with m3's config"
    assert p3[0].config == history.config_of(history.latest().iloc[3])
    # a round later the evaluation is known by the config the evaluator took: its child is member 3
    last, decided = {row.member: row for row in rows if row.round == 5}, {d.member: d for d in decisions}
    after = [dataclasses.replace(last[m], round=6, steps=140, parent=decided[m].donor, explored=decided[m].explored,
                                 config=decided[m].config) for m in range(len(roles))]
    table = Rounds(history.with_rows(after), np.array(roles))
    assert table.evaluation(p3[0].member) == Evaluation(parent=5, child=3, start=6)


def test_only_members_whose_scores_are_results_run_test_episodes(tmp_path: Path) -> None:
    frame = run_toy(tmp_path, env="toy-deceptive", search="FIRE", pop_size=6, t_ready=20, max_budget=100).frame
    results = frame["role"] == "pop1"
    assert frame.loc[results, "test_score"].notna().all() and frame.loc[~results, "test_score"].isna().all()


def test_the_deceptive_toy_rewards_the_slow_schedule() -> None:
    def final(schedule) -> float:
        member = DeceptiveToyMember(MemberContext("toy-deceptive", 0, 0), DeceptiveToySettings(init="space"),
                                    {"h": 1.0})
        for r in range(50):
            member.apply({"h": schedule(20 * r)})
            score = member.train(20)
        return score

    optimal, greedy = final(lambda t: target(t, 1000)), final(lambda t: 0.0001)
    assert optimal == pytest.approx(1.198, abs=1e-3) and greedy == pytest.approx(0.827, abs=1e-3)


def test_ipbt_restarts_the_deceptive_toy(tmp_path: Path) -> None:
    """The deceptive toy re-makes its weights for IPBT's restart (it refused IPBT before it had reset_weights): a
    fresh candidate starts again at theta0, Q(0.9) = 0.39, and keeps the schedule's distance record."""
    member = DeceptiveToyMember(MemberContext("toy-deceptive", 0, 0), DeceptiveToySettings(), {"h": 1.0})
    member.train(100)
    distance, theta = member.distance, member.theta
    member.reset_weights("shrink_perturb", 1, shrink=0.2, perturb=0.1)
    assert member.theta == pytest.approx(0.2 * theta + 0.09) and member.distance == distance
    member.reset_weights("reinit", 1)
    assert member.evaluate(0) == pytest.approx(0.39) and member.distance == distance
    frame = run_toy(tmp_path, env="toy-deceptive", search="IPBT", pop_size=4, t_ready=10, max_budget=600).frame
    restarts = frame.groupby("round")["restart"].first()
    assert restarts.any(), "the run must restart for the test to see reset_weights"
    candidates = frame[frame["round"] == restarts[restarts].index[0]]
    assert (candidates["score"] < 0.6).any()  # fresh weights: back near Q(0.9) after one round


def _history_of(run_dir: Path) -> pd.DataFrame:
    return read_csv(run_dir / "history.csv").drop(columns="wall_s")


def test_fire_killed_and_resumed_or_on_two_ranks_writes_the_synchronous_history(tmp_path: Path) -> None:
    """One uninterrupted synchronous run is the reference for both a kill -9 + resume and ``mpiexec -n 2``."""
    whole = start_train(*FIRE_TOY, "--run-dir", str(tmp_path / "whole"))
    out, err = whole.communicate(timeout=120)
    assert whole.returncode == 0, err
    frame = _history_of(tmp_path / "whole")
    # the run did FIRE's work: evaluators took P2 weights, and the best member is a result
    evaluators = frame[frame["role"] == "eval"]
    assert (evaluators["explored"] & evaluators["parent"].isin([2, 3])).any()
    assert "(member 0)" in out.splitlines()[-1] or "(member 1)" in out.splitlines()[-1]

    killed = start_train(*FIRE_TOY, "--run-dir", str(tmp_path / "killed"))
    kill_after(killed, tmp_path / "killed" / "history.csv", rows=6 * 8)
    assert 8 <= read_csv(tmp_path / "killed" / "history.csv")["round"].max() < 24, "the kill should land mid-run"
    resumed = start_train("--resume", str(tmp_path / "killed"))
    assert resumed.wait(timeout=120) == 0, resumed.stderr.read()
    pd.testing.assert_frame_equal(_history_of(tmp_path / "killed"), frame)
    # the curves FIRE compared are the uninterrupted run's too: 20 points a round, one per step
    curves = read_curves(tmp_path / "whole" / "curves.csv")
    assert len(curves) == 20 * len(frame) and (curves.groupby(["member", "round"]).size() == 20).all()
    pd.testing.assert_frame_equal(read_curves(tmp_path / "killed" / "curves.csv"), curves)

    mpi = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "pbx.train", *FIRE_TOY, "--run-dir",
                          str(tmp_path / "mpi")], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert mpi.returncode == 0 and "6 members on 2 MPI ranks" in mpi.stdout, mpi.stderr
    pd.testing.assert_frame_equal(_history_of(tmp_path / "mpi"), frame)
    pd.testing.assert_frame_equal(read_curves(tmp_path / "mpi" / "curves.csv"), curves)


@pytest.mark.parametrize("args, message", [
    (["--batchsize", "10", "-m", "sub_pops=[4,12]"], "make 19 members, but the population is 10"),
    (["--batchsize", "5"], "at least two sub-populations of at least 2 members"),
    (["--batchsize", "10", "-m", "evaluators=5"], "evaluators must be at least 2 and at most the"),
    (["-m", "p_value=1.5"], "p_value must be in (0, 1)"),
    (["--selection", "sigma", "--sigma_k", "0"], "sigma_k must be > 0"),
    (["--margin_abs", "-1"], "margin_abs must be >= 0"),
])
def test_bad_fire_and_guard_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = train.main(["--env", "toy-deceptive", "--search", "FIRE", "--batchsize", "6", *args,
                       "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "run").exists()


def test_bad_input_from_the_command_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pbx.train", *FIRE_TOY, "--batchsize", "5", "--run-dir",
                           str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: FIRE needs") and proc.stderr.count("\n") == 1


def test_replay_takes_a_result_member_and_repeats_its_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = run_toy(tmp_path / "fire", env="toy-deceptive", search="FIRE", pop_size=6, t_ready=20, max_budget=400)
    with pytest.raises(UsageError, match="--member 5 has the role eval in --search FIRE, .* members 0 to 1"):
        plan_replay(tmp_path / "fire", 5)
    replay = plan_replay(tmp_path / "fire", "best")
    best = best_rows(history.frame).iloc[-1]
    assert replay.member == best["member"] and best["role"] == "pop1"
    assert launch(lambda comm: new_run([replay.layer], run_dir=tmp_path / "replay")) is not None
    # the toy is deterministic: the lineage's schedule, through evaluators' and P2's weights, gives its score
    assert read_csv(tmp_path / "replay" / "history.csv")["score"].iloc[-1] == pytest.approx(best["score"], abs=1e-12)
