"""Ranks on one host over shared memory (``multiprocessing.shared_memory``).

The launcher (``launch(fn, world, transport="shm")``) creates, before it
forks the ranks, one *data segment* per rank (allocated lazily by the
kernel, page by page) and one *control segment*; every rank inherits the
mappings of all of them, and the names are unlinked as soon as the ranks
have started, so nothing is left in ``/dev/shm`` whatever happens later.

The control segment holds, per rank, a row of int64 fields (:data:`ROW`):
rounds finished and rounds read (``DONE``/``READ``, numbered across calls),
where this call's buffers are in the rank's data segment, the call's
fingerprint, the rank's pid, whom it waits for and a heartbeat; then per
ordered pair a mailbox for ``isend``/``irecv``, a FIFO of :data:`STEPS`
slots of :data:`SLOT` bytes (as NCCL's buffers hold ``NCCL_STEPS`` steps),
and the bytes one rank has read out of another's segment; last, per rank,
two slots for the descriptor of the call it is agreeing on
(:meth:`ShmComm.share_call`, counted in the row's ``CALL``).

The FIFO lets a sender copy several pieces ahead of its receiver. With one
slot, each 64 KiB piece waited for the receiver to be scheduled and copy it
out; with ranks sharing cores, and a rank also busy on a socket (a flat
ring over :class:`~warmup_kit.comm.HybridComm`), those waits made a 4-rank
ring 1.4x slower than the same ring with TCP inside the node
(``benchmarks/cluster.py``; book, Chapter 6).

:mod:`warmup_kit.execute.shm` runs schedules zero-copy: buffers from
:meth:`ShmComm.empty` live in the rank's data segment, and a receiver
reduces or copies straight out of the sender's segment. Stores become
visible in program order (x86-64 TSO), so a counter written after the data
publishes the data. Waits spin with ``sched_yield`` then sleep (ranks may
share cores), check the deadline and, every :data:`LIVENESS_S`, beat the
heartbeat and check that no rank died (:class:`~warmup_kit.PeerLost`). A
timed-out rank follows the published waits to the rank at the end of the
chain; a rank whose heartbeat stopped (a stopped or frozen process) ends it.
"""
from __future__ import annotations

import mmap
import os
import secrets
import time
from collections import deque
from multiprocessing import shared_memory
from typing import Protocol, Sequence

import numpy as np

from warmup_kit import proc as proc_state
from warmup_kit.comm.base import Comm, Request, TAG_MAX, split_members
from warmup_kit.comm.deadlines import deadline_after
from warmup_kit.comm.blame import culprit, describe
from warmup_kit.errors import CollectiveTimeout, PeerLost, ProtocolError

DONE, READ, PID, WAIT, BUF_OFF, SRC_OFF, EXITED, FP, BEAT, BLAME, CALL = \
    range(11)
ROW = 16                      # int64 per rank: two 64-byte lines
#: the control fields the zero-copy executor reads and waits on
ZERO_COPY_FIELDS = (DONE, READ, BUF_OFF, SRC_OFF)
BOX = 8                       # int64 per mailbox header
SLOT = 64 << 10               # bytes per mailbox slot
STEPS = 8                     # slots in each ordered pair's mailbox FIFO
DESC = 16                     # int64 per published call descriptor
META = 4                      # int64 per slot: piece bytes, size, tag, offset
ALIGN = 64
LIVENESS_S = 0.02
STALE_NS = 500_000_000        # a heartbeat older than this: not running
SPINS = 50
_NAME_BYTES = 64
_SPLIT_TAG = TAG_MAX - 1
#: the environment variable whose value (letters and digits, at most 16)
#: goes into the name of every segment this process and its children
#: create, ``wk_<tag>_<random>``, so that jobs running side by side (the
#: test suite's workers) can tell their own segments from another's
TAG_ENV = "WARMUP_KIT_SHM_TAG"


def _dead(pid: int) -> bool:
    """True if ``pid`` has exited (a zombie counts as dead)."""
    return pid > 0 and not proc_state.alive(pid)


def _advance(q: deque, r: "ShmRequest", n: int) -> bool:
    """``n`` more bytes of ``r`` (the head of ``q``) moved; True, and ``r``
    finished and off the queue, once all of it has."""
    r.off += n
    if r.off < r.data.size:
        return False
    q.popleft()
    r.finished = True
    return True


