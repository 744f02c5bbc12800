"""Two transports in one communicator: shared memory inside a node, TCP
across nodes (as NCCL uses NVLink inside a server and the NIC between).

A :class:`HybridComm` holds a :class:`~warmup_kit.comm.ShmComm` over the
ranks of its own node and a :class:`~warmup_kit.comm.SocketComm` over all
ranks, and sends each message by the one that reaches its peer: a peer on
the same node by shared memory, any other by socket (the socket mesh keeps
its connections to same-node peers, idle). Between two ranks only one
transport is ever used, so messages still arrive in the order sent.

``stats`` counts every message's payload as it is handed to either
transport (as MPI counts its buffers); ``intra.stats`` and ``inter.stats``
keep each transport's own count, so a run can show what crossed the slow
tier. A wait with a deadline that expires hands the unfinished requests to
the transport they belong to, which names the peer as it always does (the
shared-memory side's local rank translated back to this communicator's).
"""
from __future__ import annotations

import os
import time
from contextlib import ExitStack, contextmanager
from typing import Sequence

import numpy as np

from warmup_kit.comm.base import Comm, Request, split_members
from warmup_kit.comm.deadlines import deadline_after
from warmup_kit.comm.shm import LIVENESS_S, SPINS, ShmComm
from warmup_kit.comm.sockets import SocketComm
from warmup_kit.errors import CollectiveTimeout, PeerLost

_SPLIT_TAG = 32767 - 2


class HybridRequest(Request):
    __slots__ = ("comm", "inner", "local")

    def __init__(self, comm: "HybridComm", inner: Request, local: bool
                 ) -> None:
        self.comm, self.inner, self.local = comm, inner, local

    def test(self) -> bool:
        return self.inner.test()

    def wait(self, timeout: float | None = None) -> None:
        self.comm.waitall([self], deadline_after(timeout))


def _done(r: HybridRequest) -> bool:
    return r.inner.finished if r.local else r.inner.op.finished


