"""``[mpiexec -n 2] python tests/mpi/candidates.py RUN_DIR MODE``: an IPBT restart of two TD3 members on Pendulum,
carried out by the executor after one round (MODE ``sync``: the synchronous runner's, in this process; ``p2p`` or
``collective``: the MPI runner's). Candidates 0 and 1 go on from their members; candidates 2 and 3 are built for
the restart from the other member (under two ranks each crosses: member ``i`` lives on rank ``i % 2``). Every
candidate then trains the restart round and saves its checkpoint of round 1."""

import sys
from pathlib import Path

from pbx.config import resolve
from pbx.run_dir import RunDir
from pbx.runners.sync import LocalExecutor
from pbx.strategies.base import Decision, WeightReset

folder, mode = Path(sys.argv[1]), sys.argv[2]
cfg = resolve([{"run": {"env": "Pendulum-v1", "algo": "td3", "search": "IPBT", "pop_size": 2, "t_ready": 200,
                        "max_budget": 2000, "device": "cpu", "comm": "p2p" if mode == "sync" else mode},
                "member": {"buffer_size": 1000, "learning_starts": 64, "net_arch": [16, 16], "batch_size": 32,
                           "train_freq": 8, "eval_episodes": 0}}])
run_dir = RunDir(folder)
run_dir.checkpoints.mkdir(parents=True, exist_ok=True)
if mode == "sync":
    executor = LocalExecutor(cfg, run_dir)
else:
    from mpi4py import MPI

    from pbx.runners.mpi import MPIExecutor

    executor = MPIExecutor(cfg, run_dir, MPI.COMM_WORLD)
configs = {i: cfg.space.initial() for i in range(2)}
executor.build(configs)
executor.train_round(0, 200, None, None, lambda steps: None)
executor.share(lambda: None)  # every rank's checkpoints of round 0 are on disk
decisions = [Decision(0, 0, configs[0], restart=True), Decision(1, 1, configs[1], restart=True),
             Decision(2, 1, configs[1], explored=True, restart=True, reset=WeightReset("reinit", 7)),
             Decision(3, 0, configs[0], explored=True, restart=True, reset=WeightReset("shrink_perturb", 8, 0.2, 0.1))]
executor.apply(decisions, 0)
executor.retain({d.member for d in decisions})
executor.train_round(1, 400, None, None, lambda steps: None)
executor.close()
