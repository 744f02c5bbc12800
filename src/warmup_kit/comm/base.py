"""The communicator protocol every transport implements (DESIGN: Transports).

A :class:`Comm` is one rank's end of a group of ``size`` ranks. Every
transport (MPI, TCP sockets, shared memory) implements the same calls:

* ``rank``, ``size``, ``stats`` (payload bytes and messages per peer,
  counted where they cross the transport);
* ``isend(buf, dest, tag)`` / ``irecv(buf, source, tag)`` returning a
  :class:`Request`, completed by ``wait()`` or :meth:`Comm.waitall`;
* ``send``, ``recv``, ``sendrecv``, ``exchange`` (built on the above);
* ``barrier()``, ``split(color, key)`` (a sub-communicator, as MPI's
  ``Comm_split``) and ``close()``.

Messages between two ranks arrive in the order they were sent, as on one
NCCL stream. A ``tag`` is not used for matching; it is *checked*: a receive
whose tag differs from the arriving message's raises
:class:`~warmup_kit.errors.ProtocolError` naming the sender. The collectives
put a fingerprint of the call (collective, algorithm, op, dtype, length) in
the tag, so ranks that called different things fail loudly, for free.
Buffers are contiguous numpy arrays; their bytes travel as they are.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from warmup_kit.comm.deadlines import deadline_after

Message = tuple[int, np.ndarray]   # (peer rank, contiguous array)
#: tags are checked, not matched; 0..32767 fits every MPI's tag range
TAG_MAX = 32767


@dataclass
class TrafficStats:
    """Payload bytes and messages, total and per peer.

    Counted by the transport where bytes cross it: on MPI the sizes of the
    buffers handed to the library, on sockets the payload bytes written and
    read, on shared memory the bytes read out of a peer's segment. The
    collectives' optional debug check (``WARMUP_KIT_DEBUG=DETAIL``) is
    counted apart, in ``control_*``.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    sent_to: dict = field(default_factory=lambda: defaultdict(int))
    received_from: dict = field(default_factory=lambda: defaultdict(int))
    control_bytes_sent: int = 0
    control_bytes_received: int = 0

    def sent(self, peer: int, nbytes: int) -> None:
        """Count one message of ``nbytes`` handed to the transport."""
        self.bytes_sent += nbytes
        self.messages_sent += 1
        self.sent_to[peer] += nbytes

    def received(self, peer: int, nbytes: int) -> None:
        """Count one message of ``nbytes`` taken from the transport."""
        self.bytes_received += nbytes
        self.messages_received += 1
        self.received_from[peer] += nbytes

    def as_dict(self) -> dict:
        return {"bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received,
                "messages_sent": self.messages_sent,
                "messages_received": self.messages_received}