class HybridComm(Comm):
    """One rank of a group spread over nodes.

    Args:
        rank, size: this rank and the group's size.
        nodes: the node of every rank (``nodes[r]``, any hashable labels).
        intra: a ShmComm over this node's ranks, in rank order (None if this
            rank is alone on its node).
        inter: a SocketComm over all ``size`` ranks.
    """

    def __init__(self, rank: int, size: int, nodes: Sequence,
                 intra: ShmComm | None, inter: SocketComm) -> None:
        super().__init__()
        if len(nodes) != size or inter.size != size or inter.rank != rank:
            raise ValueError("nodes, inter and rank/size do not agree")
        self.rank, self.size = rank, size
        self.nodes = list(nodes)
        self.local_ranks = [r for r in range(size)
                            if nodes[r] == nodes[rank]]
        want = len(self.local_ranks)
        if (intra is None) != (want == 1) or intra is not None and (
                intra.size != want
                or intra.rank != self.local_ranks.index(rank)):
            raise ValueError(f"rank {rank}: the shared-memory group does not "
                             f"match the {want} ranks of this node")
        self._local = {g: i for i, g in enumerate(self.local_ranks)}
        self._open: list[HybridRequest] = []   # issued, maybe unfinished
        self.intra, self.inter = intra, inter

    @contextmanager
    def control(self):
        """Control traffic (e.g. the collectives' argument agreement) is
        kept apart in each tier's counters too."""
        with ExitStack() as stack:
            stack.enter_context(super().control())
            for tier in (self.inter, self.intra):
                if tier is not None:
                    stack.enter_context(tier.control())
            yield

    def is_local(self, peer: int) -> bool:
        """True if ``peer`` is on this rank's node (shared memory)."""
        return peer in self._local and peer != self.rank

    # ------------------------------------------------------ point-to-point
    def isend(self, buf: np.ndarray, dest: int, tag: int = 0
              ) -> HybridRequest:
        self.check_message(buf, dest, tag)
        self.stats.sent(dest, buf.nbytes)
        if self.is_local(dest):
            return self._issued(self.intra.isend(buf, self._local[dest],
                                                 tag), True)
        return self._issued(self.inter.isend(buf, dest, tag), False)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0
              ) -> HybridRequest:
        self.check_message(buf, source, tag)
        self.stats.received(source, buf.nbytes)
        if self.is_local(source):
            return self._issued(self.intra.irecv(buf, self._local[source],
                                                 tag), True)
        return self._issued(self.inter.irecv(buf, source, tag), False)

    def _issued(self, inner: Request, local: bool) -> HybridRequest:
        r = HybridRequest(self, inner, local)
        self._open.append(r)
        return r

    def waitall(self, reqs: Sequence[HybridRequest],
                deadline: float | None = None) -> None:
        """Complete ``reqs``. While the other transport has work queued
        (a large socket send still draining, say) both are progressed:
        blocking in one while the other's queue stalls could leave a peer
        waiting for bytes this rank never pushes, and the ring would stop."""
        self._open = [r for r in self._open if not _done(r)]
        local = [r.inner for r in reqs if r.local]
        remote = [r.inner for r in reqs if not r.local]
        busy_local = any(r.local for r in self._open)
        busy_remote = any(not r.local for r in self._open)
        if not busy_local or not busy_remote:   # one transport: its own wait
            self._wait(local, remote, deadline)
            return
        idle, check = 0, time.monotonic() + LIVENESS_S
        while True:
            # spin, then nap a little as the shared-memory waits do (ranks
            # may share cores); a socket event ends the nap early
            moved = self.intra.progress()
            self.inter.progress(0 if idle < SPINS else min(
                2e-5 * (idle - SPINS + 1), 2e-4))
            if all(r.finished for r in local) and all(
                    r.op.finished for r in remote):
                return
            if moved:
                idle = 0
            else:
                idle += 1
                if idle < SPINS:
                    os.sched_yield()
            now = time.monotonic()
            if now > check:              # as the shm waits do: a dead peer
                waiting = next((r.inner for r in self._open
                                if r.local and not _done(r)), None)
                if waiting is not None:
                    try:
                        self.intra.heartbeat(waiting.peer)
                    except PeerLost as exc:
                        raise self._global(exc)
                check = now + LIVENESS_S
            if deadline is not None and now > deadline:
                self._wait([r for r in local if not r.finished],
                           [r for r in remote if not r.op.finished], deadline)
                return

    def _wait(self, local, remote, deadline) -> None:
        if remote:
            self.inter.waitall(remote, deadline)
        if local:
            try:
                self.intra.waitall(local, deadline)
            except (CollectiveTimeout, PeerLost) as exc:
                raise self._global(exc)

    def _global(self, exc):
        """A shared-memory error, its peer renamed to this group's rank."""
        if getattr(exc, "peer", None) is not None and \
                0 <= exc.peer < len(self.local_ranks):
            exc.add_note(f"(shared-memory rank {exc.peer} is rank "
                         f"{self.local_ranks[exc.peer]} here)")
            exc.peer = self.local_ranks[exc.peer]
        return exc

    # ----------------------------------------------------------- the group
    def split(self, color: int, key: int = 0) -> "HybridComm | None":
        """Collective over this group: both transports split alike."""
        members = split_members(
            self, color, key, tag=_SPLIT_TAG,
            deadline=deadline_after(self.inter.connect_timeout))
        inter = self.inter.split(color, key)
        intra = self.intra.split(color, key) if self.intra else None
        if members is None:
            return None
        nodes = [self.nodes[m] for m in members]
        mine_n = [m for m in members if self.nodes[m] == self.nodes[
            self.rank]]
        if len(mine_n) == 1 and intra is not None:
            intra.close()
            intra = None
        return HybridComm(members.index(self.rank), len(members), nodes,
                          intra, inter)

    def close(self) -> None:
        self.stop_stream()
        if self.intra is not None:
            self.intra.close()
        self.inter.close()
