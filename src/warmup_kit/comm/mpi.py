"""MPI transport: mpi4py's buffer (upper-case) calls on numpy arrays.

Never pickle: ``Isend``/``Irecv`` take the arrays' memory directly. The
communicator is duplicated so our messages cannot match anyone else's. With
no deadline the wait is a plain ``Waitall``; with one, we poll ``Testsome``
and back off, so a silent peer becomes a :class:`CollectiveTimeout` naming
it instead of a hang. (Under ``python -m mpi4py``, an uncaught exception then
aborts the whole job.)
"""
from __future__ import annotations

import time

from ..errors import CollectiveTimeout
from .base import Comm

TAG = 7


def _mpi():
    from mpi4py import MPI  # lazy: the model and the book work without MPI
    return MPI


class MPIComm(Comm):
    """A rank of an MPI communicator (default ``MPI.COMM_WORLD``)."""

    def __init__(self, comm=None) -> None:
        super().__init__()
        MPI = _mpi()
        self._mpi = MPI
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def _exchange(self, sends, recvs, deadline) -> None:
        MPI = self._mpi
        reqs, peers = [], []
        for peer, arr in recvs:
            reqs.append(self.comm.Irecv([arr, MPI.BYTE], source=peer, tag=TAG))
            peers.append(("from", peer))
        for peer, arr in sends:
            reqs.append(self.comm.Isend([arr, MPI.BYTE], dest=peer, tag=TAG))
            peers.append(("to", peer))
        if deadline is None:
            MPI.Request.Waitall(reqs)
            return
        pending = set(range(len(reqs)))
        pause = 0.0
        while pending:
            done = MPI.Request.Testsome(reqs)
            if done:
                pending.difference_update(done)
                pause = 0.0
                continue
            if time.monotonic() > deadline:
                # name the first peer we still wait to hear from
                way, peer = min((peers[i] for i in pending),
                                key=lambda wp: (wp[0] != "from", wp[1]))
                for i in pending:
                    if peers[i][0] == "from":
                        try:
                            reqs[i].Cancel()
                        except Exception:  # noqa: BLE001 - best effort
                            pass
                raise CollectiveTimeout(
                    f"rank {self.rank}: timed out waiting for rank {peer} "
                    f"({'receive' if way == 'from' else 'send'} pending)",
                    peer=peer, rank=self.rank)
            time.sleep(pause)
            pause = min(1e-3, pause * 2 + 1e-5)

    def close(self) -> None:
        if self.comm is not None and not self._mpi.Is_finalized():
            self.comm.Free()
        self.comm = None