class Request(ABC):
    """A started send or receive."""

    @abstractmethod
    def test(self) -> bool:
        """True once complete (progresses the transport a little)."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> None:
        """Block until complete; past ``timeout`` seconds raise
        :class:`~warmup_kit.CollectiveTimeout` naming the peer."""


#: ``WARMUP_KIT_DEBUG=DETAIL``: every collective first checks that all ranks
#: called it alike (like PyTorch's ``TORCH_DISTRIBUTED_DEBUG=DETAIL``)
DEBUG_ENV = "WARMUP_KIT_DEBUG"
#: ``WARMUP_KIT_TRACE=1``: print every message a rank sends
TRACE_ENV = "WARMUP_KIT_TRACE"
#: ``WARMUP_KIT_CHECK=0``: skip the collectives' default agreement on each
#: call's arguments (:mod:`warmup_kit.callcheck`)
CHECK_ENV = "WARMUP_KIT_CHECK"


class Comm(ABC):
    """One rank of a group: the protocol every transport implements.

    ``debug``, ``tracing`` and ``check_calls`` are read from
    :data:`DEBUG_ENV`, :data:`TRACE_ENV` and :data:`CHECK_ENV` once, when the communicator is made (as PyTorch reads
    its debug level when a process group is made), not on every call; set
    the attributes to change them later.
    """

    rank: int
    size: int
    #: buffers live in memory every rank maps (the zero-copy executor)
    shared_memory: bool = False

    def __init__(self) -> None:
        self.debug = os.environ.get(DEBUG_ENV, "").upper() == "DETAIL"
        self.tracing = os.environ.get(TRACE_ENV) == "1"
        #: the collectives first agree on their arguments (every rank must
        #: set it alike)
        self.check_calls = os.environ.get(CHECK_ENV, "1") != "0"
        self.stats = TrafficStats()
        #: executors keep compiled plans and staging buffers here, per
        #: communicator (never shared between two communicators' threads)
        self.cache: dict = {}
        self._stream = None

    def stream(self):
        """This communicator's :class:`~warmup_kit.comm.stream.Stream`: the
        thread that runs its non-blocking collectives in issue order."""
        if self._stream is None:
            from warmup_kit.comm.stream import Stream
            self._stream = Stream(f"warmup-comm-rank{self.rank}")
        return self._stream

    def busy(self) -> bool:
        """True while non-blocking operations are queued or running."""
        return self._stream is not None and not self._stream.idle()

    def synchronize(self) -> None:
        """Wait for every non-blocking operation issued on this communicator
        (blocking calls do so first, to keep issue order)."""
        if self._stream is not None:
            self._stream.synchronize()

    def stop_stream(self) -> None:
        """End the communication thread (at close)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def empty(self, n: int, dtype=np.float64) -> np.ndarray:
        """A 1-d buffer of ``n`` elements the transport moves fastest (plain
        memory here; a shared segment for :class:`~warmup_kit.comm.ShmComm`,
        whose peers then read it with no copy)."""
        return np.empty(int(n), dtype)

    def reset_stats(self) -> None:
        """Zero the counters (before a measured call)."""
        self.stats = TrafficStats()

    @contextmanager
    def control(self):
        """Count what crosses the transport inside this block as control
        bytes (``stats.control_*``), apart from the payload."""
        real, self.stats = self.stats, TrafficStats()
        try:
            yield
        finally:
            ctl, self.stats = self.stats, real
            real.control_bytes_sent += ctl.bytes_sent
            real.control_bytes_received += ctl.bytes_received

    def share_call(self, words: np.ndarray, deadline):
        """Every rank's ``words`` (one call's descriptor), shape (size, n),
        where the transport can share them without a message (shared
        memory); None here: :mod:`warmup_kit.callcheck` sends them."""
        return None

    # ------------------------------------------------- the transport's own
    @abstractmethod
    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Start sending the contiguous array ``buf`` to rank ``dest``.

        ``buf`` must not change until the request completes.
        """

    @abstractmethod
    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        """Start receiving the next message from ``source`` into ``buf``
        (it must carry exactly ``buf.nbytes`` bytes and ``tag``)."""

    @abstractmethod
    def waitall(self, reqs: Sequence[Request],
                deadline: float | None = None) -> None:
        """Complete every request; past ``deadline`` (a
        :func:`time.monotonic` time) raise
        :class:`~warmup_kit.CollectiveTimeout` naming a peer."""

    @abstractmethod
    def split(self, color: int, key: int = 0) -> "Comm | None":
        """A new communicator of the ranks that pass the same ``color``,
        ordered by ``(key, rank)``; ``None`` for ``color < 0`` (MPI's
        ``MPI_UNDEFINED``). Collective over this communicator."""

    @abstractmethod
    def close(self) -> None:
        """Release the transport's resources."""

    # ----------------------------------------------------- built on those
    def send(self, buf: np.ndarray, dest: int, tag: int = 0, *,
             timeout: float | None = None) -> None:
        """Send ``buf`` to ``dest`` and wait until it has left."""
        self.synchronize()
        self.waitall([self.isend(buf, dest, tag)], deadline_after(timeout))

    def recv(self, buf: np.ndarray, source: int, tag: int = 0, *,
             timeout: float | None = None) -> np.ndarray:
        """Receive the next message from ``source`` into ``buf``."""
        self.synchronize()
        self.waitall([self.irecv(buf, source, tag)], deadline_after(timeout))
        return buf

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray,
                 source: int, tag: int = 0, *,
                 deadline: float | None = None) -> None:
        """Send to ``dest`` and receive from ``source`` at once."""
        self.waitall([self.irecv(recvbuf, source, tag),
                      self.isend(sendbuf, dest, tag)], deadline)

    def send_wait(self, buf: np.ndarray, dest: int, tag: int = 0, *,
                  deadline: float | None = None) -> None:
        """Send ``buf`` to ``dest`` and wait until it has left (what an
        executor calls inside a collective: no wait for the stream)."""
        self.waitall([self.isend(buf, dest, tag)], deadline)

    def recv_wait(self, buf: np.ndarray, source: int, tag: int = 0, *,
                  deadline: float | None = None) -> None:
        """Receive the next message from ``source`` into ``buf`` and wait
        for it (inside a collective, as :meth:`send_wait`)."""
        self.waitall([self.irecv(buf, source, tag)], deadline)

    def exchange(self, sends: Sequence[Message], recvs: Sequence[Message], *,
                 tag: int = 0, deadline: float | None = None) -> None:
        """Start every send and receive at once; return when all are done,
        so a round in which a rank both sends and receives cannot deadlock.
        """
        reqs = [self.irecv(a, p, tag) for p, a in recvs]
        reqs += [self.isend(a, p, tag) for p, a in sends]
        self.waitall(reqs, deadline)

    def barrier(self, *, timeout: float | None = None) -> None:
        """Return once every rank has called it (a dissemination barrier:
        ceil(log2 N) rounds of one empty message each way)."""
        self.synchronize()
        deadline = deadline_after(timeout)
        token, dist = np.empty(0, np.uint8), 1
        while dist < self.size:
            self.sendrecv(token, (self.rank + dist) % self.size, token,
                          (self.rank - dist) % self.size, TAG_MAX,
                          deadline=deadline)
            dist <<= 1

    def check_message(self, buf, peer, tag) -> None:
        """ValueError/TypeError unless ``buf`` is a contiguous numpy array,
        ``peer`` another rank of this group and ``tag`` in [0, TAG_MAX]."""
        if (peer.__class__ is not int or not 0 <= peer < self.size
                or peer == self.rank):
            if (not isinstance(peer, (int, np.integer))
                    or isinstance(peer, bool) or not 0 <= peer < self.size
                    or peer == self.rank):
                raise ValueError(f"rank {self.rank}: bad peer {peer!r} (a "
                                 f"rank in [0, {self.size}) other than this "
                                 "one)")
        if tag.__class__ is not int or not 0 <= tag <= TAG_MAX:
            check_tag(tag)
        if buf.__class__ is not np.ndarray or not buf.flags.c_contiguous:
            if not isinstance(buf, np.ndarray):
                raise TypeError(f"rank {self.rank}: messages are numpy "
                                f"arrays, got {type(buf).__name__}")
            if not buf.flags.c_contiguous:
                raise ValueError(f"rank {self.rank}: a message buffer must "
                                 "be contiguous")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def split_order(entries: Sequence[tuple[int, int, int]], rank: int
                ) -> list[int] | None:
    """The members of ``rank``'s group from every rank's (color, key, rank),
    ordered by (key, rank) as ``MPI_Comm_split`` does; None if the color is
    negative."""
    color = entries[rank][0]
    if color < 0:
        return None
    return [r for _, _, r in sorted((k, r, r) for c, k, r in entries
                                    if c == color)]


def split_members(comm: "Comm", color: int, key: int, *, tag: int,
                  deadline: float) -> list[int] | None:
    """Every rank's (color, key) swapped with every other over ``comm``'s
    own point-to-point (by ``deadline``), then :func:`split_order`: what a
    transport's ``split`` needs before it builds the group's links."""
    mine = np.array([color, key], np.int64)
    every = np.empty((comm.size, 2), np.int64)
    every[comm.rank] = mine
    others = [p for p in range(comm.size) if p != comm.rank]
    comm.exchange([(p, mine) for p in others],
                  [(p, every[p]) for p in others], tag=tag,
                  deadline=deadline)
    return split_order([(int(c), int(k), r) for r, (c, k)
                        in enumerate(every)], comm.rank)


def check_tag(tag) -> int:
    if (not isinstance(tag, (int, np.integer)) or isinstance(tag, bool)
            or not 0 <= tag <= TAG_MAX):
        raise ValueError(f"tag must be an int in [0, {TAG_MAX}], got {tag!r}")
    return int(tag)


