"""TCP transport from scratch: the original lab's "ring all-reduce over sockets".

Every pair of ranks shares one authenticated TCP connection
(:mod:`warmup_kit.comm.mesh`; 127.0.0.1 by default) carrying frames of
:mod:`warmup_kit.comm.frames`. Sends and receives are queued per peer and
progressed together by one ``selectors`` loop, so ``isend``/``irecv`` never
block and a round in which a rank both sends and receives cannot deadlock.
Payload bytes are counted as they are written to and read from the kernel.

When a wait passes its deadline the rank does not simply blame the peer it
waited for: it tells every peer which rank it gave up on, listens for a
moment to what the others report, and names the end of the chain of waits
(:mod:`warmup_kit.comm.blame`), so every surviving rank names the rank that
really stopped. A peer whose connection drops while this rank expects data
from it is :class:`~warmup_kit.PeerLost`, and the others are told.
"""
from __future__ import annotations

import os
import select
import selectors
import socket
import time
from collections import deque
from typing import Sequence

import numpy as np

from warmup_kit.comm.base import Comm, Request, TAG_MAX, split_order
from warmup_kit.comm.deadlines import deadline_after
from warmup_kit.comm.blame import culprit, describe
from warmup_kit.comm.frames import DATA, DEFAULT_MAX_FRAME, HEADER, LOST, \
    NOTICE, WAITING, data_header, notice, parse_header
from warmup_kit.comm.mesh import connect_mesh, job_secret
from warmup_kit.errors import CollectiveTimeout, PeerLost, ProtocolError

H = HEADER.size
SOCKET_BUFFER = 4 << 20
#: after giving up, how long a rank listens for the others' reports
BLAME_S = float(os.environ.get("WARMUP_KIT_BLAME_S", 1.0))
_SPLIT_TAG = TAG_MAX - 1


class _Op:
    """One queued frame: a send (``header`` to write) or a receive
    (``header`` is the one expected)."""

    __slots__ = ("peer", "view", "header", "done", "hdr", "finished")

    def __init__(self, peer: int, view: memoryview, header: bytes,
                 recv: bool) -> None:
        self.peer, self.view, self.header = peer, view, header
        self.done = 0                 # bytes of header + payload moved
        self.hdr = bytearray() if recv else None
        self.finished = False

    @property
    def total(self) -> int:
        return H + len(self.view)


class SockRequest(Request):
    __slots__ = ("comm", "op")

    def __init__(self, comm: "SocketComm", op: _Op) -> None:
        self.comm, self.op = comm, op

    def test(self) -> bool:
        if not self.op.finished:
            self.comm.progress(0)
        return self.op.finished

    def wait(self, timeout: float | None = None) -> None:
        self.comm.waitall([self], deadline_after(timeout))


