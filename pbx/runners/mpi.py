"""The MPI runner: the population spread over ranks, one coordinator deciding.

    mpiexec -n 8 python -m pbx.train --search PB2

Rank ``r`` owns members ``i`` with ``i % size == r`` and trains them as the
synchronous runner does (:class:`~pbx.runners.sync.LocalExecutor`). After each
round the ranks' results are gathered on rank 0, the coordinator, which writes
the history, takes the decisions with the run's generator (the GP and EXP3 are
computed once, not on every rank) and broadcasts them, so the history is the
synchronous runner's for the same seed. A recipient on another rank than its
donor gets the donor's checkpoint bytes over MPI, from memory, never through a
shared file system (clusters often have none that is fast), and a member built
for the round (a restart's candidate) the files of the donor's experience with
them (:meth:`~pbx.members.Member.experience_files`: an off-policy member's
replay segments):

- ``p2p`` (default): the donor's rank sends to each rank holding one of its
  recipients; only the pairs that copy communicate.
- ``collective``: one broadcast per donor from its rank, the natural choice for
  winner-takes-all where every recipient copies the same member.

Each rank writes its own members' checkpoints and TensorBoard folders; only the
coordinator writes ``history.csv``, ``strategy.csv``, ``config.yaml``, the
population's TensorBoard and the terminal, and holds the run folder's lock.

Outside a run's rounds, rank 0 speaks to the others in :class:`~pbx.runners.ranks.Message` s
of an explicit :class:`~pbx.runners.ranks.Kind`: a run starts (its config, folder and failure
mode) or is refused, and, in a sweep, another run follows or the sweep ends.

Failure: an exception on any rank prints one ``error:`` line naming the rank
and member and ends the whole job with ``MPI_Abort``, whatever the other ranks
are waiting for, so no launcher setting is needed (an interrupted rank, a
scheduler's SIGTERM, ends it the same way). Finished rounds are in the history,
and ``--resume`` (with any number of ranks, or none) completes the run. A rank
killed outright (SIGKILL, out of memory) cannot say so: the launcher ends the
others (``mpiexec`` does; ``srun`` with ``--kill-on-bad-exit=1``). A sweep's
run contains its failures instead: every rank learns of one at the next point
where they meet (:meth:`MPIExecutor.together`), leaves the run with
:class:`~pbx.runners.loop.RunFailed`, and the sweep goes on to its next run.
"""

from __future__ import annotations

import contextlib
import pickle
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Iterator, Mapping, Sequence

import numpy as np

from pbx.config import RunConfig
from pbx.errors import UsageError
from pbx.history import History
from pbx.run_dir import RunDir
from pbx.runners.loop import Executor, RoundLoop, RunFailed, T, Trained
from pbx.runners.ranks import RankStops, abort
from pbx.runners.stopping import RunStopped, StopClock, stop_message
from pbx.runners.sync import LocalExecutor
from pbx.space import Config
from pbx.strategies import Decision

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

def failure(err: BaseException, rank: int, member: int | None, folder: Path) -> tuple[str, int]:
    """The one line that says where ``err`` happened and what it was, and the exit code it gives; the traceback
    of anything but bad input (:class:`UsageError`: code 2) goes to ``folder/error-rankR.txt`` (code 1)."""
    where = f"rank {rank}" + (f", member {member}" if member is not None else "")
    if isinstance(err, UsageError):
        return f"{where}: {err}", 2
    folder.mkdir(parents=True, exist_ok=True)  # a rank on another machine, without a shared file system
    log = folder / f"error-rank{rank}.txt"
    log.write_text("".join(traceback.format_exception(err)))
    return f"{where}: {type(err).__name__}: {err} (traceback in {log})", 1


@contextlib.contextmanager
def together(comm: Intracomm, contained: bool, describe: Callable[[Exception], tuple[str, int]]) -> Iterator[None]:
    """A block every rank runs on its own (it holds no exchange between ranks).

    ``contained``: an exception in it on any rank is :class:`RunFailed` on every rank,
    raised once all have finished the block (one ``allgather``; the first failing
    rank's ``describe(err)`` is the message). Otherwise the exception goes up on its
    rank alone, which ends the job (:func:`run_on_ranks`), and no exchange is added.
    """
    if not contained:
        yield
        return
    mine = None
    try:
        yield
    except Exception as err:  # noqa: BLE001 - whatever it is, every rank must hear of it
        mine = describe(err)
    failures = [f for f in comm.allgather(mine) if f is not None]
    if failures:
        raise RunFailed(*failures[0])