def ctrl_bytes(size: int) -> int:
    """Bytes of the control segment of a group of ``size`` ranks."""
    return 8 * (size * ROW + size * size * (BOX + 2 + STEPS * META)
                + size * 2 * DESC) + size * size * STEPS * SLOT


class Arena:
    """A bump allocator over one rank's data segment (shared by every
    communicator of that rank: they all see the same segment)."""

    def __init__(self, seg: np.ndarray) -> None:
        self.seg, self.top = seg, 0

    def alloc(self, nbytes: int) -> np.ndarray:
        start = -(-self.top // ALIGN) * ALIGN
        if start + nbytes > self.seg.size:
            raise MemoryError(f"shared segment of {self.seg.size} bytes is "
                              "full (launch(..., shm_bytes=...) sets its "
                              "size)")
        self.top = start + nbytes
        return self.seg[start:start + nbytes]


class ShmRequest(Request):
    """A message through a mailbox FIFO, copied in pieces of :data:`SLOT`."""

    __slots__ = ("comm", "peer", "data", "tag", "off", "recv", "finished")

    def __init__(self, comm, peer, data, tag, recv) -> None:
        self.comm, self.peer, self.data, self.tag = comm, peer, data, tag
        self.off, self.recv, self.finished = 0, recv, False

    def test(self) -> bool:
        if not self.finished:
            self.comm.progress()
        return self.finished

    def wait(self, timeout: float | None = None) -> None:
        self.comm.waitall([self], deadline_after(timeout))


class ZeroCopyComm(Protocol):
    """What the zero-copy executor (:mod:`warmup_kit.execute.shm`) may use
    of a shared-memory rank, and nothing else (``tests/test_layers.py``
    holds it to these names): the control rows, whose fields it reads and
    waits on are :data:`ZERO_COPY_FIELDS`, and the calls that map a peer's
    buffer, stage an array, publish a call and wait.
    :class:`ShmComm` is the implementation."""

    rank: int
    #: (size, ROW) int64: one control row per rank
    ctrl: np.ndarray
    #: per-communicator cache (the executor keeps its compiled plans here)
    cache: dict

    def offset(self, a: np.ndarray) -> int:
        """Offset of ``a`` in this rank's data segment (-1: not in it)."""

    def scratch(self, key, nbytes: int) -> np.ndarray:
        """A staging area of ``nbytes`` in the data segment, kept per key."""

    def peer_array(self, peer: int, offset: int, n: int, dtype
                   ) -> np.ndarray:
        """A view of ``n`` items at ``offset`` of ``peer``'s segment."""

    def begin(self, rounds: int, fp: int, boff: int, soff: int) -> int:
        """Publish a call of ``rounds`` rounds (its fingerprint and buffer
        offsets); the round counter it starts from."""

    def check_fingerprint(self, peer: int, fp: int) -> None:
        """Raise if ``peer`` is in another call than ``fp``."""

    def took(self, peer: int, nbytes: int) -> None:
        """Count ``nbytes`` read out of ``peer``'s segment."""

    def settle(self) -> None:
        """End of a call: wait until no peer still reads this rank's data."""

    def wait_ge(self, field: int, peer: int, value: int, deadline,
                where: str = "") -> None:
        """Wait until ``ctrl[peer, field] >= value``, or raise naming the
        rank waited for."""


class ShmComm(Comm):
    """One rank's view of a group's shared segments (made by the launcher or
    by :meth:`split`)."""

    shared_memory = True

    def __init__(self, rank: int, size: int, ctrl, segs: Sequence[np.ndarray],
                 arena: Arena) -> None:
        super().__init__()
        self.rank, self.size = rank, size
        self._ctrl_shm = ctrl         # keeps the mapping alive
        buf = ctrl.buf
        self.ctrl = np.ndarray((size, ROW), np.int64, buf)
        off = size * ROW * 8
        self._box = np.ndarray((size, size, BOX), np.int64, buf, offset=off)
        off += size * size * BOX * 8
        self._reads = np.ndarray((size, size, 2), np.int64, buf, offset=off)
        off += size * size * 2 * 8
        self._meta = np.ndarray((size, size, STEPS, META), np.int64, buf,
                                offset=off)
        off += size * size * STEPS * META * 8
        self._slots = np.ndarray((size, size, STEPS, SLOT), np.uint8, buf,
                                 offset=off)
        off += size * size * STEPS * SLOT
        self._desc = np.ndarray((size, 2, DESC), np.int64, buf, offset=off)
        self._calls = 0               # calls agreed on (share_call)
        self.segs = list(segs)
        self.seg = self.segs[rank]
        self.arena = arena
        self._base = 1                # round numbers used so far
        self._seen = np.zeros((size, 2), np.int64)   # reads already counted
        self._sq: dict[int, deque] = {p: deque() for p in range(size)}
        self._rq: dict[int, deque] = {p: deque() for p in range(size)}
        self.ctrl[rank, PID] = os.getpid()
        self.ctrl[rank, BEAT] = time.monotonic_ns()

    # ------------------------------------------------------------ memory
    def empty(self, n: int, dtype=np.float64) -> np.ndarray:
        """A 1-d array in this rank's segment (peers can read it)."""
        dt = np.dtype(dtype)
        return self.arena.alloc(int(n) * dt.itemsize).view(dt)

    def offset(self, a: np.ndarray) -> int:
        """Byte offset of ``a`` in this rank's segment, or -1."""
        lo = self.seg.__array_interface__["data"][0]
        p = a.__array_interface__["data"][0]
        if a.flags.c_contiguous and lo <= p and p + a.nbytes <= lo + \
                self.seg.size:
            return p - lo
        return -1

    def scratch(self, key, nbytes: int) -> np.ndarray:
        """A reusable area of this rank's segment (one per ``key``)."""
        have = self.cache.get(("scratch", key))
        if have is None or have.size < nbytes:
            have = self.cache[("scratch", key)] = self.arena.alloc(
                max(nbytes, 1))
        return have[:nbytes]

    def peer_array(self, peer: int, offset: int, n: int, dtype) -> np.ndarray:
        """``n`` elements of ``peer``'s segment from byte ``offset``."""
        dt = np.dtype(dtype)
        return self.segs[peer][offset:offset + n * dt.itemsize].view(dt)

    # ----------------------------------------- the zero-copy executor's calls
    def begin(self, rounds: int, fp: int, boff: int, soff: int) -> int:
        """Start a call of ``rounds`` rounds: publish its fingerprint and
        buffers; return the round number of its first round."""
        base = self._base
        self._base += rounds + 1
        c = self.ctrl[self.rank]
        c[FP], c[BUF_OFF], c[SRC_OFF] = fp, boff, soff
        c[DONE] = c[READ] = base
        return base

    def share_call(self, words: np.ndarray, deadline):
        """Every rank's descriptor of this call, by shared memory: publish
        ours (call ``k`` in slot ``k % 2``, then ``CALL = k``), wait until
        each peer has published call ``k`` and read its slot. A peer cannot
        overwrite that slot meanwhile: publishing call ``k + 2`` waits for
        this rank's call ``k + 1``. None if ``words`` does not fit."""
        if words.size > DESC:
            return None
        self._calls += 1
        k, me = self._calls, self.rank
        self._desc[me, k & 1, :words.size] = words
        self.ctrl[me, CALL] = k
        out = np.empty((self.size, words.size), np.int64)
        for p in range(self.size):
            if p != me:
                self.wait_ge(CALL, p, k, deadline, " (agreeing on the call)")
            out[p] = self._desc[p, k & 1, :words.size]
        return out

    def check_fingerprint(self, peer: int, fp: int) -> None:
        got = int(self.ctrl[peer, FP])
        if got != fp:
            raise ProtocolError(
                f"rank {self.rank}: rank {peer} is in a different call "
                f"(fingerprint {got}, expected {fp}: the ranks called "
                "different collectives, or with different lengths, dtypes "
                "or ops)")

    def took(self, peer: int, nbytes: int) -> None:
        """Count ``nbytes`` read out of ``peer``'s segment as one message
        (the reader counts; the owner learns it in :meth:`settle`)."""
        self.stats.received(peer, nbytes)
        r = self._reads[self.rank, peer]
        r[0] += nbytes
        r[1] += 1

    def settle(self) -> None:
        """Add what peers have read out of this rank's segment since the
        last call to ``stats`` as sent (call once every reader is done)."""
        now = self._reads[:, self.rank, :].copy()
        new = now - self._seen
        self._seen = now
        for q in np.nonzero(new[:, 1])[0]:
            q = int(q)
            self.stats.bytes_sent += int(new[q, 0])
            self.stats.messages_sent += int(new[q, 1])
            self.stats.sent_to[q] += int(new[q, 0])

    def wait_ge(self, field: int, peer: int, value: int, deadline,
                where: str = "") -> None:
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
                self.ctrl[self.rank, BEAT] = time.monotonic_ns()
                try:
                    self._check_alive(peer, where)
                except PeerLost:
                    # a peer publishes before it exits: seen gone, its
                    # last store is visible; if that is what we waited
                    # for, it finished its part and ended (it is not lost)
                    if ready():
                        return
                    raise
                check = now + LIVENESS_S
            if deadline is not None and now > deadline and not ready():
                self._timeout(peer, where)

    def heartbeat(self, peer: int) -> None:
        """Beat this rank's heartbeat and raise PeerLost if a rank died
        (for a caller that waits elsewhere too: the hybrid communicator)."""
        self.ctrl[self.rank, BEAT] = time.monotonic_ns()
        self._check_alive(peer, "")

    def _check_alive(self, peer: int, where: str) -> None:
        for p in range(self.size):
            if p == self.rank:
                continue
            if _dead(int(self.ctrl[p, PID])) and (
                    p == peer or not self.ctrl[p, EXITED]):
                # a rank that ended after giving up on another passes the
                # blame on (its BLAME field), so every survivor names the
                # same rank
                who, seen = p, {p}
                while self.ctrl[who, BLAME] > 0:
                    nxt = int(self.ctrl[who, BLAME]) - 1
                    if nxt in seen:
                        break
                    who = nxt
                    seen.add(who)
                why = "" if who == p else f", after giving up on rank {who}"
                self.ctrl[self.rank, BLAME] = who + 1
                raise PeerLost(f"rank {self.rank}: rank {p} is gone (its "
                               f"process ended{why}){where}", peer=who,
                               rank=self.rank)

    def _timeout(self, peer: int, where: str):
        now = time.monotonic_ns()
        waits = {self.rank: peer}
        for p in range(self.size):
            w = int(self.ctrl[p, WAIT]) - 1
            if p != self.rank and w >= 0 and \
                    now - int(self.ctrl[p, BEAT]) < STALE_NS:
                waits[p] = w
        who, chain = culprit(peer, waits)
        self.ctrl[self.rank, WAIT] = who + 1      # others follow it
        self.ctrl[self.rank, BLAME] = who + 1
        self.ctrl[self.rank, BEAT] = time.monotonic_ns()
        raise CollectiveTimeout(f"rank {self.rank}: timed out waiting for "
                                f"rank {peer}{describe(chain)}{where}",
                                peer=who, rank=self.rank)

    # ---------------------------------------------- mailbox point-to-point
    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> ShmRequest:
        self.check_message(buf, dest, tag)
        r = ShmRequest(self, dest, buf.reshape(-1).view(np.uint8), tag, False)
        self._sq[dest].append(r)
        self.progress()
        return r

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0
              ) -> ShmRequest:
        self.check_message(buf, source, tag)
        r = ShmRequest(self, source, buf.reshape(-1).view(np.uint8), tag,
                       True)
        self._rq[source].append(r)
        self.progress()
        return r

    def progress(self) -> bool:
        """Move every piece that can move: fill this rank's free slots
        toward each peer, empty each peer's filled slots toward this rank
        (``box[src, dst]``: pieces published, pieces taken; the slot of
        piece ``i`` is ``i % STEPS``)."""
        moved = False
        box, meta, slots, me = self._box, self._meta, self._slots, self.rank
        for p, q in self._sq.items():
            h = box[me, p]
            while q and h[0] - h[1] < STEPS:
                r = q[0]
                k = int(h[0]) % STEPS
                n = min(SLOT, r.data.size - r.off)
                slots[me, p, k, :n] = r.data[r.off:r.off + n]
                meta[me, p, k] = (n, r.data.size, r.tag, r.off)
                h[0] += 1              # publish after the data
                moved = True
                if _advance(q, r, n):
                    self.stats.sent(p, r.data.size)
        for p, q in self._rq.items():
            h = box[p, me]
            while q and h[0] != h[1]:
                r = q[0]
                k = int(h[1]) % STEPS
                n, size, tag, off = (int(v) for v in meta[p, me, k])
                if size != r.data.size or tag != r.tag or off != r.off:
                    raise ProtocolError(
                        f"rank {me}: rank {p} sent a message with tag {tag} "
                        f"and {size} bytes where tag {r.tag} and "
                        f"{r.data.size} bytes were expected")
                r.data[r.off:r.off + n] = slots[p, me, k, :n]
                h[1] += 1              # the slot is free again
                moved = True
                if _advance(q, r, n):
                    self.stats.received(p, r.data.size)
        return moved

    def waitall(self, reqs: Sequence[ShmRequest],
                deadline: float | None = None) -> None:
        def done() -> bool:
            return all(r.finished for r in reqs)

        while not done():
            if self.progress():
                continue
            peer = next(r.peer for r in reqs if not r.finished)
            self.ctrl[self.rank, WAIT] = peer + 1
            self._spin(lambda: self.progress() or done(), peer, deadline, "")
            self.ctrl[self.rank, WAIT] = 0

    # ----------------------------------------------------------- the group
    def split(self, color: int, key: int = 0) -> "ShmComm | None":
        deadline = deadline_after(60)
        members = split_members(self, color, key, tag=_SPLIT_TAG,
                                deadline=deadline)
        if members is None:
            return None
        leader, k = members[0], len(members)
        name = np.zeros(_NAME_BYTES, np.uint8)
        if self.rank == leader:
            seg = Segment.create(ctrl_bytes(k))
            raw = seg.name.encode()
            name[:len(raw)] = np.frombuffer(raw, np.uint8)
            acks = [np.zeros(1, np.uint8) for _ in members[1:]]
            try:
                self.exchange([(m, name) for m in members[1:]],
                              list(zip(members[1:], acks)), tag=_SPLIT_TAG,
                              deadline=deadline)
            finally:                   # mapped by every member now, or a
                seg.unlink()           # member failed: the name goes
        else:
            self.recv(name, leader, _SPLIT_TAG, timeout=60)
            seg = Segment.attach(bytes(name).rstrip(b"\0").decode())
            self.send(np.ones(1, np.uint8), leader, _SPLIT_TAG, timeout=60)
        return ShmComm(members.index(self.rank), k, seg,
                       [self.segs[m] for m in members], self.arena)

    def close(self) -> None:
        self.stop_stream()
        self.ctrl[self.rank, EXITED] = 1


