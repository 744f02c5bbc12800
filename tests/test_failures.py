"""Failures turn into exceptions that name a rank, never into hangs.

* a rank that skips a collective: every other rank raises CollectiveTimeout
  naming a culprit within timeout + 2 s (sockets and MPI);
* a killed socket rank: the others raise PeerLost naming it;
* launch() re-raises a rank's exception with the rank named and leaves no
  process behind;
* malformed or oversized frame headers are rejected with ProtocolError.
"""
from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
import multiprocessing

import numpy as np
import pytest

import warmup_kit as wk
from conftest import MPI_SCRIPTS, mpi_run, requires_mpi
from warmup_kit.comm import SocketComm
from warmup_kit.comm.sockets import (ABORT, DEFAULT_MAX_FRAME, HEADER, HELLO,
                                     HELLO_MAGIC, MAGIC, parse_header)
from warmup_kit.errors import RankDied

TIMEOUT_S = 1.0
SLACK_S = 2.0                 # the bound: within timeout + 2 s


# ------------------------------------------------ rank functions (picklable)
def skip_one(comm, culprit, timeout, algorithm, handshake, warmup, done):
    """Every rank but ``culprit`` calls allreduce; the culprit stays alive
    but never calls, until the others are through (``done``, a
    multiprocessing barrier inherited through fork) or past the deadline."""
    x = np.arange(10, dtype=np.float64)
    for _ in range(warmup):
        wk.allreduce(x, comm, algorithm=algorithm, timeout=30)
    if comm.rank == culprit:
        _wait(done, timeout + SLACK_S + 1)
        return ("skipped",)
    t0 = time.monotonic()
    try:
        wk.allreduce(x, comm, algorithm=algorithm, timeout=timeout,
                     handshake=handshake)
        out = ("returned", time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - the result under test
        out = (exc, time.monotonic() - t0)
    _wait(done, timeout + SLACK_S + 1)
    return out


def _wait(barrier, timeout):
    try:
        barrier.wait(timeout)
    except threading.BrokenBarrierError:
        pass


def kill_one(comm, culprit, algorithm, handshake, nbytes):
    """The culprit SIGKILLs itself instead of calling allreduce.

    The healthy first call is inside the ``try`` too: a rank that finished it
    early may already have sent the culprit frames of the second call, and a
    process killed with unread data makes its kernel reset the connection
    (RST), which discards what a slower rank had not yet read of the first
    call. That rank then loses the culprit during the first call, and must
    name it all the same.
    """
    x = np.ones(nbytes // 8)
    t0 = time.monotonic()
    try:
        wk.allreduce(x, comm, algorithm=algorithm, timeout=30)   # healthy
        if comm.rank == culprit:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        wk.allreduce(x, comm, algorithm=algorithm, timeout=20,
                     handshake=handshake)
    except Exception as exc:  # noqa: BLE001 - the result under test
        return (exc, time.monotonic() - t0)
    return ("returned", time.monotonic() - t0)


class Boom(ValueError):
    pass


class TwoArgError(Exception):
    """Pickles, but cannot be rebuilt from its args alone."""

    def __init__(self, what, where):
        super().__init__(f"{what} at {where}")


def raise_on(comm, culprit, exc_kind):
    if comm.rank == culprit:
        if exc_kind == "two-arg":
            raise TwoArgError("bad thing", "step 3")
        raise Boom(f"boom from rank {comm.rank}")
    # the others are inside a collective when the culprit fails
    return wk.allreduce(np.ones(4), comm, timeout=20).tolist()


def hang_on(comm, culprit):
    if comm.rank == culprit:
        time.sleep(120)
    return comm.rank


# ------------------------------------------------------------- skip: sockets
def _barrier(n):
    # launch() forks its ranks by default, so they inherit the barrier
    return multiprocessing.get_context("fork").Barrier(n)


def _check_skip(outcomes, culprit, timeout, named_exactly=True):
    assert outcomes[culprit] == ("skipped",)
    for r, out in enumerate(outcomes):
        if r == culprit:
            continue
        exc, elapsed = out
        assert isinstance(exc, wk.CollectiveTimeout), \
            f"rank {r} got {exc!r}, not CollectiveTimeout"
        assert isinstance(exc, TimeoutError)
        assert elapsed <= timeout + SLACK_S, f"rank {r} took {elapsed:.2f}s"
        assert isinstance(exc.peer, int) and 0 <= exc.peer < len(outcomes)
        assert exc.peer != r, f"rank {r} blames itself"
        assert f"rank {exc.peer}" in str(exc), str(exc)
        if named_exactly:
            assert exc.peer == culprit, f"rank {r}: {exc}"


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit,algorithm,warmup", [
    (2, 1, "ring", 0),
    (3, 0, "tree", 1),
    (4, 3, "recursive_doubling", 0),
    (5, 2, "ring", 2),
])
def test_skipped_call_times_out_naming_the_culprit_sockets(
        n, culprit, algorithm, warmup, no_leftover_processes):
    """With the default handshake every rank waits on the culprit first."""
    outcomes = wk.launch(skip_one, n, args=(culprit, TIMEOUT_S, algorithm,
                                            True, warmup, _barrier(n)),
                         timeout=40)
    _check_skip(outcomes, culprit, TIMEOUT_S)


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit,algorithm", [
    (4, 2, "ring"), (4, 2, "tree"), (5, 0, "rabenseifner"),
])
def test_skipped_call_without_handshake_still_times_out_everywhere(
        n, culprit, algorithm, no_leftover_processes):
    """Inside a schedule most ranks wait on someone who waits on the culprit:
    they all still raise CollectiveTimeout in time, each naming a rank in
    its chain of waits (abort notices pass the blame along; never itself)."""
    outcomes = wk.launch(skip_one, n, args=(culprit, TIMEOUT_S, algorithm,
                                            False, 0, _barrier(n)), timeout=40)
    _check_skip(outcomes, culprit, TIMEOUT_S, named_exactly=False)


