"""MPI transport: mpi4py's buffer (upper-case) calls on numpy arrays.

Never pickle: ``Isend``/``Irecv`` take the arrays' memory directly. The
communicator is duplicated so our messages cannot match anyone else's.
Receives are posted with ``MPI.ANY_TAG`` and the arriving message's tag and
size are checked against what the receiver expects, so a rank that called a
different collective (the tag is the call's fingerprint) raises
:class:`~warmup_kit.errors.ProtocolError` instead of reducing the wrong
bytes. With no deadline a wait is a plain ``Waitall``; with one, we poll
``Testsome`` (yielding the CPU between polls, then backing off), so a silent
peer becomes a :class:`~warmup_kit.CollectiveTimeout` naming it instead of a
hang.

After a timeout the job cannot continue (a send may still be in flight to a
rank that will never receive it, and ``MPI_Finalize`` would wait for it), so
the communicator remembers it and, at interpreter exit, aborts the job
(``MPI_Abort``) instead of finalizing: every rank ends, none hangs.
"""
from __future__ import annotations

import atexit
import os
import time
from typing import Sequence

import numpy as np

from warmup_kit.comm.base import Comm, Request, split_order
from warmup_kit.comm.deadlines import deadline_after
from warmup_kit.errors import CollectiveTimeout, PeerLost, ProtocolError

#: seconds without any completion a deadline wait spins (polling, yielding)
#: before it backs off to sleeps
SPIN_S = 0.2
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))
_BROKEN: list[str] = []         # why this process must abort at exit


def _mpi():
    from mpi4py import MPI  # lazy: the model and the book work without MPI
    return MPI


#: seconds a rank about to abort the job leaves hydra to forward what it
#: printed: MPI_Abort has mpiexec kill every proxy at once, and on a loaded
#: machine a rank's last lines (its result, the line below) were lost
ABORT_GRACE_S = 0.5


def _abort_if_broken() -> None:
    if not _BROKEN:
        return
    MPI = _mpi()
    if MPI.Is_initialized() and not MPI.Is_finalized():
        import sys
        sys.stdout.flush()
        print(f"warmup_kit: aborting the MPI job after {_BROKEN[0]}",
              file=sys.stderr, flush=True)
        time.sleep(ABORT_GRACE_S)
        MPI.COMM_WORLD.Abort(1)


class MPIRequest(Request):
    """An ``MPI.Request`` with the peer it talks to and, for a receive, the
    tag and size it must carry."""

    __slots__ = ("comm", "req", "peer", "recv", "tag", "nbytes", "status")

    def __init__(self, comm: "MPIComm", req, peer: int, recv: bool,
                 tag: int, nbytes: int, status=None) -> None:
        self.comm, self.req, self.peer, self.recv = comm, req, peer, recv
        self.tag, self.nbytes, self.status = tag, nbytes, status

    def test(self) -> bool:
        done = self.req.Test(self.status) if self.recv else self.req.Test()
        if done and self.recv:
            self.comm.check_arrival(self)
        return done

    def wait(self, timeout: float | None = None) -> None:
        self.comm.waitall([self], deadline_after(timeout))


