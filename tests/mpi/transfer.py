"""``mpiexec -n 2 python tests/mpi/transfer.py RUN_DIR COMM``: member 1 (rank 1) copies member 0 (rank 0)
through the MPI executor after one round of tiny bigfish PPO, then saves itself to RUN_DIR/after.ckpt."""

import sys
from pathlib import Path

from mpi4py import MPI

from pbx.config import resolve
from pbx.run_dir import RunDir
from pbx.runners.mpi import MPIExecutor
from pbx.strategies import Decision

folder, comm_mode = Path(sys.argv[1]), sys.argv[2]
cfg = resolve([{"run": {"env": "bigfish", "search": "PBT", "pop_size": 2, "t_ready": 32, "max_budget": 64,
                        "device": "cpu", "comm": comm_mode},
                "member": {"n_envs": 2, "n_steps": 16, "batch_size": 16, "eval_episodes": 0}}])
run_dir = RunDir(folder)
executor = MPIExecutor(cfg, run_dir, MPI.COMM_WORLD)
configs = [cfg.space.initial() for _ in range(2)]
executor.build(dict(enumerate(configs)))
executor.train_round(0, 32, None, None, lambda steps: None)
MPI.COMM_WORLD.barrier()  # both checkpoints of round 0 are on disk
executor.apply([Decision(0, 0, configs[0]), Decision(1, 0, configs[0])], 0)
if 1 in executor.local.members:
    executor.local.members[1].save(folder / "after.ckpt")
executor.close()