class SocketComm(Comm):
    """A rank of a full TCP mesh.

    Args:
        rank: this rank.
        size: number of ranks.
        addresses: ``(host, port)`` every rank listens on, by rank.
        listener: an already bound, listening socket for ``addresses[rank]``
            (the launcher passes it so that no port is ever raced for).
        secret: the job secret (bytes or hex); default
            ``$WARMUP_KIT_SECRET`` (a single rank, with no peer to
            authenticate, needs none).
        connect_timeout: seconds to build the mesh.
        max_frame_bytes: the largest frame a peer may announce.
    """

    def __init__(self, rank: int, size: int,
                 addresses: Sequence[tuple[str, int]], *,
                 listener: socket.socket | None = None,
                 secret: bytes | str | None = None,
                 connect_timeout: float = 30.0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME) -> None:
        super().__init__()
        if not 0 <= rank < size or len(addresses) != size:
            raise ValueError(f"rank {rank} / size {size} / "
                             f"{len(addresses)} addresses do not agree")
        self.rank, self.size = rank, size
        self.addresses = [tuple(a) for a in addresses]
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout = connect_timeout
        self._secret = job_secret(secret) if size > 1 or secret else b""
        self._send_seq = [0] * size
        self._recv_seq = [0] * size
        self._sendq: dict[int, deque] = {}
        self._recvq: dict[int, deque] = {}
        self._quiet: set[int] = set()   # data for a later receive waits
        self._eof: set[int] = set()
        self._waits: dict[int, int] = {}  # rank -> rank it gave up on
        self._gone: set[int] = set()   # ranks known lost
        self._broken: BaseException | None = None
        self._current: list[_Op] = []     # what waitall is waiting for
        self.socks: dict[int, socket.socket] = {}
        self._sel = selectors.DefaultSelector()
        self._ev: dict[int, int] = {}
        deadline = deadline_after(connect_timeout)
        own = listener
        if own is None and size > 1:
            own = socket.create_server(self.addresses[rank], backlog=size)
        try:
            socks = connect_mesh(rank, size, self.addresses, own,
                                 self._secret, deadline)
        finally:
            if own is not None and listener is None:
                own.close()
        for p, s in socks.items():
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                s.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            s.setblocking(False)
            self.socks[p] = s
            self._sendq[p], self._recvq[p] = deque(), deque()

    # ------------------------------------------------------ point-to-point
    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> SockRequest:
        self.check_message(buf, dest, tag)
        self._usable()
        op = _Op(dest, memoryview(buf).cast("B"),
                 data_header(self._send_seq[dest], tag, buf.nbytes), False)
        self._send_seq[dest] += 1
        q = self._sendq[dest]
        q.append(op)
        if len(q) == 1:
            self._guard(self._write, dest)
        return SockRequest(self, op)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0
              ) -> SockRequest:
        self.check_message(buf, source, tag)
        self._usable()
        op = _Op(source, memoryview(buf).cast("B"),
                 data_header(self._recv_seq[source], tag, buf.nbytes), True)
        self._recv_seq[source] += 1
        q = self._recvq[source]
        q.append(op)
        self._quiet.discard(source)
        if len(q) == 1:
            self._guard(self._read, source)
        return SockRequest(self, op)

    def waitall(self, reqs: Sequence[SockRequest],
                deadline: float | None = None) -> None:
        ops = [r.op for r in reqs]
        self._current = ops
        try:
            if self._waits:           # a peer gave up while we were away
                self._join_failure()
            while not all(op.finished for op in ops):
                wait = None
                if deadline is not None:
                    wait = deadline - time.monotonic()
                    if wait <= 0:
                        self._give_up(self._waiting_for(ops))
                self._guard(self.progress, wait)
        finally:
            self._current = []

    def progress(self, timeout: float | None) -> None:
        """Move whatever can move; block up to ``timeout`` for an event."""
        for p in self.socks:
            self._watch(p)
        for key, mask in self._sel.select(timeout):
            p = key.data
            if mask & selectors.EVENT_READ:
                self._read(p)
            if mask & selectors.EVENT_WRITE and self._sendq[p]:
                self._write(p)

    # ----------------------------------------------------------- the engine
    def _usable(self) -> None:
        if self._broken is not None:
            raise RuntimeError(f"rank {self.rank}: communicator unusable "
                               f"after {self._broken!r}")

    def _guard(self, fn, *args) -> None:
        """Run a progress step; a lost peer is announced before raising."""
        try:
            fn(*args)
        except PeerLost as exc:
            if self._broken is None:
                self._broken = exc
                # pass it on even when another rank told us (it is then in
                # _gone already): a peer that has not heard from that rank
                # yet would otherwise see our connection close first and
                # blame us
                self._gone.add(exc.peer)
                self._broadcast(notice(LOST, exc.peer))
            raise
        except (CollectiveTimeout, ProtocolError) as exc:
            self._broken = self._broken or exc
            raise

    def _watch(self, p: int) -> None:
        ev = 0
        if p not in self._eof and (self._recvq[p] or p not in self._quiet):
            ev |= selectors.EVENT_READ
        if self._sendq[p]:
            ev |= selectors.EVENT_WRITE
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

    def _write(self, p: int) -> None:
        q, s = self._sendq[p], self.socks[p]
        while q:
            op = q[0]
            try:
                if op.done < H:
                    n = s.send(op.header[op.done:])
                else:
                    n = s.send(op.view[op.done - H:])
                    self.stats.bytes_sent += n
                    self.stats.sent_to[p] += n
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._eof.add(p)
                raise PeerLost(f"rank {self.rank}: lost rank {p} while "
                               f"sending ({exc.strerror or exc})", peer=p,
                               rank=self.rank) from None
            op.done += n
            if op.done < op.total:
                return
            q.popleft()
            op.finished = True
            self.stats.messages_sent += 1

    def _read(self, p: int) -> None:
        q, s = self._recvq[p], self.socks[p]
        while True:
            if not q:
                self._peek_idle(p, s)
                return
            op = q[0]
            try:
                if op.done < H:
                    chunk = s.recv(H - op.done)
                    if not chunk:
                        self._lost(p, "closed the connection")
                    op.hdr += chunk
                    op.done += len(chunk)
                    if op.done == H:
                        self._check_header(p, op)
                    continue
                if op.done < op.total:
                    n = s.recv_into(op.view[op.done - H:])
                    if n == 0:
                        self._lost(p, "closed the connection mid-frame")
                    op.done += n
                    self.stats.bytes_received += n
                    self.stats.received_from[p] += n
            except (BlockingIOError, InterruptedError):
                return
            except (PeerLost, CollectiveTimeout):
                raise
            except ConnectionError as exc:
                self._lost(p, f"reset the connection ({exc.strerror or exc})")
            if op.done < op.total:
                return
            q.popleft()
            op.finished = True
            self.stats.messages_received += 1

    def _check_header(self, p: int, op: _Op) -> None:
        got = bytes(op.hdr)
        magic, seq, tag, nbytes = parse_header(
            got, max_frame_bytes=self.max_frame_bytes, peer=p)
        if magic == NOTICE:
            op.hdr, op.done = bytearray(), 0    # the data is still to come
            self._on_notice(p, seq, tag)
            return
        if got != op.header:
            _, wseq, wtag, wbytes = HEADER.unpack(op.header)
            raise ProtocolError(
                f"rank {self.rank}: unexpected frame from rank {p}: seq {seq}"
                f" tag {tag} {nbytes} bytes, expected seq {wseq} tag {wtag} "
                f"{wbytes} bytes (the ranks called different collectives, or "
                "with different lengths, dtypes or ops)")

    def _peek_idle(self, p: int, s: socket.socket) -> None:
        """A peer we expect nothing from is readable: a notice, or EOF?"""
        try:
            raw = s.recv(H, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionError:
            raw = b""
        if not raw:                   # the peer finished and left: fine
            self._eof.add(p)
            return
        if raw[:4] == NOTICE[:len(raw[:4])]:
            if len(raw) < H:
                return                # the rest of the notice is coming
            s.recv(H)
            _, kind, who, _ = parse_header(raw, peer=p)
            self._on_notice(p, kind, who)
            return
        # data for a later receive: leave it in the kernel, and stop
        # reading this peer until a receive is posted
        self._quiet.add(p)

    def _lost(self, p: int, why: str) -> None:
        self._eof.add(p)
        raise PeerLost(f"rank {self.rank}: rank {p} {why}", peer=p,
                       rank=self.rank)

    # ------------------------------------------------- failure: whom to name
    def _on_notice(self, p: int, kind: int, who: int) -> None:
        if kind == LOST:
            self._gone.add(who)
            raise PeerLost(f"rank {self.rank}: rank {p} reports rank {who} "
                           "lost", peer=who, rank=self.rank)
        self._waits[p] = who
        if self._current:
            self._join_failure()

    def _join_failure(self) -> None:
        """A peer gave up: report what this rank waits for, then name."""
        self._give_up(self._waiting_for(self._current))

    def _waiting_for(self, ops: list[_Op]) -> int | None:
        """The first peer ``ops`` still wait on: a receive first."""
        for recv in (True, False):
            for op in ops:
                if not op.finished and (op.hdr is not None) == recv:
                    return op.peer
        return None

    def _give_up(self, target: int | None):
        """Announce the wait, listen to the others' reports for up to
        :data:`BLAME_S`, and raise CollectiveTimeout naming the rank at the
        end of the chain of waits."""
        if target is not None:
            self._waits[self.rank] = target
            self._broadcast(notice(WAITING, target))
        self._linger()
        start = target if target is not None else min(
            self._waits.values(), default=self.rank)
        who, chain = culprit(start, self._waits, self._gone)
        what = ("waiting for" if target is not None else
                "in a collective that another rank gave up on; the wait "
                "ends at")
        exc = CollectiveTimeout(
            f"rank {self.rank}: timed out {what} rank {start}"
            f"{describe(chain)}" + (" (lost)" if who in self._gone else ""),
            peer=who, rank=self.rank)
        self._broken = exc
        raise exc

    def _broadcast(self, frame: bytes) -> None:
        """Best effort: send ``frame`` to every peer still connected,
        finishing first a frame left half-sent (or the stream is out of
        step); a peer that does not read within 0.5 s is skipped."""
        for p, s in self.socks.items():
            if p in self._eof:
                continue
            q = self._sendq[p]
            rest = b""
            if q and 0 < q[0].done < q[0].total:
                op = q[0]
                rest = (op.header[op.done:] if op.done < H else b"") + \
                    bytes(op.view[max(0, op.done - H):])
            try:
                s.settimeout(0.5)
                s.sendall(rest + frame)
                if q and rest:
                    q.popleft()
            except OSError:
                pass
            finally:
                s.setblocking(False)

    def _linger(self) -> None:
        """Read every connection for the others' notices, skipping data."""
        skip: dict[int, list] = {}            # peer -> [header bytes, payload]
        for p, q in self._recvq.items():
            if q and q[0].done:
                op = q[0]
                skip[p] = ([bytearray(op.hdr), 0] if op.done < H
                           else [None, op.total - op.done])
        end = time.monotonic() + BLAME_S
        live = [p for p in self.socks if p not in self._eof]
        while live and time.monotonic() < end:
            heard = set(self._waits) | self._gone | {self.rank}
            if len(heard) >= self.size - 1:
                return                        # all but (at most) one spoke
            ready, _, _ = select.select([self.socks[p] for p in live], [], [],
                                        max(0.0, end - time.monotonic()))
            for s in ready:
                p = next(q for q in live if self.socks[q] is s)
                if not self._skim(p, s, skip.setdefault(p, [bytearray(), 0])):
                    live.remove(p)

    def _skim(self, p: int, s: socket.socket, st: list) -> bool:
        """Read what ``p`` sent, keeping notices; False at EOF."""
        try:
            data = s.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        if not data:
            self._eof.add(p)
            if p not in self._waits:
                self._gone.add(p)
            return False
        view = memoryview(data)
        while view:
            if st[0] is None:                  # in a payload
                n = min(st[1], len(view))
                st[1] -= n
                view = view[n:]
                if st[1] == 0:
                    st[0] = bytearray()
                continue
            take = min(H - len(st[0]), len(view))
            st[0] += view[:take]
            view = view[take:]
            if len(st[0]) < H:
                continue
            magic, kind, who, nbytes = HEADER.unpack(bytes(st[0]))
            if magic == NOTICE:
                if kind == LOST:
                    self._gone.add(who)
                elif kind == WAITING:
                    self._waits[p] = who
                st[0] = bytearray()
            elif magic == DATA and nbytes:
                st[0], st[1] = None, nbytes
            else:
                st[0] = bytearray()
        return True

    # ----------------------------------------------------------- the group
    def split(self, color: int, key: int = 0) -> "SocketComm | None":
        host = self.addresses[self.rank][0]
        lst = socket.create_server((host, 0), backlog=max(self.size, 1))
        try:
            mine = np.array([color, key, lst.getsockname()[1]], np.int64)
            every = np.empty((self.size, 3), np.int64)
            every[self.rank] = mine
            self.exchange([(p, mine) for p in range(self.size)
                           if p != self.rank],
                          [(p, every[p]) for p in range(self.size)
                           if p != self.rank], tag=_SPLIT_TAG,
                          deadline=deadline_after(self.connect_timeout))
            members = split_order([(int(c), int(k), r) for r, (c, k, _)
                                   in enumerate(every)], self.rank)
            if members is None:
                return None
            addresses = [(self.addresses[m][0], int(every[m, 2]))
                         for m in members]
            return SocketComm(members.index(self.rank), len(members),
                              addresses, listener=lst, secret=self._secret,
                              connect_timeout=self.connect_timeout,
                              max_frame_bytes=self.max_frame_bytes)
        finally:
            lst.close()

    def close(self, drain_s: float = 0.2) -> None:
        """Close every connection gracefully.

        A socket closed with unread bytes in its receive queue makes the
        kernel reset the connection (RST), and a reset throws away what the
        peer had received but not yet read: frames this rank sent before
        leaving would be lost, and a peer would blame this rank instead of
        the real culprit. So: send FIN first, discard what has already
        arrived (for at most ``drain_s``), then close.
        """
        self.stop_stream()
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