class MPIExecutor(Executor):
    """This rank's members, trained locally; results gathered and checkpoints moved over MPI."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, comm: Intracomm, contained: bool = False,
                 clock: StopClock | None = None) -> None:
        from mpi4py import MPI

        self.cfg, self.run_dir, self.comm, self.contained = cfg, run_dir, comm, contained
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks on this machine
        self.local = LocalExecutor(cfg, run_dir, [i for i in range(cfg.most_members) if self.owner(i) == self.rank],
                                   local_rank=node.Get_rank(), clock=clock)
        self.stops = RankStops(comm)
        self.local.clock.peers = self.stops
        self._until = 0
        """The planned end of the last round trained or restored (the progress bar's count of other ranks')."""
        self.population: set[int] = set()
        """The members of the round trained last, on every rank: a decision naming another one builds it."""
        node.Free()
        self.coordinator = self.rank == 0

    def owner(self, member: int) -> int:
        return member % self.size

    @property
    def owned(self) -> list[int]:
        return self.local.indices

    def share(self, compute: Callable[[], T]) -> T:
        value = None
        with self.together():
            if self.coordinator:
                value = compute()
        return self.comm.bcast(value, root=0)

    def together(self) -> contextlib.AbstractContextManager[None]:
        return together(self.comm, self.contained, self.describe)

    def describe(self, err: BaseException) -> tuple[str, int]:
        """:func:`failure` of ``err`` on this rank, naming the member it was busy with."""
        return failure(err, self.rank, self.local.current, self.run_dir.path)

    def build(self, configs: Mapping[int, Config]) -> None:
        with self.together():
            self.run_dir.checkpoints.mkdir(parents=True, exist_ok=True)  # a rank on another machine makes its own
            self.local.build(configs)
        self.population = set(configs)

    def retain(self, members: Collection[int]) -> None:
        self.local.retain(members)
        self.population = set(members)

    def restore(self, round_: int, steps: Mapping[int, int]) -> None:
        with self.together():
            self.local.restore(round_, steps)
        self._until = max(steps.values())

    def train_round(self, round_: int, until: int, test_seed: int | None, start_seed: int | None,
                    advance: Callable[[int], None]) -> list[Trained]:
        with self.together():
            mine, inside = self.local.train_members(round_, until, test_seed, start_seed, advance)
        # every rank learns of a stop on any rank here, and stops with it (at the latest before the next round)
        reports = self.comm.allgather((mine, inside, self.local.clock.reason))
        reason = next((r if rank == self.rank or r.startswith("rank ") else f"rank {rank}'s {r}"
                       for rank, (_, _, r) in enumerate(reports) if r is not None), None)
        if reason is not None:
            self.local.clock.request(reason, told=True)
        everyone = sorted((t for part, _, _ in reports for t in part), key=lambda t: t.member)
        if reason is not None and len(everyone) < len(self.population):
            self.local.keep_through(round_, mine)
            self.stops.drain()
            stopped_inside = {i: steps for _, part, _ in reports for i, steps in part.items()}
            raise RunStopped(stop_message(reason, round_, [t.member for t in everyone], stopped_inside,
                                          len(self.population)), self.run_dir.path)
        if not self.coordinator:
            return []
        others = [t for t in everyone if self.owner(t.member) != self.rank]
        advance(len(others) * max(until - self._until, 0))  # the bar counts the other ranks' members at the end
        self._until = until
        return everyone

    def apply(self, decisions: Sequence[Decision], round_: int) -> None:
        crossing = [d for d in decisions if d.copies and self.owner(d.donor) != self.owner(d.member)]
        pairs = sorted({(d.donor, self.owner(d.member)) for d in crossing})
        # a member built for the round takes its donor's experience too (LocalExecutor.apply_from)
        experience = {d.donor for d in crossing if d.member not in self.population}
        with self.together():  # read before any exchange: a rank that cannot send must not leave others waiting
            outgoing = {donor: self._files(donor, round_, donor in experience)
                        for donor in {donor for donor, _ in pairs} if self.owner(donor) == self.rank}
        received = self._broadcast(pairs, outgoing) if self.cfg.run.comm == "collective" \
            else self._point_to_point(pairs, outgoing)
        with self.together(), tempfile.TemporaryDirectory(prefix="pbx-recv-") as tmp:
            for data in received.values():
                for name, content in pickle.loads(data).items():
                    (Path(tmp) / name).write_bytes(content)

            def donor_file(donor: int) -> Path:
                path = self.run_dir.checkpoint(donor, round_)
                return path if self.owner(donor) == self.rank else Path(tmp) / path.name

            self.local.apply_from(decisions, donor_file)

    def close(self) -> None:
        self.local.close()

    def _files(self, donor: int, round_: int, experience: bool) -> bytes:
        """What travels of ``donor`` after ``round_``: its checkpoint and, with ``experience`` (a member built for
        the round copies it), the files its experience is kept in beside it, as one message of file names to
        bytes (the names stay: a checkpoint lists its files by name). The files go to every rank the donor
        sends to, built member there or not: only a restart builds members, and most of its copies are into them."""
        path = self.run_dir.checkpoint(donor, round_)
        files = [path, *(self.cfg.member_cls.experience_files(path) if experience else ())]
        return pickle.dumps({f.name: f.read_bytes() for f in files}, protocol=pickle.HIGHEST_PROTOCOL)

    def _point_to_point(self, pairs: list[tuple[int, int]], outgoing: Mapping[int, bytes]) -> dict[int, bytes]:
        """Send this rank's donors' checkpoints (``outgoing``) to each (donor, rank) pair that needs one; return
        what this rank received. Non-blocking sends first, then the receives: no ordering can deadlock."""
        from mpi4py import MPI

        requests, buffers = [], []
        for donor, dest in pairs:
            if self.owner(donor) == self.rank:
                data = np.frombuffer(outgoing[donor], dtype=np.uint8)
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

    def _broadcast(self, pairs: list[tuple[int, int]], outgoing: Mapping[int, bytes]) -> dict[int, bytes]:
        """One broadcast per donor that crosses ranks, from the donor's rank to every rank."""
        received = {}
        for donor in sorted({donor for donor, _ in pairs}):
            root = self.owner(donor)
            data = np.frombuffer(bytearray(outgoing[donor]), dtype=np.uint8) if self.rank == root else None
            size = np.array([data.size if data is not None else 0], dtype=np.int64)
            self.comm.Bcast(size, root=root)
            if data is None:
                data = np.empty(int(size[0]), dtype=np.uint8)
            self.comm.Bcast(data, root=root)
            if any(d == donor and dest == self.rank for d, dest in pairs):
                received[donor] = data.tobytes()
        return received