class MPIComm(Comm):
    """A rank of an MPI communicator (default ``MPI.COMM_WORLD``)."""

    def __init__(self, comm=None, *, _dup: bool = True) -> None:
        super().__init__()
        MPI = _mpi()
        self._MPI = MPI
        base = comm if comm is not None else MPI.COMM_WORLD
        self.comm = base.Dup() if _dup else base
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._byte, self._any = MPI.BYTE, MPI.ANY_TAG
        self._isend, self._irecv = self.comm.Isend, self.comm.Irecv
        self._Status = MPI.Status
        self._send, self._recv = self.comm.Send, self.comm.Recv
        self._sendrecv = self.comm.Sendrecv
        self._recv_status = MPI.Status()
        self._tables: dict = {}     # share_call's result arrays, per size

    # ------------------------------------------------------ point-to-point
    def isend(self, buf, dest: int, tag: int = 0) -> MPIRequest:
        self.check_message(buf, dest, tag)
        n = buf.nbytes
        self.stats.sent(dest, n)
        return MPIRequest(self, self._isend([buf, n, self._byte], dest, tag),
                          dest, False, tag, n)

    def irecv(self, buf, source: int, tag: int = 0) -> MPIRequest:
        self.check_message(buf, source, tag)
        n = buf.nbytes
        self.stats.received(source, n)
        st = self._Status()
        return MPIRequest(self, self._irecv([buf, n, self._byte], source,
                                            self._any), source, True, tag,
                          n, st)

    def check_arrival(self, r: MPIRequest) -> None:
        """A completed receive carried the tag and size it should."""
        st = r.status
        got_tag, got = st.Get_tag(), st.Get_count(self._byte)
        if got_tag != r.tag or got != r.nbytes:
            raise ProtocolError(
                f"rank {self.rank}: rank {r.peer} sent a message with tag "
                f"{got_tag} and {got} bytes where tag {r.tag} and {r.nbytes}"
                " bytes were expected (the ranks called different "
                "collectives, or with different lengths, dtypes or ops)")

    def _check_blocking(self, st, source: int, tag: int, n: int) -> None:
        """:meth:`check_arrival` for a blocking receive that filled ``st``
        (the request it reports is built only when the arrival is wrong)."""
        if st.Get_tag() != tag or st.Get_count(self._byte) != n:
            self.check_arrival(MPIRequest(self, None, source, True, tag, n,
                                          st))

    def sendrecv(self, sendbuf, dest: int, recvbuf, source: int,
                 tag: int = 0, *, deadline: float | None = None) -> None:
        """One exchange; with no deadline a single blocking ``Sendrecv``."""
        if deadline is not None:
            return super().sendrecv(sendbuf, dest, recvbuf, source, tag,
                                    deadline=deadline)
        self.check_message(sendbuf, dest, tag)
        self.check_message(recvbuf, source, tag)
        ns, nr = sendbuf.nbytes, recvbuf.nbytes
        self.stats.sent(dest, ns)
        self.stats.received(source, nr)
        st = self._recv_status     # the executor's: one call at a time
        try:
            self._sendrecv([sendbuf, ns, self._byte], dest, tag,
                           [recvbuf, nr, self._byte], source, self._any, st)
        except self._MPI.Exception as exc:
            self._failed([MPIRequest(self, None, source, True, tag, nr, st)],
                         exc, [st])
        self._check_blocking(st, source, tag, nr)

    def send_wait(self, sendbuf, dest: int, tag: int = 0, *,
                  deadline: float | None = None) -> None:
        """One send; with no deadline a single blocking ``Send``."""
        if deadline is not None:
            return super().send_wait(sendbuf, dest, tag, deadline=deadline)
        self.check_message(sendbuf, dest, tag)
        n = sendbuf.nbytes
        self.stats.sent(dest, n)
        try:
            self._send([sendbuf, n, self._byte], dest, tag)
        except self._MPI.Exception as exc:
            self._failed([MPIRequest(self, None, dest, False, tag, n)], exc)

    def recv_wait(self, recvbuf, source: int, tag: int = 0, *,
                  deadline: float | None = None) -> None:
        """One receive; with no deadline a single blocking ``Recv``."""
        if deadline is not None:
            return super().recv_wait(recvbuf, source, tag,
                                     deadline=deadline)
        self.check_message(recvbuf, source, tag)
        n = recvbuf.nbytes
        self.stats.received(source, n)
        st = self._recv_status     # the executor's: one call at a time
        try:
            self._recv([recvbuf, n, self._byte], source, self._any, st)
        except self._MPI.Exception as exc:
            self._failed([MPIRequest(self, None, source, True, tag, n, st)],
                         exc, [st])
        self._check_blocking(st, source, tag, n)

    def share_call(self, words: np.ndarray, deadline):
        """Every rank's call descriptor in one MPI ``Allgather`` (MPICH's,
        in C: a few microseconds on one node, where the dissemination of
        :mod:`warmup_kit.callcheck` took log2 N Python-level exchanges).
        Counted as control bytes; with a deadline it is an ``Iallgather``
        waited for like any request."""
        if not words.flags.c_contiguous:
            words = np.ascontiguousarray(words)
        n = words.nbytes
        ctl = n * (self.size - 1)
        stats = self.stats
        stats.control_bytes_sent += ctl
        stats.control_bytes_received += ctl
        if deadline is None:
            # a blocking call fills the table before it returns, and the
            # caller reads it before the next call on this communicator:
            # one table (and its buffer spec) per size is enough
            got = self._tables.get((n, words.dtype))
            if got is None:
                table = np.empty((self.size, words.size), words.dtype)
                got = self._tables[(n, words.dtype)] = (
                    table, [table, n, self._byte])
            table, spec = got
            self.comm.Allgather([words, n, self._byte], spec)
            return table
        table = np.empty((self.size, words.size), words.dtype)
        req = self.comm.Iallgather([words, n, self._byte],
                                   [table, n, self._byte])
        # a timeout names the next rank: a collective does not say whom
        # it still waits for
        self.waitall([MPIRequest(self, req, (self.rank + 1) % self.size,
                                 False, 0, n)], deadline)
        return table

    def waitall(self, reqs: Sequence[MPIRequest],
                deadline: float | None = None) -> None:
        """Complete ``reqs``; past ``deadline``, raise naming a silent peer.

        With a deadline we poll: MPI calls interleaved with ``sched_yield``
        (as MPICH's own waits do with MPIR_CVAR_POLLS_BEFORE_YIELD), so the
        transfer keeps progressing; after :data:`SPIN_S` without any
        completion the poll backs off to short sleeps, so a hung peer does
        not burn a core until the deadline.
        """
        if not reqs:
            return
        MPI = self._MPI
        raw = [r.req for r in reqs]
        if deadline is None:
            statuses = [r.status or self._Status() for r in reqs]
            try:
                MPI.Request.Waitall(raw, statuses)
            except MPI.Exception as exc:
                self._failed(reqs, exc, statuses)
            for r in reqs:
                if r.recv:
                    self.check_arrival(r)
            return
        now = time.monotonic
        t_last, pause = now(), 0.0
        scratch = [self._Status() for _ in reqs]
        while True:
            try:
                done = MPI.Request.Testsome(raw, scratch)
            except MPI.Exception as exc:
                self._failed(reqs, exc, scratch)
            if done is None:          # no active request left
                break
            t = now()
            if done:                  # statuses come in completion order
                for j, i in enumerate(done):
                    if reqs[i].recv:
                        reqs[i].status = self._Status(scratch[j])
                t_last, pause = t, 0.0
                continue
            if t > deadline:
                self._timeout(reqs, raw)
            if t - t_last < SPIN_S:
                _yield()
            else:
                time.sleep(pause)
                pause = min(1e-3, pause * 2 + 1e-5)
        for r in reqs:
            if r.recv:
                self.check_arrival(r)

    def _failed(self, reqs, exc, statuses=()) -> None:
        """An MPI error in a wait (e.g. a message longer than the buffer).

        A wait over several requests (and MPICH's even over one) reports
        ``ERR_IN_STATUS``; the real error of each failed request is in its
        status, so that is where a truncation is found and the peer named
        (a ``Testsome`` status is not aligned with ``reqs``: its source
        names the sender)."""
        MPI = self._MPI
        cls = exc.Get_error_class()
        bad = []                     # (error class, peer) per failed status
        if cls == MPI.ERR_IN_STATUS:
            for i, st in enumerate(statuses):
                code = st.Get_error()
                if code in (MPI.SUCCESS, MPI.ERR_PENDING):
                    continue
                src = st.Get_source()
                peer = src if src >= 0 else (
                    reqs[i].peer if len(statuses) == len(reqs) else None)
                bad.append((MPI.Get_error_class(code), peer,
                            MPI.Get_error_string(code)))
        trunc = [b for b in bad if b[0] == MPI.ERR_TRUNCATE]
        if cls == MPI.ERR_TRUNCATE or trunc:
            peers = sorted({p for _, p, _ in trunc if p is not None}) or \
                sorted({r.peer for r in reqs if r.recv})
            raise ProtocolError(f"rank {self.rank}: a message from rank(s) "
                                f"{peers} was longer than expected (the "
                                "ranks called different collectives, or "
                                "with different lengths)") from None
        if bad:
            _, peer, text = bad[0]
            peer = reqs[0].peer if peer is None else peer
            raise PeerLost(f"rank {self.rank}: MPI error with rank {peer} "
                           f"({text})", peer=peer, rank=self.rank) from None
        raise PeerLost(f"rank {self.rank}: MPI error ({exc})",
                       peer=reqs[0].peer, rank=self.rank) from None

    def _timeout(self, reqs, raw) -> None:
        pending = [r for r, q in zip(reqs, raw) if q]
        # name the first peer we still wait to hear from
        first = min(pending, key=lambda r: (not r.recv, r.peer))
        for r in pending:
            if r.recv:
                try:
                    r.req.Cancel()
                except Exception:  # noqa: BLE001 - best effort
                    pass
        why = (f"rank {self.rank}: timed out waiting for rank {first.peer} "
               f"({'receive' if first.recv else 'send'} pending)")
        if not _BROKEN:
            atexit.register(_abort_if_broken)
        _BROKEN.append(why)
        raise CollectiveTimeout(why, peer=first.peer, rank=self.rank)

    # ----------------------------------------------------------- the group
    def barrier(self, *, timeout: float | None = None) -> None:
        if timeout is None:
            self.comm.Barrier()
        else:
            super().barrier(timeout=timeout)

    def split(self, color: int, key: int = 0) -> "MPIComm | None":
        MPI = self._MPI
        entries = self.comm.allgather((int(color), int(key), self.rank))
        if split_order(entries, self.rank) is None:
            self.comm.Split(MPI.UNDEFINED, key)
            return None
        return MPIComm(self.comm.Split(int(color), int(key)), _dup=False)

    def close(self) -> None:
        self.stop_stream()
        if self.comm is not None and not self._MPI.Is_finalized():
            self.comm.Free()
        self.comm = None


__all__ = ["MPIComm", "MPIRequest"]
