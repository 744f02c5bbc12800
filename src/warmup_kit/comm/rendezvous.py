"""Ranks on several hosts: the rendezvous and each rank's communicator.

``python -m warmup_kit.run`` (:mod:`warmup_kit.run`) starts one *agent* per
node; this module is what the agents and their ranks share.

**Rendezvous.** The agent of node 0 listens on ``MASTER_ADDR:MASTER_PORT``;
every other agent dials it. Each connection is proven both ways with the
job secret (:func:`warmup_kit.comm.mesh.connect_star`, the mesh's HMAC
challenge, under a key derived from the secret for this purpose, so a
rendezvous proof can never pass for a rank's). Every agent then sends the
addresses its ranks listen on (sockets it has bound already on its node's
address, so no port is raced for); node 0 numbers the ranks node by node
(global rank = ranks of the nodes before + local rank) and sends the full
table back. The connections stay open while the job runs: an agent whose
rank fails, or that is lost, makes node 0 tell every other agent to stop.

**The secret** is never sent over the network. Every node must be given the
same one out of band in ``WARMUP_KIT_SECRET`` (hex, >= 16 bytes):
:meth:`warmup_kit.cluster.Cluster.run_job` makes a fresh one per job and
puts it in each node's environment; across real hosts, the scheduler or
``ssh``'s environment does. With one node and no secret, the agent makes
one. The proof authenticates who connects; what follows on the connection
is neither encrypted nor signed (as for the ranks' own mesh).

**Ranks** get the table in their environment (``WARMUP_KIT_*``, plus
torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``...) and their bound
listening socket as an inherited file descriptor; :func:`comm_from_env`
builds a :class:`~warmup_kit.comm.SocketComm` over all ranks, or with
``transport="hybrid"`` a :class:`~warmup_kit.comm.hybrid.HybridComm`
(shared memory among the ranks of a node, from segments the agent made).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import time
from typing import Any

import numpy as np

from warmup_kit.comm import shm
from warmup_kit.comm.base import Comm
from warmup_kit.comm.hybrid import HybridComm
from warmup_kit.comm.mesh import connect_star, job_secret
from warmup_kit.comm.sockets import SocketComm
from warmup_kit.errors import ProtocolError

RUN_ENV = "WARMUP_KIT_RUN"          # json: what the agent tells a rank
TRANSPORTS = ("sockets", "hybrid")
_LEN = struct.Struct("!I")
MAX_MESSAGE = 1 << 20


def rendezvous_key(secret: bytes) -> bytes:
    """The key agents prove themselves with (derived from the job secret)."""
    return hmac.new(secret, b"warmup_kit rendezvous v1",
                    hashlib.sha256).digest()


def send_msg(sock: socket.socket, obj: Any) -> None:
    """One length-prefixed JSON message."""
    raw = json.dumps(obj, default=_plain).encode()
    sock.sendall(_LEN.pack(len(raw)) + raw)


def recv_msg(sock: socket.socket) -> Any:
    """The next message (blocking, under the socket's timeout)."""
    n = _LEN.unpack(_exact(sock, _LEN.size))[0]
    if n > MAX_MESSAGE:
        raise ProtocolError(f"rendezvous message of {n} bytes: too large")
    return json.loads(_exact(sock, n))


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("rendezvous peer closed the connection")
        buf += chunk
    return bytes(buf)


def local_address(master_addr: str) -> str:
    """The address this host uses to reach ``master_addr`` (the kernel's
    choice of source address; no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master_addr, 9))
        return s.getsockname()[0]


def rendezvous(node_rank: int, nnodes: int, master: tuple[str, int],
               secret: bytes, addresses: list, deadline: float,
               listener: socket.socket | None = None
               ) -> tuple[dict, dict[int, socket.socket]]:
    """Meet the other agents; returns the job table and the open
    connections (node 0: to every other node; others: to node 0).

    The table: ``addresses`` ([host, port] per global rank), ``nodes`` (the
    node rank of every global rank) and ``first`` (each node's first global
    rank).
    """
    key = rendezvous_key(secret)
    socks = connect_star(node_rank, nnodes, master, listener, key, deadline)
    try:
        if node_rank:
            s = socks[0]
            s.settimeout(max(1.0, deadline - _now()))
            send_msg(s, {"node_rank": node_rank, "addresses": addresses})
            table = recv_msg(s)
        else:
            per = {0: addresses}
            for peer, s in socks.items():
                s.settimeout(max(1.0, deadline - _now()))
                msg = recv_msg(s)
                if msg.get("node_rank") != peer:
                    raise ProtocolError(f"node {peer} sent {msg!r}")
                per[peer] = msg["addresses"]
            table = {"addresses": [], "nodes": [], "first": []}
            for n in range(nnodes):
                table["first"].append(len(table["addresses"]))
                table["addresses"] += per[n]
                table["nodes"] += [n] * len(per[n])
            for s in socks.values():
                send_msg(s, table)
    except BaseException:
        for s in socks.values():
            s.close()
        raise
    return table, socks


def _now() -> float:
    return time.monotonic()


# ---------------------------------------------------------------- the ranks
def launched_by_run() -> bool:
    """True in a rank started by ``python -m warmup_kit.run``."""
    return RUN_ENV in os.environ


def run_info() -> dict:
    """What this rank's agent told it: rank, world, local_rank, node_rank,
    nodes, addresses, transport."""
    raw = os.environ.get(RUN_ENV)
    if raw is None:
        raise RuntimeError(f"{RUN_ENV} is not set: start this script with "
                           "python -m warmup_kit.run")
    return json.loads(raw)


def comm_from_env(timeout: float = 60.0) -> Comm:
    """This rank's communicator, from what its agent put in the
    environment (see the module docstring)."""
    info = run_info()
    rank, size = info["rank"], info["world"]
    addresses = [tuple(a) for a in info["addresses"]]
    intra = None
    if info["transport"] == "hybrid" and info["shm"] is not None:
        # before joining the mesh: see the unlink below
        intra = attach_node_segments(info["shm"], info["local_rank"])
    listener = socket.socket(fileno=info["listen_fd"])
    try:
        inter = SocketComm(rank, size, addresses, listener=listener,
                           secret=job_secret(None) if size > 1 else None,
                           connect_timeout=timeout)
    finally:
        listener.close()
    if info["transport"] == "sockets":
        return inter
    comm = HybridComm(rank, size, info["nodes"], intra, inter)
    if intra is not None and info["local_rank"] == 0:
        # every other rank of this node attached the segments before it
        # dialed this one (the node's lowest rank), and the mesh is
        # complete: the names are no longer needed
        unlink_node_segments(info["shm"])
    return comm


def make_node_segments(k: int, data_bytes: int = 64 << 10) -> dict:
    """Shared segments for ``k`` ranks of one node (made by the agent)."""
    made = []
    try:
        made.append(shm.Segment.create(shm.ctrl_bytes(k)))
        for _ in range(k):
            made.append(shm.Segment.create(max(data_bytes, shm.ALIGN)))
    except BaseException:
        for s in made:
            s.unlink()
        raise
    names = [s.name for s in made]
    for s in made:
        s.buf.close()
    return {"ctrl": names[0], "data": names[1:]}


def attach_node_segments(info: dict, local_rank: int) -> shm.ShmComm:
    ctrl = shm.Segment.attach(info["ctrl"])
    segs = [shm.Segment.attach(n) for n in info["data"]]
    data = [np.ndarray((len(s.buf),), np.uint8, s.buf) for s in segs]
    return shm.ShmComm(local_rank, len(data), ctrl, data,
                       shm.Arena(data[local_rank]))


def unlink_node_segments(info: dict | None) -> None:
    if info:
        for name in [info["ctrl"], *info["data"]]:
            _unlink(name)


def _unlink(name: str) -> None:
    try:
        os.unlink(f"{shm.Segment.DIR}/{name}")
    except FileNotFoundError:
        pass


def _plain(o):
    """numpy scalars as Python numbers (for json)."""
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def gather_json(comm: Comm, obj: Any, root: int = 0,
                timeout: float = 60.0) -> list | None:
    """Every rank's ``obj`` (JSON-able) at ``root``, in rank order (None
    elsewhere), counted as control bytes, not payload."""
    with comm.control():
        if comm.rank != root:
            raw = np.frombuffer(json.dumps(obj, default=_plain).encode(), np.uint8).copy()
            comm.send(np.array([raw.size], np.int64), root, timeout=timeout)
            comm.send(raw, root, timeout=timeout)
            return None
        out = []
        for r in range(comm.size):
            if r == root:
                out.append(obj)
                continue
            n = np.empty(1, np.int64)
            comm.recv(n, r, timeout=timeout)
            raw = np.empty(int(n[0]), np.uint8)
            comm.recv(raw, r, timeout=timeout)
            out.append(json.loads(raw.tobytes()))
        return out