class MPIRunner(RoundLoop):
    """The round loop with the population spread over the ranks of ``comm`` (``clock``: this rank's, when it
    stops inside a round)."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, comm: Intracomm, contained: bool = False,
                 write_config: bool = False, clock: StopClock | None = None) -> None:
        super().__init__(cfg, run_dir, MPIExecutor(cfg, run_dir, comm, contained, clock), write_config)


def run_on_ranks(comm: Intracomm, contained: bool, path: Path, config: Callable[[], RunConfig],
                 write_config: bool = False, clock: StopClock | None = None) -> History | None:
    """This rank's part of a run under MPI, once rank 0 has sent :data:`~pbx.runners.ranks.Kind.START`.

    ``config``: rank 0's resolved config; on another rank, rank 0's resolved again on
    this rank's machine, where an env or a GPU may be missing, so the rounds begin only
    once every rank has its config. Returns the history on rank 0, None elsewhere.
    ``contained``: a failure is :class:`RunFailed` on every rank (a sweep's run);
    otherwise the failing rank prints one line and ends the job (:func:`abort`).
    ``write_config`` (rank 0's): see :class:`~pbx.runners.loop.RoundLoop`.
    """
    rank = comm.Get_rank()
    runner: MPIRunner | None = None

    def describe(err: BaseException) -> tuple[str, int]:
        if runner is not None:
            executor = runner.executor
            assert isinstance(executor, MPIExecutor)
            return executor.describe(err)
        return failure(err, rank, None, path)

    try:
        with together(comm, contained, describe):
            cfg = config()
        runner = MPIRunner(cfg, RunDir(path), comm, contained, write_config, clock)
        return runner.run()
    except (KeyboardInterrupt, SystemExit, RunFailed, RunStopped):
        raise
    except BaseException as err:  # noqa: B036 - any failure must end the whole job, not hang it
        abort(*describe(err))
