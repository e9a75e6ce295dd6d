"""The MPI runner: the population spread over ranks, one coordinator deciding.

    mpiexec -n 8 python -m pbx.train --search PB2

Rank ``r`` owns members ``i`` with ``i % size == r`` and trains them as the
synchronous runner does (:class:`~pbx.runners.sync.LocalExecutor`). After each
round the ranks' results are gathered on rank 0, the coordinator, which writes
the history, takes the decisions with the run's generator (the GP and EXP3 are
computed once, not on every rank) and broadcasts them, so the history is the
synchronous runner's for the same seed. A recipient on another rank than its
donor gets the donor's checkpoint bytes over MPI, from memory, never through a
shared file system (clusters often have none that is fast):

- ``p2p`` (default): the donor's rank sends to each rank holding one of its
  recipients; only the pairs that copy communicate.
- ``collective``: one broadcast per donor from its rank, the natural choice for
  winner-takes-all where every recipient copies the same member.

Each rank writes its own members' checkpoints and TensorBoard folders; only the
coordinator writes ``history.csv``, ``strategy.csv``, ``config.yaml``, the
population's TensorBoard and the terminal, and holds the run folder's lock.

Failure: an exception on any rank prints one ``error:`` line naming the rank
and member and ends that process at once; the launcher (Hydra, ``srun``) then
stops every other rank, so the job ends within seconds with a non-zero code and
no process left behind, as it does when a rank is killed. Finished rounds are
in the history, and ``--resume`` (with any number of ranks, or none) completes
the run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, NoReturn, Sequence

import numpy as np

from pbx.config import RunConfig
from pbx.errors import UsageError
from pbx.history import History
from pbx.run_dir import RunDir
from pbx.runners.loop import Executor, RoundLoop, T, Trained
from pbx.runners.sync import LocalExecutor
from pbx.space import Config
from pbx.strategies import Decision

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
"""Set in each process by an MPI launcher (Hydra and ``srun`` with PMI, Open MPI, PMIx, MVAPICH).
mpi4py is imported only when one of them is: a plain ``python -m pbx.train`` never initialises MPI."""


def world() -> Intracomm | None:
    """``MPI.COMM_WORLD`` when this process was started by an MPI launcher, else None."""
    if not any(var in os.environ for var in LAUNCHER_VARS):
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD


class MPIExecutor(Executor):
    """This rank's members, trained locally; results gathered and checkpoints moved over MPI."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, comm: Intracomm) -> None:
        from mpi4py import MPI

        self.cfg, self.run_dir, self.comm = cfg, run_dir, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks on this machine
        self.local = LocalExecutor(cfg, run_dir, [i for i in range(cfg.run.pop_size) if self.owner(i) == self.rank],
                                   local_rank=node.Get_rank())
        node.Free()
        self.coordinator = self.rank == 0

    def owner(self, member: int) -> int:
        return member % self.size

    @property
    def owned(self) -> list[int]:
        return self.local.indices

    def share(self, value: T) -> T:
        return self.comm.bcast(value, root=0)

    def build(self, configs: Sequence[Config]) -> None:
        self.run_dir.checkpoints.mkdir(parents=True, exist_ok=True)  # a rank on another machine makes its own
        self.local.build(configs)

    def restore(self, round_: int, steps: Mapping[int, int]) -> None:
        self.local.restore(round_, steps)

    def train_round(self, round_: int, steps: int, test_seed: int | None,
                    advance: Callable[[int], None]) -> list[Trained]:
        mine = self.local.train_round(round_, steps, test_seed, advance)
        gathered = self.comm.gather(mine, root=0)
        if gathered is None:
            return []
        others = [t for part in gathered[1:] for t in part]
        advance(len(others) * self.cfg.trained_steps(round_))  # the bar counts the other ranks' members at the end
        return sorted(mine + others, key=lambda t: t.member)

    def apply(self, decisions: Sequence[Decision], round_: int) -> None:
        received = self._move_checkpoints(decisions, round_)
        with tempfile.TemporaryDirectory(prefix="pbx-recv-") as tmp:
            for donor, data in received.items():
                (Path(tmp) / f"member_{donor}.ckpt").write_bytes(data)

            def donor_file(donor: int) -> Path:
                own = self.owner(donor) == self.rank
                return self.run_dir.checkpoint(donor, round_) if own else Path(tmp) / f"member_{donor}.ckpt"

            self.local.apply_from(decisions, donor_file)

    def close(self) -> None:
        self.local.close()

    def _move_checkpoints(self, decisions: Sequence[Decision], round_: int) -> dict[int, bytes]:
        """Send this rank's donors' checkpoints where recipients need them; return what this rank received."""
        pairs = sorted({(d.donor, self.owner(d.member)) for d in decisions
                        if d.copies and self.owner(d.donor) != self.owner(d.member)})
        if self.cfg.run.comm == "collective":
            return self._broadcast(pairs, round_)
        return self._point_to_point(pairs, round_)

    def _point_to_point(self, pairs: list[tuple[int, int]], round_: int) -> dict[int, bytes]:
        """Non-blocking sends of every (donor, rank) pair first, then the receives: no ordering can deadlock."""
        from mpi4py import MPI

        requests, buffers = [], []
        for donor, dest in pairs:
            if self.owner(donor) == self.rank:
                data = np.frombuffer(self.run_dir.checkpoint(donor, round_).read_bytes(), dtype=np.uint8)
                size = np.array([data.size], dtype=np.int64)
                buffers += [size, data]  # alive until the sends complete
                requests += [self.comm.Isend(size, dest=dest, tag=2 * donor),
                             self.comm.Isend(data, dest=dest, tag=2 * donor + 1)]
        received = {}
        for donor, dest in pairs:
            if dest == self.rank:
                size = np.empty(1, dtype=np.int64)
                self.comm.Recv(size, source=self.owner(donor), tag=2 * donor)
                data = np.empty(int(size[0]), dtype=np.uint8)
                self.comm.Recv(data, source=self.owner(donor), tag=2 * donor + 1)
                received[donor] = data.tobytes()
        MPI.Request.Waitall(requests)
        return received

    def _broadcast(self, pairs: list[tuple[int, int]], round_: int) -> dict[int, bytes]:
        """One broadcast per donor that crosses ranks, from the donor's rank to every rank."""
        received = {}
        for donor in sorted({donor for donor, _ in pairs}):
            root = self.owner(donor)
            data = np.frombuffer(bytearray(self.run_dir.checkpoint(donor, round_).read_bytes()), dtype=np.uint8) \
                if self.rank == root else None
            size = np.array([data.size if data is not None else 0], dtype=np.int64)
            self.comm.Bcast(size, root=root)
            if data is None:
                data = np.empty(int(size[0]), dtype=np.uint8)
            self.comm.Bcast(data, root=root)
            if any(d == donor and dest == self.rank for d, dest in pairs):
                received[donor] = data.tobytes()
        return received


class MPIRunner(RoundLoop):
    """The round loop with the population spread over the ranks of ``comm``."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, comm: Intracomm) -> None:
        super().__init__(cfg, run_dir, MPIExecutor(cfg, run_dir, comm))

    def run(self) -> History | None:
        """As :meth:`RoundLoop.run`; an error on this rank ends the job with one line naming rank and member."""
        executor = self.executor
        assert isinstance(executor, MPIExecutor)
        try:
            return super().run()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # noqa: B036 - any failure must end the whole job, not hang it
            where = f"rank {executor.rank}" + (f", member {executor.local.current}"
                                               if executor.local.current is not None else "")
            if isinstance(err, UsageError):
                abort(f"{where}: {err}", 2)
            log = self.run_dir.path / f"error-rank{executor.rank}.txt"
            log.write_text("".join(traceback.format_exception(err)))
            abort(f"{where}: {type(err).__name__}: {err} (traceback in {log})", 1)


def abort(message: str, code: int) -> NoReturn:
    """Print ``error: message`` and end this process now; the MPI launcher then ends every other rank.

    ``os._exit`` and not ``MPI.Abort``: Hydra then stops the job without its own
    banner, and no rank waits in a collective for one that will never come.
    """
    sys.stdout.flush()
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(code)