# ----------------------------------------------------------------- skip: MPI
@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit,algorithm,handshake,warmup", [
    (2, 0, "ring", 1, 0),
    (3, 1, "tree", 1, 1),
    (4, 3, "ring", 1, 0),
    (4, 2, "ring", 0, 0),
    (5, 0, "rabenseifner", 0, 1),
])
def test_skipped_call_times_out_naming_a_culprit_mpi(n, culprit, algorithm,
                                                     handshake, warmup):
    run = mpi_run(MPI_SCRIPTS / "failures.py", n,
                  [culprit, TIMEOUT_S, algorithm, handshake, warmup],
                  timeout=45)
    assert run.returncode == 0, run.describe()
    result = run.json()
    assert result["ranks"] == n
    for r, out in enumerate(result["outcomes"]):
        assert out["rank"] == r
        if r == culprit:
            assert out["kind"] == "skipped"
            continue
        assert out["kind"] == "CollectiveTimeout" and out["is_timeout"], out
        assert out["elapsed_s"] <= TIMEOUT_S + SLACK_S, out
        peer = out["peer"]
        assert isinstance(peer, int) and 0 <= peer < n and peer != r, out
        assert f"rank {peer}" in out["message"], out
        if handshake:
            assert peer == culprit, out


# ------------------------------------------------------------ killed: sockets
@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit,algorithm,handshake,nbytes", [
    (2, 1, "ring", True, 800),
    (3, 0, "tree", True, 800),
    (4, 3, "ring", False, 8 << 10),
    (4, 1, "naive", False, 8 << 10),
    (5, 2, "double_tree", True, 8 << 10),
    (4, 1, "naive", False, 8 << 20),
])
def test_killed_rank_raises_peer_lost_naming_it(n, culprit, algorithm,
                                                handshake, nbytes,
                                                no_leftover_processes):
    """Every other rank raises PeerLost naming the dead rank. With frames
    larger than the socket buffers (8 MiB), a rank that gives up while
    half-way through sending a frame to another cannot pass a notice on that
    connection: the receiver sees it close and names it instead. Then every
    rank still raises PeerLost, and the dead rank is named by some."""
    big = nbytes > 1 << 20
    outcomes = wk.launch(kill_one, n, args=(culprit, algorithm, handshake,
                                            nbytes),
                         timeout=40, return_exceptions=True)
    died = outcomes[culprit]
    assert isinstance(died, RankDied), died
    assert died.rank == culprit and died.exitcode == -signal.SIGKILL
    for r, out in enumerate(outcomes):
        if r == culprit:
            continue
        exc, elapsed = out
        assert isinstance(exc, wk.PeerLost), f"rank {r} got {exc!r}"
        assert isinstance(exc, ConnectionError)
        assert f"rank {exc.peer}" in str(exc) and exc.peer != r
        if not big:
            assert exc.peer == culprit, f"rank {r}: {exc}"
        assert elapsed < 10, f"rank {r} took {elapsed:.1f}s to notice"
    named = [out[0].peer for r, out in enumerate(outcomes) if r != culprit]
    assert culprit in named


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_raises_rank_died_for_a_killed_rank(no_leftover_processes):
    with pytest.raises(RankDied) as info:
        wk.launch(kill_one, 3, args=(1, "ring", True, 800), timeout=40)
    assert info.value.rank == 1
    assert "rank 1" in str(info.value)


