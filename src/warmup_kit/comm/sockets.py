"""TCP transport from scratch: the original lab's "ring all-reduce over sockets".

Every pair of ranks shares one TCP connection (127.0.0.1 by default). A frame
is a fixed 20-byte header followed by raw array bytes, never pickle, so a
peer can never make another rank run code:

    magic "WKT1" | dtype (4 bytes, numpy ``dtype.str``) | seq u32 | nbytes u64

The receiver knows what it expects (the schedule says so): a header whose
magic, dtype, sequence number or length differs is rejected with
:class:`~warmup_kit.errors.ProtocolError` before a payload byte is read, and
a length above ``max_frame_bytes`` is refused outright. A frame with magic
"WKTA" is an abort notice: a rank that gave up on a peer tells the others
which rank it blames, so every rank names the same culprit.
"""
from __future__ import annotations

import os
import select
import selectors
import socket
import struct
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from warmup_kit.errors import CollectiveTimeout, PeerLost, ProtocolError
from warmup_kit.comm.base import Comm, deadline_after

HEADER = struct.Struct("!4s4sIQ")
HELLO = struct.Struct("!4sII")
MAGIC, ABORT, HELLO_MAGIC = b"WKT1", b"WKTA", b"WKH1"
ABORT_TIMEOUT, ABORT_LOST = 1, 2
DEFAULT_MAX_FRAME = 1 << 34          # 16 GiB
SOCKET_BUFFER = 4 << 20


def _dtype_code(dtype: np.dtype) -> bytes:
    code = np.dtype(dtype).str.encode()
    if len(code) > 4:
        raise TypeError(f"dtype {dtype} cannot be framed")
    return code.ljust(4, b" ")


def parse_header(raw: bytes, *, max_frame_bytes: int = DEFAULT_MAX_FRAME
                 ) -> tuple[bytes, bytes, int, int]:
    """Decode a frame header; raise ProtocolError if malformed or oversized."""
    if len(raw) != HEADER.size:
        raise ProtocolError(f"short header ({len(raw)} of {HEADER.size} bytes)")
    magic, code, seq, nbytes = HEADER.unpack(raw)
    if magic not in (MAGIC, ABORT):
        raise ProtocolError(f"bad frame magic {magic!r}")
    if nbytes > max_frame_bytes:
        raise ProtocolError(f"oversized frame: {nbytes} bytes announced, "
                            f"limit {max_frame_bytes}")
    return magic, code, seq, nbytes


@dataclass
class _Op:
    peer: int
    view: memoryview          # payload bytes
    header: bytes             # what we send, or what we expect
    done: int = 0             # bytes of header + payload moved so far
    hdr: bytearray | None = None

    @property
    def total(self) -> int:
        return HEADER.size + len(self.view)