class Segment:
    """A named segment in ``/dev/shm`` mapped with :mod:`mmap` (for the
    control segments :meth:`ShmComm.split` makes inside running ranks, out
    of reach of multiprocessing's resource tracker, which the ranks may
    share with their parent)."""

    DIR = "/dev/shm"

    def __init__(self, name: str, fd: int) -> None:
        self.name = name
        try:
            self.buf = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    @classmethod
    def create(cls, nbytes: int) -> "Segment":
        name = f"{segment_prefix()}{secrets.token_hex(8)}"
        fd = os.open(f"{cls.DIR}/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR,
                     0o600)
        os.ftruncate(fd, nbytes)
        return cls(name, fd)

    @classmethod
    def attach(cls, name: str) -> "Segment":
        if "/" in name:
            raise ValueError(f"bad segment name {name!r}")
        return cls(name, os.open(f"{cls.DIR}/{name}", os.O_RDWR))

    def unlink(self) -> None:
        try:
            os.unlink(f"{self.DIR}/{self.name}")
        except FileNotFoundError:
            pass


def segment_prefix() -> str:
    """``wk_`` and, where :data:`TAG_ENV` is set, its tag and ``_``: the
    start of every name :meth:`Segment.create` makes."""
    tag = os.environ.get(TAG_ENV, "")
    if not tag:
        return "wk_"
    if not (tag.isascii() and tag.isalnum() and len(tag) <= 16):
        raise ValueError(f"{TAG_ENV} must be 1-16 letters and digits, got "
                         f"{tag!r}")
    return f"wk_{tag}_"


def make_segments(world: int, shm_bytes: int) -> list:
    """The control segment and one data segment per rank (in the parent,
    before the ranks are forked)."""
    segs = [shared_memory.SharedMemory(create=True, size=ctrl_bytes(world))]
    try:
        for _ in range(world):
            segs.append(shared_memory.SharedMemory(
                create=True, size=max(shm_bytes, ALIGN)))
    except BaseException:
        unlink(segs)
        raise
    return segs


def comm_from_segments(rank: int, world: int, segs) -> ShmComm:
    """Rank ``rank``'s :class:`ShmComm` over segments from
    :func:`make_segments` (inherited by fork)."""
    data = [np.ndarray((d.size,), np.uint8, d.buf) for d in segs[1:]]
    return ShmComm(rank, world, segs[0], data, Arena(data[rank]))


def unlink(segs) -> None:
    for s in segs:
        try:
            s.unlink()
        except FileNotFoundError:
            pass
