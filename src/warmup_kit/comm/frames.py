"""The wire format of the TCP transport: a fixed header, then raw bytes.

Never pickle: a peer can never make another rank run code. A frame is::

    magic (4 bytes) | seq u32 | tag u32 | nbytes u64 | nbytes of payload

``magic`` is ``WKT2`` for data. ``seq`` counts frames per direction of a
connection, so a lost or repeated frame shows; ``tag`` is the check the
receiver compares with what it expects (the collectives' call fingerprint);
``nbytes`` must equal the receive buffer's size. A header whose magic, seq,
tag or length differs is rejected with
:class:`~warmup_kit.errors.ProtocolError` before a payload byte is read, and
a length above the receiver's ``max_frame_bytes`` is refused outright.

``WKTN`` frames are notices, with no payload: ``seq`` is the kind
(:data:`WAITING` - "I gave up waiting for rank ``tag``"; :data:`LOST` -
"rank ``tag`` is gone"), so every rank can work out which rank the job is
really stuck on (:mod:`warmup_kit.comm.blame`).
"""
from __future__ import annotations

import struct

from warmup_kit.errors import ProtocolError

HEADER = struct.Struct("!4sIIQ")
DATA, NOTICE = b"WKT2", b"WKTN"
WAITING, LOST = 1, 2
DEFAULT_MAX_FRAME = 1 << 34          # 16 GiB


def data_header(seq: int, tag: int, nbytes: int) -> bytes:
    return HEADER.pack(DATA, seq & 0xFFFFFFFF, tag, nbytes)


def notice(kind: int, rank: int) -> bytes:
    """A notice frame: this rank is ``WAITING`` for ``rank``, or ``rank``
    is ``LOST``."""
    return HEADER.pack(NOTICE, kind, rank, 0)


def parse_header(raw: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME,
                 peer: int | None = None) -> tuple[bytes, int, int, int]:
    """(magic, seq, tag, nbytes) of a header; ProtocolError if malformed or
    oversized (naming ``peer`` when given)."""
    who = "" if peer is None else f" from rank {peer}"
    if len(raw) != HEADER.size:
        raise ProtocolError(f"short header{who} ({len(raw)} of "
                            f"{HEADER.size} bytes)")
    magic, seq, tag, nbytes = HEADER.unpack(raw)
    if magic not in (DATA, NOTICE):
        raise ProtocolError(f"bad frame magic {magic!r}{who}")
    if nbytes > max_frame_bytes:
        raise ProtocolError(f"oversized frame{who}: {nbytes} bytes "
                            f"announced, limit {max_frame_bytes}")
    if magic == NOTICE and (nbytes or seq not in (WAITING, LOST)):
        raise ProtocolError(f"malformed notice{who}")
    return magic, seq, tag, nbytes
