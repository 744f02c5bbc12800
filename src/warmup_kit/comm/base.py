"""The communicator protocol every transport implements (DESIGN: Transports).

Algorithms never see a transport: the executor hands a communicator one
round's worth of point-to-point messages at a time through :meth:`exchange`.
Transports count what they move, so a run can be checked against the bytes
its schedule predicts.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

Message = tuple[int, np.ndarray]   # (peer rank, contiguous 1-d array)


@dataclass
class TrafficStats:
    """Payload bytes and messages, total and per peer.

    The algorithm's payload only; the small header exchange that checks all
    ranks agree on length and dtype is counted apart, in ``control_*``.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    sent_to: dict = field(default_factory=lambda: defaultdict(int))
    received_from: dict = field(default_factory=lambda: defaultdict(int))
    control_bytes_sent: int = 0
    control_bytes_received: int = 0

    def count(self, sends: Sequence[Message], recvs: Sequence[Message],
              control: bool) -> None:
        """Add one exchange's messages."""
        sent = sum(a.nbytes for _, a in sends)
        received = sum(a.nbytes for _, a in recvs)
        if control:
            self.control_bytes_sent += sent
            self.control_bytes_received += received
            return
        self.bytes_sent += sent
        self.bytes_received += received
        self.messages_sent += len(sends)
        self.messages_received += len(recvs)
        for p, a in sends:
            self.sent_to[p] += a.nbytes
        for p, a in recvs:
            self.received_from[p] += a.nbytes

    def as_dict(self) -> dict:
        return {"bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received,
                "messages_sent": self.messages_sent,
                "messages_received": self.messages_received}


class Comm:
    """Base class: ``rank``, ``size``, ``stats`` and one primitive.

    Subclasses implement :meth:`_exchange`. :meth:`exchange` starts all the
    given sends and receives at once and returns when all are complete, so a
    round in which a rank both sends and receives cannot deadlock.
    """

    rank: int
    size: int

    def __init__(self) -> None:
        self.stats = TrafficStats()

    def reset_stats(self) -> None:
        """Zero the counters (before a measured call)."""
        self.stats = TrafficStats()

    def exchange(self, sends: Sequence[Message], recvs: Sequence[Message], *,
                 deadline: float | None = None, control: bool = False) -> None:
        """Send ``sends`` and fill ``recvs``' arrays, all concurrently.

        Messages to or from one peer match in the order given. ``deadline``
        is a :func:`time.monotonic` time after which the wait raises
        :class:`~warmup_kit.CollectiveTimeout` naming a peer not yet heard.
        """
        for peer, _ in list(sends) + list(recvs):
            if not 0 <= peer < self.size or peer == self.rank:
                raise ValueError(f"rank {self.rank}: bad peer {peer}")
        self._exchange(sends, recvs, deadline)
        self.stats.count(sends, recvs, control)

    def _exchange(self, sends, recvs, deadline) -> None:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        """Release the transport's resources."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def deadline_after(timeout: float | None) -> float | None:
    """A :func:`time.monotonic` deadline ``timeout`` seconds from now."""
    if timeout is None:
        return None
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    return time.monotonic() + timeout
