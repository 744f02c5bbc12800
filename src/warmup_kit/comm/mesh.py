"""The TCP mesh: one authenticated connection between every pair of ranks.

Rank r dials every lower rank and accepts every higher one. Both ends prove
they know the job's secret without sending it (an HMAC-SHA256 challenge and
response, both ways)::

    dialer   -> acceptor: "WKH2" | rank | size | nonce_d (16 bytes)
    acceptor -> dialer:   nonce_a | HMAC(secret, "A" nonce_d nonce_a ranks)
    dialer   -> acceptor: HMAC(secret, "D" nonce_a nonce_d ranks)

A connection that sends garbage, claims a rank that is not expected, fails
the proof or stays silent is dropped and logged (logger
``warmup_kit.comm``), and the acceptor goes on waiting for the real peers
until ``deadline``: a stranger on the machine can neither join the job nor
stall its start. The secret comes from the launcher (a fresh one per job)
or, for ranks started on several hosts, from ``WARMUP_KIT_SECRET`` (hex).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import selectors
import socket
import struct
import time

from warmup_kit.errors import CollectiveTimeout, ProtocolError

HELLO = struct.Struct("!4sII16s")
MAGIC = b"WKH2"
NONCE, MAC = 16, 32
SECRET_ENV = "WARMUP_KIT_SECRET"
log = logging.getLogger("warmup_kit.comm")


def job_secret(secret: bytes | str | None = None) -> bytes:
    """The job secret: ``secret`` if given, else ``$WARMUP_KIT_SECRET``.

    Raises:
        ValueError: neither is set, or the secret is shorter than 16 bytes.
    """
    if secret is None:
        secret = os.environ.get(SECRET_ENV)
        if secret is None:
            raise ValueError(f"a job secret is required: pass secret=..., or "
                             f"set {SECRET_ENV} (hex) on every rank; "
                             "warmup_kit.launch makes one per job")
    if isinstance(secret, str):
        try:
            secret = bytes.fromhex(secret)
        except ValueError:
            raise ValueError(f"{SECRET_ENV} must be hex") from None
    if len(secret) < 16:
        raise ValueError("the job secret must be at least 16 bytes")
    return bytes(secret)


def new_secret() -> bytes:
    """A fresh random job secret (32 bytes)."""
    return os.urandom(32)


def _mac(secret: bytes, role: bytes, n1: bytes, n2: bytes, a: int, b: int,
         size: int) -> bytes:
    msg = role + n1 + n2 + struct.pack("!III", a, b, size)
    return hmac.new(secret, msg, hashlib.sha256).digest()


def connect_mesh(rank: int, size: int, addresses, listener: socket.socket |
                 None, secret: bytes, deadline: float
                 ) -> dict[int, socket.socket]:
    """Blocking sockets to every other rank, keyed by rank."""
    socks: dict[int, socket.socket] = {}
    try:
        for peer in range(rank):
            socks[peer] = _dial(rank, size, peer, addresses[peer], secret,
                                deadline)
        if rank + 1 < size:
            socks.update(_accept(rank, size, listener, secret, deadline))
    except BaseException:
        for s in socks.values():
            s.close()
        raise
    return socks


def connect_star(rank: int, size: int, address, listener: socket.socket |
                 None, secret: bytes, deadline: float
                 ) -> dict[int, socket.socket]:
    """Like :func:`connect_mesh` but only rank 0 is connected to the others
    (a rendezvous: rank 0 accepts ``size - 1`` proven peers on
    ``listener``; every other rank dials ``address``, rank 0's)."""
    if rank == 0:
        return _accept(0, size, listener, secret, deadline) if size > 1 \
            else {}
    return {0: _dial(rank, size, 0, address, secret, deadline)}


def _dial(rank, size, peer, address, secret, deadline) -> socket.socket:
    while True:
        left = deadline - time.monotonic()
        try:
            s = socket.create_connection(address, timeout=max(0.05, min(
                left, 5)))
            break
        except OSError:
            if left <= 0:
                raise CollectiveTimeout(
                    f"rank {rank}: could not connect to rank {peer} at "
                    f"{address}", peer=peer, rank=rank) from None
            time.sleep(0.05)
    try:
        nonce_d = os.urandom(NONCE)
        s.settimeout(max(0.05, deadline - time.monotonic()))
        s.sendall(HELLO.pack(MAGIC, rank, size, nonce_d))
        reply = _recv_exact(s, NONCE + MAC)
        nonce_a = reply[:NONCE]
        if not hmac.compare_digest(reply[NONCE:], _mac(
                secret, b"A", nonce_d, nonce_a, peer, rank, size)):
            raise ProtocolError(f"rank {rank}: the process at {address} is "
                                f"not rank {peer} of this job (it failed the "
                                "job-secret proof)")
        s.sendall(_mac(secret, b"D", nonce_a, nonce_d, rank, peer, size))
    except socket.timeout:
        s.close()
        raise CollectiveTimeout(f"rank {rank}: rank {peer} at {address} did "
                                "not answer the hello", peer=peer,
                                rank=rank) from None
    except BaseException:
        s.close()
        raise
    return s


class _Pending:
    """An accepted connection that has not proven itself yet."""

    def __init__(self, sock: socket.socket, addr) -> None:
        self.sock, self.addr = sock, addr
        self.buf = bytearray()
        self.want = HELLO.size
        self.peer: int | None = None
        self.nonces = (b"", b"")


def _accept(rank, size, listener, secret, deadline
            ) -> dict[int, socket.socket]:
    expected = set(range(rank + 1, size))
    out: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ, None)
    try:
        while expected:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CollectiveTimeout(
                    f"rank {rank}: ranks {sorted(expected)} never connected",
                    peer=min(expected), rank=rank)
            for key, _ in sel.select(min(left, 0.5)):
                if key.data is None:
                    try:
                        s, addr = listener.accept()
                    except BlockingIOError:
                        continue
                    s.setblocking(False)
                    sel.register(s, selectors.EVENT_READ, _Pending(s, addr))
                    continue
                p: _Pending = key.data
                why = _step(p, rank, size, expected, secret)
                if why is None:
                    continue
                sel.unregister(p.sock)
                if why == "ok":
                    p.sock.setblocking(True)
                    out[p.peer] = p.sock
                    expected.discard(p.peer)
                else:
                    log.warning("rank %d: dropped a connection from %s: %s",
                                rank, p.addr, why)
                    p.sock.close()
    except BaseException:
        for s in out.values():
            s.close()
        raise
    finally:
        for key in list(sel.get_map().values()):
            if key.data is not None:
                log.warning("rank %d: dropped a silent connection from %s",
                            rank, key.data.addr)
                key.data.sock.close()
        sel.close()
    return out


