"""What stopping inside a round costs: a ProcGen member's mid-round save, and a run stopped every N seconds.

1. **save**: a bigfish PPO member at pbx's shipped ProcGen settings (64 envs x 256 steps, the IMPALA CNN) trains
   one rollout, then saves its round in progress three times: seconds and MB a save, against the time of the
   rollout it trained (a round at the shipped ``t_ready`` of 500k steps is 30.5 of them). ``checkpoint_minutes``'s
   default comes from this.
2. **stops**: a small bigfish PBT run (2 members) trained uninterrupted, then the same run sent SIGTERM every ``N``
   seconds and resumed after each stop until it ends, for each ``N`` of ``--every``: the stopped run's history
   and curves must equal the uninterrupted run's, and its total wall time (every process, start-up included)
   against the uninterrupted run's is the overhead.
3. **off-policy save** (``--offpolicy-rows``): a SAC member on Hopper-v5 at pbx's MuJoCo settings with a replay
   buffer of that many rows, full (random rows, no env steps), saved at a round's end; then inside the next round
   it trains a stretch (its speed), and saves its round in progress three times, each after the rows that
   ``checkpoint_minutes`` (5) of training at that speed adds (at most a round's): seconds and MB a save writes
   (checkpoint and the segment of new rows), the member's files on disk; and the same with ``copy_buffer``.

    python benchmarks/bench_stops.py --every 15 30
    python benchmarks/bench_stops.py --skip-save --every 15 --t-ready 4096 --max-budget 16384
    python benchmarks/bench_stops.py --skip-save --every --offpolicy-rows 100000

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


def offpolicy_save_cost(folder: Path, rows: int) -> None:
    from bench_agents import _fill, _files_mb
    from pbx.config import resolve
    from pbx.members import MemberContext, Stopped

    env = "Hopper-v5"
    print(f"off-policy save: SAC on {env}, a buffer of {rows:,} rows", flush=True)
    for copy_buffer in (False, True):
        cfg = resolve([{"run": {"env": env, "algo": "sac", "search": "none", "pop_size": 1, "device": "cpu"},
                        # the buffer is full: it learns from the first step
                        "member": {"buffer_size": rows, "copy_buffer": copy_buffer, "learning_starts": 0}}])
        member = cfg.member_cls(MemberContext(env=env, index=0, seed=0, device="cpu"), cfg.member, {})
        run = folder / f"copy_buffer={copy_buffer}"
        run.mkdir()
        rng = np.random.default_rng(0)
        _fill(member, rows, rng)
        began = time.perf_counter()
        member.save(run / "member_0.r0.ckpt")
        end_s = time.perf_counter() - began
        stretch = 1_000
        calls = [0]

        def stop() -> bool:
            calls[0] += 1
            return calls[0] > stretch // cfg.member.train_freq

        began = time.perf_counter()
        try:
            member.train(cfg.run.t_ready, stop=stop)
        except Stopped:
            pass
        speed = member.steps / (time.perf_counter() - began)
        between = min(int(speed * 60 * cfg.run.checkpoint_minutes), cfg.run.t_ready)  # rows a periodic save adds
        times, written = [], []
        for _ in range(3):
            _fill(member, between, rng)
            before = {f.name for f in run.iterdir()}
            began = time.perf_counter()
            member.save(run / "member_0.r1.part.ckpt")
            times.append(time.perf_counter() - began)
            written.append(sum(f.stat().st_size for f in run.iterdir()
                               if f.name not in before or f.name == "member_0.r1.part.ckpt") / 1e6)
        part = (run / "member_0.r1.part.ckpt").stat().st_size / 1e6
        every = cfg.run.checkpoint_minutes
        print(f"    copy_buffer {copy_buffer}: round's end save {end_s:.2f} s; trained {member.steps:,} steps at "
              f"{speed:,.0f} steps/s, so {every:g} min add {between:,} rows; a mid-round save {np.median(times):.2f} s "
              f"(min {min(times):.2f}, max {max(times):.2f}), writing {np.median(written):.1f} MB (the part "
              f"checkpoint {part:.1f} MB); the member's files {_files_mb(run):.0f} MB; every {every:g} min it costs "
              f"{100 * np.median(times) / (60 * every):.3f}% of the time", flush=True)
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
    parser.add_argument("--offpolicy-rows", type=int, help="measure an off-policy member's save with this buffer")
    args = parser.parse_args()
    run = ["--env", "bigfish", "--search", "PBT", "--batchsize", "2", "--t_ready", args.t_ready, "--max_budget",
           args.max_budget, "--device", "cpu", "-m", "n_envs=4", "n_steps=64", "batch_size=128", "n_epochs=1",
           "eval_episodes=2"]
    with tempfile.TemporaryDirectory(prefix="pbx-stops-") as tmp:
        if not args.skip_save:
            save_cost(Path(tmp))
        if args.offpolicy_rows:
            offpolicy_save_cost(Path(tmp), args.offpolicy_rows)
        if args.every:
            stops(Path(tmp), args.every, run)


if __name__ == "__main__":
    main()
