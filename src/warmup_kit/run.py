"""``python -m warmup_kit.run``: start a job's ranks on this node and meet
the other nodes (a rendezvous like torchrun's).

    WARMUP_KIT_SECRET=<hex> python -m warmup_kit.run --nnodes 2 \\
        --node-rank 0 --nproc-per-node 2 --master-addr 10.77.0.1 \\
        --master-port 29400 labs/lab01.py --size 1M

on every node (node rank 0..nnodes-1; ``MASTER_ADDR``, ``MASTER_PORT``,
``NNODES``, ``NODE_RANK`` and ``NPROC_PER_NODE`` may be given instead).
Each rank is ``python script.py args`` with its listening socket already
bound to this node's address (``--local-addr``, default the address that
reaches the master), the job table in its environment, and
:func:`warmup_kit.comm.rendezvous.comm_from_env` to build its
communicator: ``--transport sockets`` (TCP between all ranks) or
``hybrid`` (shared memory inside a node, TCP across). How the agents meet,
and why every node must be given the same ``WARMUP_KIT_SECRET``: see
:mod:`warmup_kit.comm.rendezvous`.

The job ends when every rank has: the exit code is the worst rank's. A
rank that fails (or a node that is lost) stops the whole job, on every
node, after ``--grace`` seconds; ``--timeout`` bounds the whole run; ranks
die with their agent. An agent that gets SIGTERM, SIGINT or SIGHUP (what a
scheduler or a closed terminal sends) passes SIGTERM to its ranks, kills
those still running after ``--grace`` seconds, removes the node's
shared-memory segments and exits with 128 + the signal's number.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from warmup_kit import cliargs
from warmup_kit.comm.launch import die_with_parent
from warmup_kit.comm.mesh import SECRET_ENV, new_secret
from warmup_kit.comm.rendezvous import (
    RUN_ENV, TRANSPORTS, local_address, make_node_segments, recv_msg,
    rendezvous, send_msg, unlink_node_segments)


def _resolve(p: argparse.ArgumentParser, flag: str, host: str) -> None:
    """Refuse an address that does not resolve, before anything starts."""
    try:
        socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        p.error(f"{flag} {host!r} does not resolve ({exc})")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m warmup_kit.run",
        description="Start this node's ranks of a multi-node job and meet "
                    "the other nodes (a torchrun-like rendezvous).")

    def env(name, parse, default):
        return cliargs.env_default(name, parse, default, parser=p)
    p.add_argument("--nnodes", type=cliargs.positive_int,
                   default=env("NNODES", cliargs.positive_int, 1))
    p.add_argument("--node-rank", type=cliargs.non_negative_int,
                   default=env("NODE_RANK", cliargs.non_negative_int, 0))
    p.add_argument("--nproc-per-node", "-n", type=cliargs.positive_int,
                   default=env("NPROC_PER_NODE", cliargs.positive_int, 1))
    p.add_argument("--master-addr",
                   default=os.environ.get("MASTER_ADDR", "127.0.0.1"))
    p.add_argument("--master-port", type=cliargs.port,
                   default=env("MASTER_PORT", cliargs.port, 29400))
    p.add_argument("--local-addr", default=None,
                   help="address this node's ranks listen on (default: the "
                        "one that reaches the master)")
    p.add_argument("--transport", choices=TRANSPORTS, default="sockets")
    p.add_argument("--timeout", type=cliargs.positive_float, default=600.0,
                   help="seconds for the whole job")
    p.add_argument("--rdzv-timeout", type=cliargs.positive_float,
                   default=120.0, help="seconds for the nodes to meet")
    p.add_argument("--grace", type=cliargs.non_negative_float, default=3.0,
                   help="after a failure, seconds before the rest is killed")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if not 0 <= a.node_rank < a.nnodes:
        p.error(f"--node-rank must be in [0, {a.nnodes}) and --nnodes >= 1")
    raw = os.environ.get(SECRET_ENV)
    if raw is not None:
        try:
            a.secret = cliargs.hex_secret(raw)
        except argparse.ArgumentTypeError as exc:
            p.error(f"{SECRET_ENV}: {exc}")
    elif a.nnodes > 1:
        p.error(f"set {SECRET_ENV} (the same hex secret on every node; it "
                "is never sent over the network)")
    else:
        a.secret = None
    _resolve(p, "--master-addr", a.master_addr)
    if a.local_addr:
        _resolve(p, "--local-addr", a.local_addr)
    if not os.path.isfile(a.script):
        p.error(f"no script {a.script!r}")
    return a


def _say(args, msg: str) -> None:
    print(f"warmup_kit.run node {args.node_rank}: {msg}", file=sys.stderr,
          flush=True)


class _Signalled(BaseException):
    """A stop signal reached the agent (raised by its handler, so that the
    ``finally`` that kills the ranks and removes the segments runs)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: the stop signals received, and whether the cleanup has begun (a signal
#: then is only recorded: it must not cut the cleanup short)
_STATE: dict = {"got": [], "cleaning": False}


def _on_stop(signum, frame) -> None:
    _STATE["got"].append(signum)
    if len(_STATE["got"]) == 1 and not _STATE["cleaning"]:
        raise _Signalled(signum)


def main(argv=None) -> int:
    args = parse_args(argv)
    saved = {}
    if threading.current_thread() is threading.main_thread():
        _STATE.update(got=[], cleaning=False)
        for sig in _STOPS:
            if signal.getsignal(sig) not in (signal.SIG_IGN, None):
                saved[sig] = signal.signal(sig, _on_stop)
    try:
        rc = _main(args)
    except _Signalled:
        rc = None
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
    if _STATE["got"]:
        _say(args, f"stopped by {signal.Signals(_STATE['got'][0]).name}")
        return 128 + _STATE["got"][0]
    return rc


def _main(args) -> int:
    secret = args.secret or new_secret()
    host = args.local_addr or local_address(args.master_addr)
    listeners = [socket.create_server((host, 0),
                                      backlog=64) for _ in
                 range(args.nproc_per_node)]
    master = None
    segs = None
    procs: list[subprocess.Popen] = []
    peers: dict[int, socket.socket] = {}
    try:
        if args.node_rank == 0 and args.nnodes > 1:
            master = socket.create_server((args.master_addr,
                                           args.master_port), backlog=64)
        table, peers = rendezvous(
            args.node_rank, args.nnodes, (args.master_addr, args.master_port),
            secret, [[host, s.getsockname()[1]] for s in listeners],
            time.monotonic() + args.rdzv_timeout, master)
        if master is not None:
            master.close()
        first = table["first"][args.node_rank]
        world = len(table["addresses"])
        if args.transport == "hybrid" and args.nproc_per_node > 1:
            segs = make_node_segments(args.nproc_per_node)
        env = dict(os.environ, **{SECRET_ENV: secret.hex()})
        for i, lst in enumerate(listeners):
            info = {"rank": first + i, "world": world, "local_rank": i,
                    "node_rank": args.node_rank, "nodes": table["nodes"],
                    "addresses": table["addresses"], "listen_fd":
                    lst.fileno(), "transport": args.transport, "shm": segs}
            env_i = dict(env, **{
                RUN_ENV: json.dumps(info), "RANK": str(first + i),
                "WORLD_SIZE": str(world), "LOCAL_RANK": str(i),
                "LOCAL_WORLD_SIZE": str(args.nproc_per_node),
                "NODE_RANK": str(args.node_rank),
                "NNODES": str(args.nnodes),
                "MASTER_ADDR": args.master_addr,
                "MASTER_PORT": str(args.master_port)})
            procs.append(subprocess.Popen(
                [sys.executable, args.script, *args.args], env=env_i,
                pass_fds=[lst.fileno()],
                preexec_fn=lambda pid=os.getpid(): die_with_parent(pid)))
        for lst in listeners:
            lst.close()
        return _watch(args, procs, peers)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError, RuntimeError) as exc:
        _say(args, f"{type(exc).__name__}: {exc}")
        return 1
    except _Signalled:
        _STATE["cleaning"] = True
        _terminate(procs, args.grace)
        raise
    finally:
        _STATE["cleaning"] = True
        _kill(procs)
        for s in [*listeners, *peers.values()] + ([master] if master else []):
            s.close()
        unlink_node_segments(segs)