def _step(p: _Pending, rank, size, expected, secret) -> str | None:
    """Read what arrived; None while incomplete, "ok", or why to drop."""
    try:
        chunk = p.sock.recv(p.want - len(p.buf))
    except BlockingIOError:
        return None
    except OSError as exc:
        return f"connection error ({exc})"
    if not chunk:
        return "closed before proving itself"
    p.buf += chunk
    if len(p.buf) < p.want:
        return None
    if p.peer is None:
        magic, peer, their_size, nonce_d = HELLO.unpack(bytes(p.buf))
        if magic != MAGIC:
            return f"not a warmup_kit hello ({bytes(p.buf[:4])!r})"
        if their_size != size or peer not in expected:
            return f"claims rank {peer} of {their_size}, not expected"
        nonce_a = os.urandom(NONCE)
        try:
            p.sock.sendall(nonce_a + _mac(secret, b"A", nonce_d, nonce_a,
                                          rank, peer, size))
        except OSError as exc:
            return f"connection error ({exc})"
        p.peer, p.nonces = peer, (nonce_d, nonce_a)
        p.buf, p.want = bytearray(), MAC
        return None
    nonce_d, nonce_a = p.nonces
    if not hmac.compare_digest(bytes(p.buf), _mac(
            secret, b"D", nonce_a, nonce_d, p.peer, rank, size)):
        return f"failed the job-secret proof (claimed rank {p.peer})"
    return "ok"


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ProtocolError("connection closed during the hello")
        buf += chunk
    return bytes(buf)
