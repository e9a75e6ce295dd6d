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
# Greediness: none, PBT, PB2 and FIRE on the deceptive toy and on the plain toy (docs/results.md).
"$PY" -m pbx.sweep experiments/reduced_deceptive.yaml
"$PY" -m pbx.sweep experiments/reduced_deceptive.yaml -m env=toy
for sweep in reduced_deceptive:reduced_deceptive reduced_deceptive-toy:reduced_deceptive_toy; do
    src=sweeps/${sweep%%:*} dst=docs/results/${sweep##*:}
    "$PY" -m pbx.report "$src" > /dev/null
    mkdir -p "$dst"
    cp "$src/report/"{statistics.md,statistics.tex,comparison.md,comparison.png,intervals.png,profile.png} "$dst/"
    "$PY" -m pbx.report "$src" --baseline PBT --out "$src/report-vs-PBT" > /dev/null
    cp "$src/report-vs-PBT/statistics.md" "$dst/statistics-vs-PBT.md"
done
"$PY" -m pbx.report sweeps/reduced_deceptive --baseline PB2 --out sweeps/reduced_deceptive/report-vs-PB2 > /dev/null
cp sweeps/reduced_deceptive/report-vs-PB2/statistics.md docs/results/reduced_deceptive/statistics-vs-PB2.md