def _terminate(procs, grace: float) -> None:
    """SIGTERM to the ranks still running (a rank may save its state), and
    up to ``grace`` seconds for them to end."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    end = time.monotonic() + grace
    while any(p.poll() is None for p in procs) and time.monotonic() < end:
        time.sleep(0.02)


def _kill(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _watch(args, procs, peers: dict[int, socket.socket]) -> int:
    """Wait for the ranks; tell node 0 (or, on node 0, hear the others);
    stop everything on a failure, a lost node or the deadline."""
    deadline = time.monotonic() + args.timeout
    status: dict[int, int | None] = {n: None for n in range(args.nnodes)}
    stop_at = None             # when to kill our ranks (a failure was seen)
    reported = False
    is_master = args.node_rank == 0

    def stop(why: str) -> None:
        nonlocal stop_at
        if stop_at is None:
            _say(args, f"stopping the job: {why}")
            stop_at = time.monotonic() + args.grace
            if is_master:
                for s in peers.values():
                    _try_send(s, {"stop": why})

    while True:
        codes = [p.poll() for p in procs]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if bad and stop_at is None:
            stop(f"rank {bad[0][0]} of node {args.node_rank} exited with "
                 f"{bad[0][1]}")
        if stop_at is not None and time.monotonic() > stop_at:
            _kill(procs)
            codes = [p.poll() for p in procs]
        if time.monotonic() > deadline:
            stop(f"the job ran past --timeout {args.timeout:g} s")
            _kill(procs)
            codes = [124 if c is None else c for c in
                     (p.poll() for p in procs)]
        if all(c is not None for c in codes) and status[
                args.node_rank] is None:
            worst = max((128 - c if c < 0 else c for c in codes), default=0)
            status[args.node_rank] = worst
            if not is_master and not reported:
                _try_send(peers[0], {"rc": worst})
                reported = True
        if is_master and all(v is not None for v in status.values()):
            worst = max(status.values())
            for s in peers.values():
                _try_send(s, {"exit": worst})
            return worst
        socks = list(peers.values())
        ready = select.select(socks, [], [], 0.05)[0] if socks else (
            time.sleep(0.05) or [])
        for s in ready:
            n = next(k for k, v in peers.items() if v is s)
            try:
                s.settimeout(10)
                msg = recv_msg(s)
            except (OSError, ValueError, ConnectionError):
                del peers[n]
                if is_master:
                    status[n] = status[n] if status[n] is not None else 1
                    stop(f"lost node {n}")
                    continue
                stop("lost node 0")
                _kill(procs)
                return 1
            if "rc" in msg and is_master:
                status[n] = int(msg["rc"])
                if status[n]:
                    stop(f"node {n} failed (exit {status[n]})")
            elif "stop" in msg:
                stop(msg["stop"])
            elif "exit" in msg:
                return int(msg["exit"])


def _try_send(s: socket.socket, obj) -> None:
    try:
        s.settimeout(5)
        send_msg(s, obj)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
