#!/usr/bin/env bash
# The reduced study of docs/results.md, from nothing to its tables and figures in docs/results/:
# three sweeps (toy, toy-cat, CartPole-v1 PPO) and their rliable reports. About 45 minutes on 2 CPU cores;
# rerun it after an interruption and it finishes what was left.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
for study in reduced_toy reduced_toy_cat reduced_cartpole; do
    "$PY" -m pbx.sweep "experiments/$study.yaml"
    "$PY" -m pbx.report "sweeps/$study" > /dev/null
    mkdir -p "docs/results/$study"
    cp "sweeps/$study/report/"{statistics.md,statistics.tex,comparison.md,comparison.png,intervals.png,profile.png} \
        "docs/results/$study/"
done
# PB2 against PBT, and the categorical strategies against PB2-Rand, rather than against the fixed baseline.
vs() {  # vs STUDY BASELINE
    "$PY" -m pbx.report "sweeps/$1" --baseline "$2" --out "sweeps/$1/report-vs-$2" > /dev/null
    cp "sweeps/$1/report-vs-$2/statistics.md" "docs/results/$1/statistics-vs-$2.md"
}
vs reduced_toy PBT
vs reduced_cartpole PBT
vs reduced_toy_cat PB2-random
