"""``benchmarks/bench_gpu.py`` runs as documented: its ``--help``, and its small CPU setting for real, whose
printed figures are read back and checked (rates, their ratio, a split that adds up, the minibatches counted,
the population's rates in one process and under ``mpiexec -n 1``)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_gpu.py"
PARTS = ("env stepping (env.step)", "inference (policy forward)", "rest of the rollout", "rollout buffer flatten",
         "minibatch gather", "host-to-device copy", "forward + backward", "optimizer (clip + step)",
         "rest of the update", "outside rollout and update")
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _half_unit(text: str) -> float:
    """Half the last printed digit's unit: how far the rounded number may be from the true one."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** -decimals


def test_help_lists_the_options() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--device", "--env", "--setting", "--repeats", "--split-calls", "--value-loss", "--ranks",
                 "--skip-mpi", "--pop-rounds", "--cores"):
        assert flag in proc.stdout, flag


def test_the_small_cpu_run_prints_its_figures() -> None:
    # One core: pbx then gives torch one thread (two OpenMP threads on a busy 2-core machine spin against each
    # other and train several times slower).
    cores = ["--cores", "1"] if hasattr(os, "sched_setaffinity") else []
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--repeats", "1", "--split-calls", "1",
                           "--ranks", "1", "--pop-rounds", "2", *cores], cwd=ROOT, capture_output=True, text=True,
                          timeout=400)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "small setting: 4 envs x 8 steps, minibatch 16, 3 epochs" in out and "on cpu" in out, out

    # (a): both rates positive and finite, and the ratio theirs (one repeat: the medians are that repeat's)
    found = re.search(rf"member {NUMBER} env steps/s, plain SB3 {NUMBER} env steps/s, member / plain {NUMBER}", out)
    assert found, out
    ours, plain, ratio = map(_number, found.groups())
    assert all(math.isfinite(x) and x > 0 for x in (ours, plain, ratio)), out
    # the ratio within what the printed, rounded rates allow
    (a, da), (b, db) = ((x, _half_unit(s)) for x, s in zip((ours, plain), found.groups()[:2]))
    assert (a - da) / (b + db) - 0.0005 <= ratio <= (a + da) / (b - db) + 0.0005, out

    # (b): every part for both sides, none negative, adding up to the calls' time
    rows = {}
    for label in (*PARTS, "total (the calls)"):
        found = re.search(rf"^ +{re.escape(label)} +{NUMBER} +{NUMBER}% +{NUMBER} +{NUMBER}%$", out, re.M)
        assert found, (label, out)
        rows[label] = [_number(x) for x in found.groups()]
    for side in (0, 2):  # member, plain SB3: seconds in column side, % in side + 1
        total = rows["total (the calls)"][side]
        assert total > 0, out
        assert all(rows[p][side] >= 0 for p in PARTS), out
        assert abs(sum(rows[p][side] for p in PARTS) - total) < 0.001 + 1e-3 * total, out
        assert abs(sum(rows[p][side + 1] for p in PARTS) - 100) < 0.6, out
        for part in ("env stepping (env.step)", "inference (policy forward)", "forward + backward",
                     "optimizer (clip + step)"):
            assert rows[part][side] > 0, (part, out)
        # on a CPU the CNN's forward and backward outweigh the rest of an update many times over
        rest = sum(rows[p][side] for p in ("rollout buffer flatten", "minibatch gather", "host-to-device copy",
                                           "optimizer (clip + step)", "rest of the update"))
        assert rows["forward + backward"][side] > rest, out
    # one rollout of 32 steps in minibatches of 16, 3 epochs: 6 minibatches per call, each timed once
    for side in ("member", "plain SB3"):
        found = re.search(rf"{side}: train\(\) {NUMBER}% of the time, {NUMBER} ms per minibatch "
                          r"\(6 minibatches in 1 call\)", out)
        assert found, (side, out)
        assert 0 < _number(found.group(1)) <= 100 and _number(found.group(2)) > 0, out

    # (c): the population's total rate in one process and on one MPI rank
    for where in (r"one process, members in turn", r"mpiexec -n 1 \(4 per rank\)"):
        found = re.search(rf"{where} +{NUMBER} env steps/s", out)
        assert found, (where, out)
        assert math.isfinite(_number(found.group(1))) and _number(found.group(1)) > 0, out
