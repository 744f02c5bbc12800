"""MPI transport: mpi4py's buffer (upper-case) calls on numpy arrays.

Never pickle: ``Isend``/``Irecv`` take the arrays' memory directly. The
communicator is duplicated so our messages cannot match anyone else's. With
no deadline the wait is a plain ``Waitall``; with one, we poll ``Testsome``
(yielding the CPU between polls, then backing off), so a silent peer
becomes a :class:`CollectiveTimeout` naming it instead of a hang. (Under ``python -m mpi4py``, an uncaught exception then
aborts the whole job.)
"""
from __future__ import annotations

import os
import time

from warmup_kit.errors import CollectiveTimeout
from warmup_kit.comm.base import Comm

TAG = 7
#: seconds without any completion a deadline wait spins (polling, yielding)
#: before it backs off to sleeps
SPIN_S = 0.2
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


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
        self._byte = MPI.BYTE
        self._isend, self._irecv = self.comm.Isend, self.comm.Irecv
        self._sendrecv = self.comm.Sendrecv

    # -- the executor's fast path: plain non-blocking calls, no per-call
    # -- validation or counting (the executor counts per transfer itself)
    def isend(self, arr, peer: int):
        """Start sending the contiguous array ``arr`` to ``peer``."""
        return self._isend([arr, self._byte], peer, TAG)

    def irecv(self, arr, peer: int):
        """Start receiving into the contiguous array ``arr`` from ``peer``."""
        return self._irecv([arr, self._byte], peer, TAG)

    def sendrecv(self, sendarr, dest: int, recvarr, source: int) -> None:
        """One blocking exchange (no deadline): send to dest, recv from source."""
        self._sendrecv([sendarr, self._byte], dest, TAG,
                       [recvarr, self._byte], source, TAG)

    def _exchange(self, sends, recvs, deadline) -> None:
        reqs, peers = [], []
        for peer, arr in recvs:
            reqs.append(self.irecv(arr, peer))
            peers.append(("from", peer))
        for peer, arr in sends:
            reqs.append(self.isend(arr, peer))
            peers.append(("to", peer))
        self.wait(reqs, peers, deadline)

    def wait(self, reqs: list, peers: list, deadline: float | None) -> None:
        """Complete ``reqs``; past ``deadline``, raise naming a silent peer.

        ``peers[i]`` is ``("from", rank)`` or ``("to", rank)`` for
        ``reqs[i]``. With a deadline we poll: MPI calls interleaved with
        ``sched_yield`` (as MPICH's own waits do with
        MPIR_CVAR_POLLS_BEFORE_YIELD), so the transfer keeps progressing;
        after :data:`SPIN_S` without any completion the poll backs off to short
        sleeps, so a hung peer does not burn a core until the deadline.
        """
        MPI = self._mpi
        if deadline is None:
            MPI.Request.Waitall(reqs)
            return
        testsome = MPI.Request.Testsome
        now = time.monotonic
        t_last, pause = now(), 0.0
        while True:
            done = testsome(reqs)
            if done is None:          # no active request left
                return
            t = now()
            if done:
                t_last, pause = t, 0.0
                continue
            if t > deadline:
                self._timeout(reqs, peers)
            if t - t_last < SPIN_S:
                _yield()
            else:
                time.sleep(pause)
                pause = min(1e-3, pause * 2 + 1e-5)

    def _timeout(self, reqs, peers) -> None:
        pending = [i for i, r in enumerate(reqs) if r]
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

    def close(self) -> None:
        if self.comm is not None and not self._mpi.Is_finalized():
            self.comm.Free()
        self.comm = None
