"""Ranks on one host over shared memory (``multiprocessing.shared_memory``).

:func:`launch_shm` is :func:`~warmup_kit.comm.launch` with a different
transport: before forking the N ranks the parent creates one *data segment*
per rank (``shm_bytes`` each, allocated lazily by the kernel, page by page)
and one *control segment*; every rank inherits the mappings of all of them.
The parent unlinks every name as soon as the ranks have started, so nothing
is left in ``/dev/shm`` whatever happens to the ranks later (the memory goes
when the last mapping closes), and once more in ``finally``.

The control segment holds one cache line of int64 counters per rank
(``DONE`` and ``READ``: rounds finished / rounds whose reads are finished,
numbered across calls; the offsets of this call's buffers in the rank's data
segment; its pid; whom it is waiting for; a clean-exit flag) and a mailbox of
:data:`SLOT` bytes per ordered pair for :meth:`ShmComm.exchange` (the
header check of the collectives, and the generic executor).

:mod:`warmup_kit.execute.shm` runs schedules zero-copy: buffers allocated
with :meth:`ShmComm.empty` live in the rank's data segment, and a receiver
reduces or copies straight out of the sender's segment. Stores become
visible in program order (x86-64 TSO), so a counter written after the data
publishes the data. Waits spin with ``sched_yield`` then sleep (ranks may
share cores), check the deadline (:class:`~warmup_kit.CollectiveTimeout`,
naming the rank at the end of the chain of waiting ranks) and, every
:data:`LIVENESS_S`, that no rank died (:class:`~warmup_kit.PeerLost`).
"""
from __future__ import annotations

import os
import time
import traceback
from multiprocessing import shared_memory

import numpy as np

from warmup_kit.errors import CollectiveTimeout, PeerLost, ProtocolError
from warmup_kit.comm.base import Comm
from warmup_kit.comm.launch import _collect, _context, _raise_outcome, _reap

DONE, READ, PID, WAIT, BUF_OFF, SRC_OFF, EXITED = range(7)
ROW = 8                       # int64 per rank: one 64-byte line
SLOT = 64 << 10               # mailbox bytes per ordered pair
ALIGN = 64
LIVENESS_S = 0.02
SPINS = 50


