"""Sockets trust no stranger: a process that connects while a job starts
is dropped and logged, and the job goes on with its real ranks.

Two real ranks (threads of this process, each building its SocketComm) and a
stranger that reaches rank 0's listener first, in every way a stranger
might: garbage, silence, a hello that claims rank 1 but cannot prove the job
secret, a hello that claims a rank that does not exist, a hang-up.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

from warmup_kit.comm import SocketComm

SECRET = os.urandom(32)


def _hello(rank, size=2):
    return struct.pack("!4sII16s", b"WKH2", rank, size, os.urandom(16))


def garbage(s):
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")


def silence(s):
    pass


def impostor(s):
    """Claims to be rank 1 and answers the challenge with a guess."""
    s.sendall(_hello(1))
    s.recv(48)
    s.sendall(hmac.new(b"wrong" * 8, b"guess", hashlib.sha256).digest())


def no_such_rank(s):
    s.sendall(_hello(7, size=8))


def hang_up(s):
    s.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stranger", [garbage, silence, impostor,
                                      no_such_rank, hang_up])
def test_a_stranger_at_set_up_is_dropped_and_the_job_goes_on(stranger,
                                                             caplog):
    caplog.set_level(logging.WARNING, logger="warmup_kit.comm")
    listener = socket.create_server(("127.0.0.1", 0), backlog=4)
    addresses = [listener.getsockname(), ("127.0.0.1", 0)]
    comms, errors = {}, []

    def rank(r):
        try:
            comms[r] = SocketComm(r, 2, addresses,
                                  listener=listener if r == 0 else None,
                                  secret=SECRET, connect_timeout=20)
        except BaseException as exc:  # noqa: BLE001 - to the test
            errors.append(exc)

    r0 = threading.Thread(target=rank, args=(0,))
    r0.start()
    bad = socket.create_connection(addresses[0], timeout=5)
    try:
        stranger(bad)
        time.sleep(0.3)                 # the stranger is served first
        r1 = threading.Thread(target=rank, args=(1,))
        r1.start()
        r0.join(25)
        r1.join(25)
    finally:
        bad.close()
        listener.close()
    assert not errors, errors
    try:
        got = np.zeros(4)
        t = threading.Thread(target=comms[1].send,
                             args=(np.arange(4.0), 0), kwargs={"tag": 3})
        t.start()
        comms[0].recv(got, 1, tag=3, timeout=10)
        t.join(10)
        assert got.tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        for c in comms.values():
            c.close()
    assert any("dropped a" in m for m in caplog.messages), caplog.messages


def test_a_secret_is_required_where_there_are_peers(monkeypatch):
    monkeypatch.delenv("WARMUP_KIT_SECRET", raising=False)
    with pytest.raises(ValueError, match="job secret is required"):
        SocketComm(0, 2, [("127.0.0.1", 0), ("127.0.0.1", 0)])
    SocketComm(0, 1, [("127.0.0.1", 0)]).close()   # no peer to prove it to


def test_the_secret_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("WARMUP_KIT_SECRET", SECRET.hex())
    SocketComm(0, 1, [("127.0.0.1", 0)]).close()
    SocketComm(0, 1, [("127.0.0.1", 0)], secret=SECRET).close()
    monkeypatch.setenv("WARMUP_KIT_SECRET", "not hex")
    with pytest.raises(ValueError, match="hex"):
        SocketComm(0, 2, [("127.0.0.1", 0), ("127.0.0.1", 0)])
