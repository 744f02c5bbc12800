"""Errors raised by collectives and transports (book, Chapter 8).

A synchronous collective waits on its peers; these errors turn the two ways a
peer can fail it, silence and disappearance, into exceptions that name the
peer, instead of a hang.
"""
from __future__ import annotations


class _NamesPeer:
    """Mixin: the error names ``peer`` (the rank at fault) and ``rank``
    (the rank that raised it), and survives pickling between processes."""

    def __init__(self, message: str, *, peer: int | None = None,
                 rank: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer
        self.rank = rank

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), self.peer, self.rank))


class CollectiveTimeout(_NamesPeer, TimeoutError):
    """A wait passed its deadline. ``peer`` is the rank waited for."""


class PeerLost(_NamesPeer, ConnectionError):
    """A peer's connection dropped. ``peer`` is the rank that was lost."""


class ProtocolError(RuntimeError):
    """A peer sent a frame that does not match what the schedule expects."""


class CallMismatch(ProtocolError, ValueError):
    """The ranks called a collective with different arguments (root, op,
    count, dtype, algorithm, the collective itself...). Every rank of the
    call raises it, with the same message: ``fields`` names what differs,
    ``ranks`` the two ranks compared (the lowest rank, and the lowest rank
    that differs from it) and ``values`` each one's values of ``fields``."""

    def __init__(self, message: str, *, fields: tuple = (),
                 ranks: tuple = (), values: tuple = ()) -> None:
        super().__init__(message)
        self.fields, self.ranks, self.values = fields, ranks, values

    def __reduce__(self):
        return (_rebuild_mismatch, (str(self), self.fields, self.ranks,
                                    self.values))


class RankDied(RuntimeError):
    """A launched rank's process ended without reporting a result."""

    def __init__(self, message: str, *, rank: int | None = None,
                 exitcode: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.exitcode = exitcode

    def __reduce__(self):
        return (RankDied, (str(self),), {"rank": self.rank,
                                          "exitcode": self.exitcode})


def _rebuild(cls, message, peer, rank):
    return cls(message, peer=peer, rank=rank)


def _rebuild_mismatch(message, fields, ranks, values):
    return CallMismatch(message, fields=fields, ranks=ranks, values=values)
