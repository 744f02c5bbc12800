"""The TCP transport's wire: frame headers, and a raw peer that speaks (or
garbles) the protocol.

The raw peer is written from the protocol's description in
warmup_kit/comm/mesh.py and frames.py, not with the package's own hello
code, so these tests also pin the protocol itself.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time

import numpy as np
import pytest

import warmup_kit as wk
from warmup_kit.comm import SocketComm
from warmup_kit.comm.frames import (DATA, DEFAULT_MAX_FRAME, HEADER, LOST,
                                    NOTICE, WAITING, parse_header)

SECRET = b"s" * 32


def header(magic=DATA, seq=0, tag=0, nbytes=8) -> bytes:
    return HEADER.pack(magic, seq, tag, nbytes)


def test_header_layout_is_fixed():
    """Magic, sequence number, tag, payload length: 20 bytes, network byte
    order, so ranks on different hosts agree."""
    assert HEADER.size == 20
    raw = header(seq=1, tag=7, nbytes=2)
    assert raw[:4] == DATA and struct.unpack("!II", raw[4:12]) == (1, 7)
    assert struct.unpack("!Q", raw[12:20]) == (2,)


def test_parse_header_accepts_good_frames():
    assert parse_header(header(seq=5, tag=3, nbytes=80)) == (DATA, 5, 3, 80)
    assert parse_header(header(NOTICE, WAITING, 2, 0))[:3] == \
        (NOTICE, WAITING, 2)
    assert parse_header(header(NOTICE, LOST, 1, 0))[1] == LOST


@pytest.mark.parametrize("raw,match", [
    (b"", "short header"),
    (header()[:-1], "short header"),
    (header() + b"x", "short header"),
    (header(magic=b"HTTP"), "bad frame magic"),
    (b"\x00" * HEADER.size, "bad frame magic"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n"[:HEADER.size], "bad frame magic"),
    (header(nbytes=DEFAULT_MAX_FRAME + 1), "oversized"),
    (header(nbytes=2 ** 64 - 1), "oversized"),
    (header(NOTICE, 9, 0, 0), "malformed notice"),
    (header(NOTICE, WAITING, 0, 8), "malformed notice"),
])
def test_parse_header_rejects_malformed_and_oversized(raw, match):
    with pytest.raises(wk.ProtocolError, match=match):
        parse_header(raw)


def test_an_oversized_frame_names_the_rank_it_came_from():
    parse_header(header(nbytes=1024), max_frame_bytes=1024)
    with pytest.raises(wk.ProtocolError, match="oversized frame from rank 3"):
        parse_header(header(nbytes=1025), max_frame_bytes=1024, peer=3)


# ------------------------------------------------------------ a raw peer
def _mac(role, n1, n2, a, b, size, secret=SECRET):
    return hmac.new(secret, role + n1 + n2 + struct.pack("!III", a, b, size),
                    hashlib.sha256).digest()


class RawRank0:
    """A raw TCP peer posing as rank 0 of a two-rank job: it answers the
    hello of rank 1 (which dials it) with the job secret it is given."""

    def __init__(self, secret=SECRET, answer=True):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.addr = self.listener.getsockname()
        self.secret, self.answer, self.conn = secret, answer, None

    def accept(self) -> None:
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(10)
        hello = self._exact(4 + 4 + 4 + 16)
        magic, rank, size, nonce_d = struct.unpack("!4sII16s", hello)
        assert (magic, rank, size) == (b"WKH2", 1, 2)
        if not self.answer:
            return
        nonce_a = os.urandom(16)
        self.conn.sendall(nonce_a + _mac(b"A", nonce_d, nonce_a, 0, 1, 2,
                                         self.secret))
        proof = self._exact(32)
        assert proof == _mac(b"D", nonce_a, nonce_d, 1, 0, 2, self.secret)

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.conn.recv(n - len(buf))
            assert chunk, "closed"
            buf += chunk
        return buf

    def close(self):
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()


def _rank1(fake: RawRank0, **kw) -> SocketComm:
    """Rank 1 dialing the raw rank 0 (in a thread: the dial blocks until
    the raw peer has answered)."""
    import threading
    out = {}

    def dial():
        try:
            out["comm"] = SocketComm(1, 2, [fake.addr, ("127.0.0.1", 0)],
                                     secret=SECRET, **kw)
        except BaseException as exc:  # noqa: BLE001 - to the test
            out["error"] = exc
    t = threading.Thread(target=dial)
    t.start()
    fake.accept()
    t.join(15)
    if "error" in out:
        raise out["error"]
    return out["comm"]


@pytest.fixture
def fake_peer():
    """(raw rank 0, a SocketComm as rank 1 connected to it)."""
    fake = RawRank0()
    comm = _rank1(fake, connect_timeout=10, max_frame_bytes=1 << 20)
    yield fake, comm
    comm.close()
    fake.close()


@pytest.mark.parametrize("garbage,match", [
    (b"\xde\xad\xbe\xef" * 5, "bad frame magic"),
    (header(nbytes=(1 << 20) + 8), "oversized frame from rank 0"),
    (header(nbytes=16), "unexpected frame"),          # wrong length
    (header(tag=5), "unexpected frame"),              # another call's tag
    (header(seq=3), "unexpected frame"),              # out of sequence
])
def test_socket_comm_rejects_a_bad_frame_from_a_raw_peer(fake_peer, garbage,
                                                         match):
    fake, comm = fake_peer
    fake.conn.sendall(garbage + b"\x00" * 8)
    buf = np.zeros(1)
    with pytest.raises(wk.ProtocolError, match=match):
        comm.recv(buf, 0, timeout=5)
    assert not buf.any(), "payload bytes were read after a bad header"
    # the communicator refuses to go on after a protocol error
    with pytest.raises(RuntimeError, match="unusable"):
        comm.recv(buf, 0, timeout=5)


def test_allreduce_over_a_garbage_peer_raises_protocol_error(fake_peer):
    fake, comm = fake_peer
    fake.conn.sendall(b"\x00" * 64)
    with pytest.raises(wk.ProtocolError):
        wk.allreduce(np.ones(8), comm, timeout=5)


def test_a_good_frame_from_a_raw_peer_is_accepted(fake_peer):
    """The control case: the same peer, speaking the protocol, works; the
    payload bytes are counted as they are read."""
    fake, comm = fake_peer
    fake.conn.sendall(header(seq=0, tag=4, nbytes=8)
                      + np.float64(42.0).tobytes())
    buf = np.zeros(1)
    comm.recv(buf, 0, tag=4, timeout=5)
    assert buf[0] == 42.0
    assert comm.stats.bytes_received == 8 and comm.stats.received_from[0] == 8


def test_a_peer_closing_mid_header_is_peer_lost(fake_peer):
    fake, comm = fake_peer
    fake.conn.sendall(header()[:7])
    fake.conn.close()
    with pytest.raises(wk.PeerLost) as info:
        comm.recv(np.zeros(1), 0, timeout=5)
    assert info.value.peer == 0


def test_a_silent_raw_peer_is_a_timeout_naming_it(fake_peer):
    fake, comm = fake_peer
    t0 = time.monotonic()
    with pytest.raises(wk.CollectiveTimeout) as info:
        comm.recv(np.zeros(1), 0, timeout=0.5)
    assert info.value.peer == 0 and "rank 0" in str(info.value)
    assert time.monotonic() - t0 < 0.5 + 2 + 1


def test_a_timed_out_rank_tells_its_peers_whom_it_waited_for(fake_peer):
    fake, comm = fake_peer
    with pytest.raises(wk.CollectiveTimeout):
        comm.recv(np.zeros(1), 0, timeout=0.2)
    got = b""
    while len(got) < HEADER.size:
        got += fake.conn.recv(HEADER.size - len(got))
    assert parse_header(got)[:3] == (NOTICE, WAITING, 0)


def test_a_dial_to_a_silent_listener_honours_connect_timeout():
    fake = RawRank0(answer=False)
    t0 = time.monotonic()
    try:
        with pytest.raises(wk.CollectiveTimeout, match="did not answer"):
            _rank1(fake, connect_timeout=1.0)
    finally:
        fake.close()
    assert time.monotonic() - t0 < 1.0 + 3


def test_a_dial_to_a_listener_with_another_secret_is_refused():
    """The dialer checks the acceptor's proof too: a process that took a
    rank's port cannot pose as that rank."""
    import threading
    fake = RawRank0(secret=b"x" * 32)
    out = {}

    def dial():
        try:
            SocketComm(1, 2, [fake.addr, ("127.0.0.1", 0)], secret=SECRET,
                       connect_timeout=5)
        except BaseException as exc:  # noqa: BLE001 - to the test
            out["error"] = exc
    t = threading.Thread(target=dial)
    t.start()
    try:
        with pytest.raises(AssertionError, match="closed"):
            fake.accept()            # the dialer hangs up instead of proving
        t.join(10)
    finally:
        fake.close()
    assert isinstance(out.get("error"), wk.ProtocolError), out
    assert "failed the job-secret proof" in str(out["error"])