class SocketComm(Comm):
    """A rank of a full TCP mesh.

    Args:
        rank: this rank.
        size: number of ranks.
        addresses: ``(host, port)`` every rank listens on, by rank.
        listener: an already bound, listening socket for ``addresses[rank]``
            (the launcher passes it so that no port is ever raced for).
        connect_timeout: seconds to build the mesh.
        max_frame_bytes: the largest frame a peer may announce.
    """

    def __init__(self, rank: int, size: int,
                 addresses: Sequence[tuple[str, int]], *,
                 listener: socket.socket | None = None,
                 connect_timeout: float = 30.0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME) -> None:
        super().__init__()
        if not 0 <= rank < size or len(addresses) != size:
            raise ValueError(f"rank {rank} / size {size} / "
                             f"{len(addresses)} addresses do not agree")
        self.rank, self.size = rank, size
        self.max_frame_bytes = max_frame_bytes
        self._send_seq = [0] * size
        self._recv_seq = [0] * size
        self._broken: BaseException | None = None
        self._eof: set[int] = set()
        self._mid_frame: dict[int, _Op] = {}   # frames partly sent, by peer
        self._trace = os.environ.get("WARMUP_KIT_TRACE") == "1"
        self.socks: dict[int, socket.socket] = {}
        self._sel = selectors.DefaultSelector()
        self._ev: dict[int, int] = {}        # events watched, by peer
        deadline = deadline_after(connect_timeout)
        own = listener
        if own is None and size > 1:
            own = socket.create_server(addresses[rank], backlog=size)
        try:
            self._connect_mesh(addresses, own, deadline)
        finally:
            if own is not None and listener is None:
                own.close()

    # ------------------------------------------------------------ mesh setup
    def _connect_mesh(self, addresses, listener, deadline) -> None:
        for peer in range(self.rank):          # connect to lower ranks
            while True:
                try:
                    s = socket.create_connection(addresses[peer], timeout=5)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise CollectiveTimeout(
                            f"rank {self.rank}: could not connect to rank "
                            f"{peer} at {addresses[peer]}", peer=peer,
                            rank=self.rank) from None
                    time.sleep(0.05)
            s.sendall(HELLO.pack(HELLO_MAGIC, self.rank, self.size))
            self._adopt(peer, s)
        pending = set(range(self.rank + 1, self.size))
        while pending:
            listener.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                s, _ = listener.accept()
            except socket.timeout:
                raise CollectiveTimeout(
                    f"rank {self.rank}: ranks {sorted(pending)} never "
                    "connected", peer=min(pending), rank=self.rank) from None
            s.settimeout(5)
            raw = _recv_exact(s, HELLO.size)
            magic, peer, size = HELLO.unpack(raw)
            if magic != HELLO_MAGIC or size != self.size or peer not in pending:
                s.close()
                raise ProtocolError(f"rank {self.rank}: bad hello "
                                    f"{(magic, peer, size)}")
            pending.discard(peer)
            self._adopt(peer, s)

    def _adopt(self, peer: int, s: socket.socket) -> None:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            s.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        s.setblocking(False)
        self.socks[peer] = s

    def close(self, drain_s: float = 0.2) -> None:
        """Close every connection gracefully.

        A socket closed with unread bytes in its receive queue makes the
        kernel reset the connection (RST), and a reset throws away what the
        peer had received but not yet read: frames this rank sent before
        leaving would be lost, and a peer would blame this rank instead of
        the real culprit. So: send FIN first, discard what has already
        arrived (for at most ``drain_s``), then close.
        """
        self._sel.close()
        self._ev.clear()
        open_socks = list(self.socks.values())
        for s in open_socks:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        _drain(open_socks, drain_s)
        for s in open_socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks.clear()

    # -------------------------------------------------------------- exchange
    def _exchange(self, sends, recvs, deadline) -> None:
        if self._broken is not None:
            raise RuntimeError(f"rank {self.rank}: communicator unusable "
                               f"after {self._broken!r}")
        try:
            self._progress(sends, recvs, deadline)
        except (CollectiveTimeout, PeerLost) as exc:
            self._broken = exc
            kind = ABORT_TIMEOUT if isinstance(exc, CollectiveTimeout) else ABORT_LOST
            self._notify_abort(kind, exc.peer)
            raise
        except ProtocolError as exc:
            self._broken = exc
            raise

    def _progress(self, sends, recvs, deadline) -> None:
        send_q: dict[int, list[_Op]] = {}
        recv_q: dict[int, list[_Op]] = {}
        for peer, arr in sends:
            seq = self._send_seq[peer]
            self._send_seq[peer] += 1
            hdr = HEADER.pack(MAGIC, _dtype_code(arr.dtype), seq, arr.nbytes)
            send_q.setdefault(peer, []).append(
                _Op(peer, memoryview(arr).cast("B"), hdr))
            self._log(f"send {arr.nbytes} B -> rank {peer}")
        order = []
        for peer, arr in recvs:
            seq = self._recv_seq[peer]
            self._recv_seq[peer] += 1
            want = HEADER.pack(MAGIC, _dtype_code(arr.dtype), seq, arr.nbytes)
            op = _Op(peer, memoryview(arr).cast("B"), want, hdr=bytearray())
            recv_q.setdefault(peer, []).append(op)
            order.append(op)
        self._waits = (order, send_q)      # whom this exchange waits for
        self._quiet: set[int] = set()
        for peer in list(send_q) + list(recv_q):
            if peer in self._eof or peer not in self.socks:
                self._lost(peer, "has closed its connection")
        # optimistic pass: small frames usually go out, and arrive, at once
        for p in list(send_q):
            self._on_writable(p, send_q)
        for p in list(recv_q):
            self._on_readable(p, recv_q)
        if not send_q and not recv_q:
            return
        for p in self.socks:
            self._set_events(p, self._events(p, send_q, recv_q))
        while send_q or recv_q:
            wait = None
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    self._raise_timeout(order, send_q)
            for key, mask in self._sel.select(wait):
                p = key.data
                if mask & selectors.EVENT_READ:
                    self._on_readable(p, recv_q)
                if mask & selectors.EVENT_WRITE and p in send_q:
                    self._on_writable(p, send_q)
                self._set_events(p, self._events(p, send_q, recv_q))

    def _set_events(self, p: int, ev: int) -> None:
        """Watch peer ``p``'s socket for ``ev`` on the persistent selector."""
        now = self._ev.get(p, 0)
        if ev == now:
            return
        s = self.socks[p]
        if ev == 0:
            self._sel.unregister(s)
        elif now == 0:
            self._sel.register(s, ev, p)
        else:
            self._sel.modify(s, ev, p)
        self._ev[p] = ev

    def _events(self, p, send_q, recv_q) -> int:
        # read always (abort notices, EOFs), unless the peer has already sent
        # data for a later round and we expect nothing from it now
        ev = 0
        if p not in self._eof and (p in recv_q or p not in self._quiet):
            ev |= selectors.EVENT_READ
        if p in send_q:
            ev |= selectors.EVENT_WRITE
        return ev

    def _on_writable(self, p: int, send_q) -> None:
        ops = send_q[p]
        s = self.socks[p]
        while ops:
            op = ops[0]
            try:
                if op.done < HEADER.size:
                    n = s.send(op.header[op.done:])
                else:
                    n = s.send(op.view[op.done - HEADER.size:])
            except BlockingIOError:
                return
            except OSError as exc:
                raise PeerLost(f"rank {self.rank}: lost rank {p} while sending"
                               f" ({exc.strerror or exc})", peer=p,
                               rank=self.rank) from None
            op.done += n
            self._mid_frame[p] = op
            if op.done < op.total:
                return
            del self._mid_frame[p]
            ops.pop(0)
        del send_q[p]

    def _on_readable(self, p: int, recv_q) -> None:
        s = self.socks[p]
        ops = recv_q.get(p)
        if not ops:
            self._peek_idle(p, s)
            return
        while ops:
            op = ops[0]
            try:
                if op.done < HEADER.size:
                    chunk = s.recv(HEADER.size - op.done)
                    if not chunk:
                        self._lost(p, "closed the connection")
                    op.hdr += chunk
                    op.done += len(chunk)
                    if op.done == HEADER.size:
                        self._check_header(p, bytes(op.hdr), op.header)
                    continue
                if len(op.view) == 0:
                    n = 0
                else:
                    n = s.recv_into(op.view[op.done - HEADER.size:])
                    if n == 0:
                        self._lost(p, "closed the connection mid-frame")
                op.done += n
            except BlockingIOError:
                return
            except PeerLost:
                raise
            except ConnectionError as exc:
                self._lost(p, f"reset the connection ({exc.strerror or exc})")
            if op.done == op.total:
                ops.pop(0)
            else:
                return
        del recv_q[p]

    def _peek_idle(self, p: int, s: socket.socket) -> None:
        """A peer we expect nothing from is readable: abort notice or EOF?"""
        try:
            raw = s.recv(HEADER.size, socket.MSG_PEEK)
        except BlockingIOError:
            return
        except ConnectionError:
            raw = b""
        if not raw:                       # the peer finished and left: fine
            self._eof.add(p)
            return
        if raw[:4] == ABORT and len(raw) == HEADER.size:
            s.recv(HEADER.size)
            self._check_header(p, raw, None)
        # data for a later round (or a partial header): leave it in the
        # kernel, and stop reading this peer until the next exchange
        self._quiet.add(p)

    def _check_header(self, p: int, got: bytes, want: bytes | None) -> None:
        magic, code, seq, nbytes = parse_header(
            got, max_frame_bytes=self.max_frame_bytes)
        if magic == ABORT:
            culprit = seq
            if code == b"T   " and culprit == self.rank:
                # blamed, but this rank is itself waiting further up a chain
                # of waits: name whom it waits for (it passes that on)
                culprit = self._waited_for(exclude=p)
                raise CollectiveTimeout(
                    f"rank {self.rank}: rank {p} gave up waiting for this "
                    f"rank, which is waiting for rank {culprit}",
                    peer=culprit, rank=self.rank)
            if code == b"T   ":
                raise CollectiveTimeout(
                    f"rank {self.rank}: rank {p} gave up waiting for rank "
                    f"{culprit}", peer=culprit, rank=self.rank)
            raise PeerLost(f"rank {self.rank}: rank {p} reports rank "
                           f"{culprit} lost", peer=culprit, rank=self.rank)
        if want is not None and got != want:
            _, wcode, wseq, wbytes = HEADER.unpack(want)
            raise ProtocolError(
                f"rank {self.rank}: unexpected frame from rank {p}: dtype "
                f"{code.strip().decode(errors='replace')} seq {seq} "
                f"{nbytes} bytes, expected dtype {wcode.strip().decode()} "
                f"seq {wseq} {wbytes} bytes")

    def _waited_for(self, exclude: int) -> int:
        """The first peer the current exchange still waits on (a receive
        first, else a send), other than ``exclude``; else ``exclude``."""
        order, send_q = getattr(self, "_waits", ([], {}))
        for op in order:
            if op.done < op.total and op.peer != exclude:
                return op.peer
        return min((q for q in send_q if q != exclude), default=exclude)

    def _lost(self, p: int, why: str) -> None:
        self._eof.add(p)
        raise PeerLost(f"rank {self.rank}: rank {p} {why}", peer=p,
                       rank=self.rank)

    def _raise_timeout(self, order: list[_Op], send_q) -> None:
        for op in order:
            if op.done < op.total:
                raise CollectiveTimeout(
                    f"rank {self.rank}: timed out waiting for rank {op.peer}"
                    f" ({max(0, op.done - HEADER.size)} of {len(op.view)} "
                    "bytes received)", peer=op.peer, rank=self.rank)
        peer = min(send_q)
        raise CollectiveTimeout(f"rank {self.rank}: timed out sending to rank "
                                f"{peer} (it is not reading)", peer=peer,
                                rank=self.rank)

    def _notify_abort(self, kind: int, culprit: int | None) -> None:
        """Best effort: tell every peer which rank this one gave up on.

        The blamed rank is told too: if it is alive but waiting on someone
        else (the real culprit is further up a chain), it must learn who is
        blamed now rather than see this rank's connection close and report a
        lost peer.
        """
        code = b"T   " if kind == ABORT_TIMEOUT else b"L   "
        frame = HEADER.pack(ABORT, code, culprit if culprit is not None else 0, 0)
        for p in list(self._mid_frame):
            self._finish_frame(p)
        for p, s in self.socks.items():
            if p in self._eof or p in self._mid_frame:
                continue
            try:
                s.send(frame)
            except OSError:
                pass

    def _finish_frame(self, p: int, limit_s: float = 0.5) -> None:
        """Send the rest of a frame left half-sent, so that the stream to
        ``p`` stays in step and an abort notice can follow it. Gives up
        after ``limit_s`` (the peer is not reading)."""
        op, s = self._mid_frame[p], self.socks[p]
        rest = (op.header[op.done:] if op.done < HEADER.size else b"",
                op.view[max(0, op.done - HEADER.size):])
        try:
            s.settimeout(limit_s)
            for part in rest:
                s.sendall(part)
            del self._mid_frame[p]
        except OSError:
            pass
        finally:
            s.setblocking(False)

    def _log(self, line: str) -> None:
        if self._trace:
            print(f"[rank {self.rank}] {line}", flush=True)


def _drain(socks: list[socket.socket], budget_s: float) -> None:
    """Read and discard what is queued on ``socks`` until each is quiet or at
    EOF, for at most ``budget_s``."""
    end = time.monotonic() + budget_s
    live = list(socks)
    while live and time.monotonic() < end:
        ready, _, _ = select.select(live, [], [], 0.02)
        if not ready:
            return
        for s in ready:
            try:
                if not s.recv(1 << 16):
                    live.remove(s)
            except BlockingIOError:
                pass
            except OSError:
                live.remove(s)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ProtocolError("connection closed during handshake")
        buf += chunk
    return bytes(buf)
