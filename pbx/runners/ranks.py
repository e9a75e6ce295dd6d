"""What MPI ranks say to each other outside a round's exchange: whether there is a world at all, rank 0's
messages between runs, a stop one rank learns of, and the end of the whole job.

:mod:`pbx.runners.mpi` exchanges a round's results and checkpoints; what it and the commands need before,
between and after runs is here, so a plain ``python -m pbx.train`` imports mpi4py only when a launcher started
it (:func:`world`).
"""

from __future__ import annotations

import enum
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from mpi4py.MPI import Intracomm

ABORT_GRACE_S = 0.5
"""How long a rank that ends the job waits after printing its error line, before ``MPI_Abort``."""
LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
"""Set in each process by an MPI launcher (Hydra and ``srun`` with PMI, Open MPI, PMIx, MVAPICH).
mpi4py is imported only when one of them is: a plain ``python -m pbx.train`` never initialises MPI."""


def world() -> Intracomm | None:
    """``MPI.COMM_WORLD`` when this process was started by an MPI launcher, else None."""
    if not any(var in os.environ for var in LAUNCHER_VARS):
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD


class Kind(enum.Enum):
    """What a message from rank 0 says (outside a run's rounds, every broadcast is a :class:`Message`)."""

    START = "start"
    """A run starts: its resolved config, folder, and whether it contains its failures (:func:`run_on_ranks`)."""
    REFUSED = "refused"
    """Rank 0 refused the run (bad input, a folder in use, an interruption) and said why: there is none."""
    RUN = "run"
    """A sweep's next run follows (``pbx.sweep``)."""
    END = "end"
    """The sweep has no more runs."""


@dataclass(frozen=True)
class Message:
    """One broadcast from rank 0: its :class:`Kind` and what goes with it."""

    kind: Kind
    payload: Any = None


def send(comm: Intracomm, kind: Kind, payload: Any = None) -> None:
    """Rank 0: tell every other rank ``kind`` (with ``payload``)."""
    comm.bcast(Message(kind, payload), root=0)


def receive(comm: Intracomm, *kinds: Kind) -> Message:
    """Another rank: rank 0's next message, which must be of one of ``kinds``; anything else means the ranks
    run different commands or pbx versions, and ends the job."""
    message = comm.bcast(None, root=0)
    if not isinstance(message, Message) or message.kind not in kinds:
        abort(f"rank {comm.Get_rank()}: rank 0 sent {message!r} where {' or '.join(k.value for k in kinds)} was "
              f"due: the ranks run different commands or pbx versions", 1)
    return message


STOP_TAG = 32767
"""The tag of a rank's word that the run stops (MPI guarantees tags up to 32767; a checkpoint's are 2 x member
and one more)."""


class RankStops:
    """A stop that one rank learns of (a signal sent to it alone, its time limit), told to the others while they
    train: each rank's clock asks :meth:`poll` at every rollout boundary (an ``Iprobe``, no wait), so every member
    of the run stops at its next boundary, not at its round's end."""

    def __init__(self, comm: Intracomm) -> None:
        self.comm = comm
        self._sent: list[Any] = []

    def tell(self, reason: str) -> None:
        """Tell every other rank that this one stops, and why (non-blocking)."""
        rank = self.comm.Get_rank()
        self._sent += [self.comm.isend(f"rank {rank}'s {reason}", dest=other, tag=STOP_TAG)
                       for other in range(self.comm.Get_size()) if other != rank]

    def poll(self) -> str | None:
        """Another rank's reason to stop, when one has told this rank; None otherwise."""
        from mpi4py import MPI

        if not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=STOP_TAG):
            return None
        return self.comm.recv(source=MPI.ANY_SOURCE, tag=STOP_TAG)

    def drain(self) -> None:
        """Take every word still on its way to this rank and finish this rank's own sends (the run ends: nothing is
        left over for a sweep's next run on the same ranks)."""
        from mpi4py import MPI

        self.comm.Barrier()  # every word is sent by now (sends come before the allgather that precedes this)
        while self.poll() is not None:
            pass
        MPI.Request.Waitall(self._sent)
        self._sent = []


def abort(message: str | None, code: int) -> NoReturn:
    """Print ``error: message`` (when there is one) and end the whole job: ``MPI_Abort`` stops every rank,
    whatever it is waiting for, with no launcher setting needed (the launcher adds one line of its own).

    The launcher tears its stdio forwarding down as the abort reaches it, so a line still in the pipe to it can
    be lost on a busy machine: a short wait after the line lets it go out first (the user's one line of why)."""
    from mpi4py import MPI

    sys.stdout.flush()
    if message is not None:
        print(f"error: {message}", file=sys.stderr, flush=True)
        time.sleep(ABORT_GRACE_S)
    MPI.COMM_WORLD.Abort(code)
