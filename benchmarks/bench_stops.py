"""What stopping inside a round costs: a ProcGen member's mid-round save, and a run stopped every N seconds.

1. **save**: a bigfish PPO member at pbx's shipped ProcGen settings (64 envs x 256 steps, the IMPALA CNN) trains
   one rollout, then saves its round in progress three times: seconds and MB a save, against the time of the
   rollout it trained (a round at the shipped ``t_ready`` of 500k steps is 30.5 of them). ``checkpoint_minutes``'s
   default comes from this.
2. **stops**: a small bigfish PBT run (2 members) trained uninterrupted, then the same run sent SIGTERM every ``N``
   seconds and resumed after each stop until it ends, for each ``N`` of ``--every``: the stopped run's history
   and curves must equal the uninterrupted run's, and its total wall time (every process, start-up included)
   against the uninterrupted run's is the overhead.

    python benchmarks/bench_stops.py --every 15 30
    python benchmarks/bench_stops.py --skip-save --every 15 --t-ready 4096 --max-budget 16384

Ratios side by side in one run; the machine's load enters both sides.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pbx.history import read_csv  # noqa: E402


def save_cost(folder: Path) -> None:
    from pbx.config import resolve
    from pbx.members import MemberContext, Stopped

    cfg = resolve([{"run": {"env": "bigfish", "search": "none", "pop_size": 1, "device": "cpu"}}])
    member = cfg.member_cls(MemberContext(env="bigfish", index=0, seed=0, device="cpu"), cfg.member, {})
    rollout = cfg.member.n_envs * cfg.member.n_steps
    calls = [0]

    def stop() -> bool:
        calls[0] += 1
        return calls[0] == 2  # after one rollout

    began = time.perf_counter()
    try:
        member.train(2 * rollout, stop=stop)
    except Stopped:
        pass
    trained = time.perf_counter() - began
    times, sizes = [], []
    for i in range(3):
        path = folder / f"part{i}.ckpt"
        began = time.perf_counter()
        member.save(path)
        times.append(time.perf_counter() - began)
        sizes.append(path.stat().st_size / 1e6)
    round_s = trained * cfg.run.t_ready / rollout
    print(f"save: bigfish member at {cfg.member.n_envs} envs x {cfg.member.n_steps} steps: a rollout trained in "
          f"{trained:.1f} s ({rollout / trained:,.0f} steps/s); a mid-round save {np.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}), {np.median(sizes):.1f} MB; a round of "
          f"{cfg.run.t_ready:,} steps at that speed {round_s / 60:.1f} min, so a save every 10 min costs "
          f"{100 * np.median(times) / 600:.3f}% of the time")
    member.close()


def stops(folder: Path, every: list[float], args: list[str]) -> None:
    command = [sys.executable, "-m", "pbx.train", *args]
    began = time.perf_counter()
    subprocess.run([*command, "--run-dir", str(folder / "whole")], cwd=ROOT, check=True, capture_output=True)
    whole_s = time.perf_counter() - began
    whole = read_csv(folder / "whole" / "history.csv").drop(columns="wall_s")
    print(f"stops: uninterrupted {whole_s:.1f} s")
    for n in every:
        run = folder / f"every{n:g}"
        began, count, argv = time.perf_counter(), 0, [*command, "--run-dir", str(run)]
        while True:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                proc.wait(timeout=n)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
            if proc.returncode == 0:
                break
            if proc.returncode != 75:
                raise SystemExit(f"exit {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
            count += 1
            argv = [sys.executable, "-m", "pbx.train", "--resume", str(run)]
        total = time.perf_counter() - began
        same = whole.equals(read_csv(run / "history.csv").drop(columns="wall_s")) and \
            pd.read_csv(folder / "whole" / "curves.csv").equals(pd.read_csv(run / "curves.csv"))
        print(f"stops: SIGTERM every {n:g} s: {count} stops, {total:.1f} s in all, {total / whole_s:.2f} x the "
              f"uninterrupted run; history and curves {'equal' if same else 'DIFFER'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, nargs="*", default=[15.0], help="seconds between two SIGTERMs")
    parser.add_argument("--t-ready", default="2048")
    parser.add_argument("--max-budget", default="8192")
    parser.add_argument("--skip-save", action="store_true")
    args = parser.parse_args()
    run = ["--env", "bigfish", "--search", "PBT", "--batchsize", "2", "--t_ready", args.t_ready, "--max_budget",
           args.max_budget, "--device", "cpu", "-m", "n_envs=4", "n_steps=64", "batch_size=128", "n_epochs=1",
           "eval_episodes=2"]
    with tempfile.TemporaryDirectory(prefix="pbx-stops-") as tmp:
        if not args.skip_save:
            save_cost(Path(tmp))
        if args.every:
            stops(Path(tmp), args.every, run)


if __name__ == "__main__":
    main()