def _dead(pid: int) -> bool:
    """True if ``pid`` has exited (a zombie counts as dead)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in (b"Z", b"X")


class ShmComm(Comm):
    """One rank's view of the shared segments (made by :func:`launch_shm`)."""

    def __init__(self, rank: int, size: int, ctrl, data) -> None:
        super().__init__()
        self.rank, self.size = rank, size
        self._shm = (ctrl, data)
        nrows = size * ROW
        self.ctrl = np.ndarray((size, ROW), np.int64, ctrl.buf)
        self._box = np.ndarray((size, size, ROW), np.int64, ctrl.buf,
                               offset=nrows * 8)
        self._slots = np.ndarray((size, size, SLOT), np.uint8, ctrl.buf,
                                 offset=nrows * 8 * (1 + size))
        self.segs = [np.ndarray((d.size,), np.uint8, d.buf) for d in data]
        self.seg = self.segs[rank]
        self._top = 0                  # bump allocator in the own segment
        self._scratch = None
        self._base = 1                 # round numbers used so far
        self.ctrl[rank, PID] = os.getpid()

    @staticmethod
    def ctrl_bytes(size: int) -> int:
        return size * ROW * 8 * (1 + size) + size * size * SLOT

    # ------------------------------------------------------------ memory
    def empty(self, n: int, dtype=np.float64) -> np.ndarray:
        """A 1-d array in this rank's segment (peers can read it)."""
        dt = np.dtype(dtype)
        nbytes = int(n) * dt.itemsize
        start = -(-self._top // ALIGN) * ALIGN
        if start + nbytes > self.seg.size:
            raise MemoryError(f"rank {self.rank}: shared segment of "
                              f"{self.seg.size} bytes is full (launch_shm("
                              "shm_bytes=...) sets its size)")
        self._top = start + nbytes
        return self.seg[start:start + nbytes].view(dt)

    def offset(self, a: np.ndarray) -> int:
        """Byte offset of ``a`` in this rank's segment, or -1."""
        lo = self.seg.__array_interface__["data"][0]
        p = a.__array_interface__["data"][0]
        if a.flags.c_contiguous and lo <= p and p + a.nbytes <= lo + \
                self.seg.size:
            return p - lo
        return -1

    def scratch(self, nbytes: int) -> np.ndarray:
        if self._scratch is None or self._scratch.size < nbytes:
            self._scratch = self.empty(max(nbytes, 1), np.uint8)
        return self._scratch[:nbytes]

    def peer_array(self, peer: int, offset: int, n: int, dtype) -> np.ndarray:
        dt = np.dtype(dtype)
        return self.segs[peer][offset:offset + n * dt.itemsize].view(dt)

    # ----------------------------------------------------------- waiting
    def wait_ge(self, field: int, peer: int, value: int, deadline, where=""):
        """Wait until ``ctrl[peer, field] >= value``."""
        ctrl = self.ctrl
        if ctrl[peer, field] >= value:
            return
        ctrl[self.rank, WAIT] = peer + 1
        self._spin(lambda: ctrl[peer, field] >= value, peer, deadline, where)
        ctrl[self.rank, WAIT] = 0      # left set on an error: a chain

    def _spin(self, ready, peer: int, deadline, where: str) -> None:
        n, delay = 0, 2e-5
        check = time.monotonic() + LIVENESS_S
        while not ready():
            n += 1
            if n < SPINS:
                os.sched_yield()
                continue
            time.sleep(delay)
            delay = min(delay * 2, 2e-4)
            now = time.monotonic()
            if now >= check:
                self._check_alive(peer, where)
                check = now + LIVENESS_S
            if deadline is not None and now > deadline and not ready():
                self._timeout(peer, where)

    def _check_alive(self, peer: int, where: str) -> None:
        for p in range(self.size):
            if p == self.rank:
                continue
            if _dead(int(self.ctrl[p, PID])) and (
                    p == peer or not self.ctrl[p, EXITED]):
                raise PeerLost(f"rank {self.rank}: rank {p} is gone (its "
                               f"process ended){where}", peer=p,
                               rank=self.rank)

    def _timeout(self, peer: int, where: str):
        chain, x = [peer], peer
        while len(chain) <= self.size:
            nxt = int(self.ctrl[x, WAIT]) - 1
            if nxt < 0 or nxt in chain or nxt == self.rank:
                break
            chain.append(nxt)
            x = nxt
        via = (" (which waits for " + " -> ".join(f"rank {c}" for c in
               chain[1:]) + ")") if len(chain) > 1 else ""
        self.ctrl[self.rank, WAIT] = chain[-1] + 1   # others follow it
        raise CollectiveTimeout(f"rank {self.rank}: timed out waiting for "
                                f"rank {peer}{via}{where}", peer=chain[-1],
                                rank=self.rank)

    # ---------------------------------------------- mailbox point-to-point
    def _exchange(self, sends, recvs, deadline) -> None:
        """Messages through the per-pair mailboxes, all progressed at once."""
        box, slots, me = self._box, self._slots, self.rank
        sq = [[p, a.reshape(-1).view(np.uint8), 0] for p, a in sends]
        rq = [[p, a.reshape(-1).view(np.uint8), 0] for p, a in recvs]
        if any(not a.flags.c_contiguous for _, a in list(sends) + list(recvs)):
            raise ValueError("exchange needs contiguous arrays")

        def step() -> bool:
            moved, busy = False, set()
            for m in sq:
                p, a, off = m
                if p in busy or (off >= a.size and off > 0):
                    continue
                busy.add(p)
                h = box[me, p]
                if h[0] != h[1]:
                    continue           # slot still full
                n = min(SLOT, a.size - off)
                slots[me, p, :n] = a[off:off + n]
                h[2], h[3] = n, a.size
                h[0] += 1
                m[2] = off + n if a.size else 1
                moved = True
            busy.clear()
            for m in rq:
                p, a, off = m
                if p in busy or (off >= a.size and off > 0):
                    continue
                busy.add(p)
                h = box[p, me]
                if h[0] == h[1]:
                    continue
                n = int(h[2])
                if h[3] != a.size:
                    raise ProtocolError(f"rank {me}: rank {p} sent {h[3]} "
                                        f"bytes, {a.size} expected")
                a[off:off + n] = slots[p, me, :n]
                h[1] += 1
                m[2] = off + n if a.size else 1
                moved = True
            return moved

        def done() -> bool:
            return all(m[2] >= max(m[1].size, 1) for m in sq + rq)

        while not done():
            if step():
                continue
            pending = [m[0] for m in sq + rq if m[2] < max(m[1].size, 1)]
            peer = pending[0]
            self.ctrl[me, WAIT] = peer + 1
            self._spin(lambda: step() or done(), peer, deadline, "")
            self.ctrl[me, WAIT] = 0
        # a sender returns once its last piece is in the slot: the array
        # may be reused at once, the mailbox holds a copy

    def close(self) -> None:
        self.ctrl[self.rank, EXITED] = 1


def _rank_main(rank, size, ctrl, data, conn, fn, args) -> None:
    comm = None
    try:
        comm = ShmComm(rank, size, ctrl, data)
        conn.send(("ok", fn(comm, *args)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        tb = traceback.format_exc()
        try:
            import pickle
            pickle.loads(pickle.dumps(exc))
            conn.send(("error", exc, tb))
        except Exception:  # noqa: BLE001
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}"),
                       tb))
    finally:
        if comm is not None:
            comm.close()
        conn.close()


def launch_shm(fn, world: int = 4, *, args=(), timeout: float = 60.0,
               shm_bytes: int = 64 << 20, return_exceptions: bool = False,
               grace: float = 3.0) -> list:
    """Run ``fn(comm, *args)`` on ``world`` forked ranks with a
    :class:`ShmComm`; results in rank order (as :func:`launch`)."""
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be an int >= 1, got {world!r}")
    ctx = _context("fork")
    segs, pipes, procs = [], [], []
    try:
        segs.append(shared_memory.SharedMemory(
            create=True, size=ShmComm.ctrl_bytes(world)))
        for _ in range(world):
            segs.append(shared_memory.SharedMemory(create=True,
                                                   size=max(shm_bytes, ALIGN)))
        for r in range(world):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_rank_main, name=f"warmup-shm-rank-{r}",
                            args=(r, world, segs[0], segs[1:], child, fn,
                                  tuple(args)), daemon=True)
            p.start()
            child.close()
            pipes.append(parent)
            procs.append(p)
        _unlink(segs)                  # mapped everywhere: names not needed
        outcomes = _collect(pipes, procs, time.monotonic() + timeout, grace)
        return _raise_outcome(outcomes, world, return_exceptions)
    finally:
        _reap(procs, pipes)
        _unlink(segs)
        for s in segs:
            s.close()


def _unlink(segs) -> None:
    for s in segs:
        try:
            s.unlink()
        except FileNotFoundError:
            pass