# ------------------------------------------------------------------- launch
@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit", [(1, 0), (3, 2), (4, 0)])
def test_launch_reraises_the_root_cause_with_the_rank_named(
        n, culprit, no_leftover_processes):
    with pytest.raises(Boom, match=f"boom from rank {culprit}") as info:
        wk.launch(raise_on, n, args=(culprit, "boom"), timeout=40)
    exc = info.value
    assert exc.rank == culprit
    notes = "\n".join(getattr(exc, "__notes__", []))
    assert f"raised on rank {culprit} of {n}" in notes
    assert "Traceback" in notes and "raise_on" in notes


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_reports_an_exception_that_cannot_be_rebuilt(
        no_leftover_processes):
    with pytest.raises(Exception) as info:
        wk.launch(raise_on, 3, args=(1, "two-arg"), timeout=40)
    exc = info.value
    assert "TwoArgError" in str(exc) and "bad thing at step 3" in str(exc)
    assert getattr(exc, "rank", None) == 1


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_return_exceptions_gives_every_rank_outcome(
        no_leftover_processes):
    outcomes = wk.launch(raise_on, 3, args=(1, "boom"), timeout=40,
                         return_exceptions=True)
    assert isinstance(outcomes[1], Boom)
    for r in (0, 2):
        # the others were inside the collective when rank 1 gave up
        assert isinstance(outcomes[r], (wk.PeerLost, wk.CollectiveTimeout)), \
            outcomes[r]
        assert outcomes[r].peer == 1


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_timeout_kills_a_hung_rank(no_leftover_processes):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="rank 2"):
        wk.launch(hang_on, 3, args=(2,), timeout=2.0)
    assert time.monotonic() - t0 < 2.0 + 8


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_returns_results_in_rank_order(no_leftover_processes):
    assert wk.launch(hang_on, 4, args=(-1,), timeout=30) == [0, 1, 2, 3]


@pytest.mark.parametrize("world", [0, -1, 1.5, "2"])
def test_launch_rejects_a_bad_world(world):
    with pytest.raises(ValueError, match="world"):
        wk.launch(hang_on, world, args=(-1,))


# ------------------------------------------------------------ frame headers
def header(magic=MAGIC, code=b"<f8 ", seq=0, nbytes=8) -> bytes:
    return HEADER.pack(magic, code, seq, nbytes)


def test_parse_header_accepts_a_good_frame():
    assert parse_header(header(seq=5, nbytes=80)) == (MAGIC, b"<f8 ", 5, 80)
    assert parse_header(header(magic=ABORT, nbytes=0))[0] == ABORT


@pytest.mark.parametrize("raw,match", [
    (b"", "short header"),
    (header()[:-1], "short header"),
    (header() + b"x", "short header"),
    (header(magic=b"HTTP"), "bad frame magic"),
    (b"\x00" * HEADER.size, "bad frame magic"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n"[:HEADER.size], "bad frame magic"),
    (header(nbytes=DEFAULT_MAX_FRAME + 1), "oversized"),
    (header(nbytes=2 ** 64 - 1), "oversized"),
])
def test_parse_header_rejects_malformed_and_oversized(raw, match):
    with pytest.raises(wk.ProtocolError, match=match):
        parse_header(raw)


def test_parse_header_honours_a_smaller_limit():
    parse_header(header(nbytes=1024), max_frame_bytes=1024)
    with pytest.raises(wk.ProtocolError, match="oversized"):
        parse_header(header(nbytes=1025), max_frame_bytes=1024)


class FakeRank0:
    """A raw TCP peer posing as rank 0 of a two-rank SocketComm."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.addr = self.listener.getsockname()
        self.conn = None

    def accept(self) -> bytes:
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(10)
        hello = b""
        while len(hello) < HELLO.size:
            hello += self.conn.recv(HELLO.size - len(hello))
        return hello

    def close(self):
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()


@pytest.fixture
def fake_peer():
    """(fake rank 0, a SocketComm as rank 1 connected to it)."""
    fake = FakeRank0()
    comm = SocketComm(1, 2, [fake.addr, ("127.0.0.1", 0)],
                      connect_timeout=10, max_frame_bytes=1 << 20)
    hello = fake.accept()
    assert HELLO.unpack(hello) == (HELLO_MAGIC, 1, 2)
    yield fake, comm
    comm.close()
    fake.close()


@pytest.mark.parametrize("garbage,match", [
    (b"\xde\xad\xbe\xef" * 5, "bad frame magic"),
    (header(nbytes=(1 << 20) + 8), "oversized"),
    (header(nbytes=16), "unexpected frame"),          # wrong length
    (header(code=b"<i8 "), "unexpected frame"),       # wrong dtype
    (header(seq=3), "unexpected frame"),              # out of sequence
])
def test_socket_comm_rejects_a_bad_frame_from_a_raw_peer(fake_peer, garbage,
                                                         match):
    fake, comm = fake_peer
    fake.conn.sendall(garbage + b"\x00" * 8)
    buf = np.zeros(1)
    with pytest.raises(wk.ProtocolError, match=match):
        comm.exchange([], [(0, buf)], deadline=time.monotonic() + 5)
    assert not buf.any(), "payload bytes were read after a bad header"
    # the communicator refuses to go on after a protocol error
    with pytest.raises(RuntimeError, match="unusable"):
        comm.exchange([], [(0, buf)], deadline=time.monotonic() + 5)


def test_allreduce_over_a_garbage_peer_raises_protocol_error(fake_peer):
    fake, comm = fake_peer
    fake.conn.sendall(b"\x00" * 64)
    with pytest.raises(wk.ProtocolError):
        wk.allreduce(np.ones(8), comm, timeout=5)


def test_a_good_frame_from_a_raw_peer_is_accepted(fake_peer):
    """The control case: the same peer, speaking the protocol, works."""
    fake, comm = fake_peer
    fake.conn.sendall(header(seq=0, nbytes=8) + np.float64(42.0).tobytes())
    buf = np.zeros(1)
    comm.exchange([], [(0, buf)], deadline=time.monotonic() + 5)
    assert buf[0] == 42.0


def test_a_peer_closing_mid_header_is_peer_lost(fake_peer):
    fake, comm = fake_peer
    fake.conn.sendall(header()[:7])
    fake.conn.close()
    with pytest.raises(wk.PeerLost) as info:
        comm.exchange([], [(0, np.zeros(1))], deadline=time.monotonic() + 5)
    assert info.value.peer == 0


def test_a_silent_raw_peer_is_a_timeout_naming_it(fake_peer):
    fake, comm = fake_peer
    t0 = time.monotonic()
    with pytest.raises(wk.CollectiveTimeout) as info:
        comm.exchange([], [(0, np.zeros(1))], deadline=time.monotonic() + 0.5)
    assert info.value.peer == 0 and "rank 0" in str(info.value)
    assert time.monotonic() - t0 < 0.5 + SLACK_S


@pytest.mark.parametrize("hello", [
    b"\x00" * HELLO.size,                       # bad magic
    HELLO.pack(HELLO_MAGIC, 1, 7),              # wrong world size
    HELLO.pack(HELLO_MAGIC, 0, 2),              # claims the listener's rank
])
def test_bad_hello_is_rejected(hello):
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname(), timeout=5)
    try:
        client.sendall(hello)
        with pytest.raises(wk.ProtocolError, match="bad hello"):
            SocketComm(0, 2, [listener.getsockname(), ("127.0.0.1", 1)],
                       listener=listener, connect_timeout=5)
    finally:
        client.close()
        listener.close()


def test_header_layout_is_fixed():
    """Magic, dtype code, sequence number, payload length: 20 bytes,
    network byte order, so ranks on different hosts agree."""
    assert HEADER.size == 20
    raw = header(seq=1, nbytes=2)
    assert raw[:4] == MAGIC and struct.unpack("!I", raw[8:12]) == (1,)
    assert struct.unpack("!Q", raw[12:20]) == (2,)
