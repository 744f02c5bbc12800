"""Run N ranks on this host without MPI: ``launch(fn, world, transport=...)``.

What tests, notebooks and ``labs/lab01.py --world N`` use to get real ranks:
N forked processes, each calling ``fn(comm, *args)`` with a
:class:`~warmup_kit.comm.SocketComm` (``transport="sockets"``: TCP on
loopback, a fresh job secret per launch) or a
:class:`~warmup_kit.comm.shm.ShmComm` (``transport="shm"``: shared memory).
The parent only brokers addresses and collects results over pipes; rank to
rank traffic goes over the transport.

No rank outlives the launch: ranks still running at the timeout, or after
another rank failed (past ``grace``), are killed and reaped; and each rank
asks the kernel to kill it if the parent dies (``PR_SET_PDEATHSIG`` on
Linux, a watchdog thread elsewhere), so a parent killed by SIGTERM, SIGHUP
or SIGKILL leaves nothing behind.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable, Sequence

from warmup_kit import proc as proc_state
from warmup_kit.comm import shm
from warmup_kit.comm.mesh import new_secret
from warmup_kit.comm.sockets import SocketComm
from warmup_kit.errors import CollectiveTimeout, PeerLost, RankDied

TRANSPORTS = ("sockets", "shm")
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid`` ends."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # pragma: no cover
            pass
        else:
            if os.getppid() != parent_pid:     # it died before prctl
                os._exit(1)
            return

    def watch() -> None:  # pragma: no cover - not Linux
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _report(conn, kind: str, value, tb: str = "") -> None:
    if kind == "ok":
        conn.send(("ok", value))
        return
    try:
        # the parent must be able to rebuild it: an exception class whose
        # __init__ takes other arguments than its args pickles fine but
        # fails to unpickle there, which would lose the rank and the cause
        pickle.loads(pickle.dumps(value))
        conn.send(("error", value, tb))
    except Exception:  # noqa: BLE001 - unpicklable exception
        conn.send(("error", RuntimeError(f"{type(value).__name__}: {value}"),
                   tb))


def _rank_main(rank: int, world: int, transport: str, setup, conn, fn, args,
               parent_pid: int) -> None:
    die_with_parent(parent_pid)
    comm = None
    try:
        if transport == "sockets":
            host, secret, timeout = setup
            listener = socket.create_server((host, 0), backlog=max(world, 1))
            conn.send(("port", listener.getsockname()[1]))
            addresses = conn.recv()
            comm = SocketComm(rank, world, addresses, listener=listener,
                              secret=secret, connect_timeout=timeout)
            listener.close()
        else:
            comm = shm.comm_from_segments(rank, world, setup)
        _report(conn, "ok", fn(comm, *args))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        _report(conn, "error", exc, traceback.format_exc())
    finally:
        if comm is not None:
            comm.close()
        conn.close()


def launch(fn: Callable[..., Any], world: int = 4, *, args: Sequence = (),
           transport: str = "sockets", timeout: float = 60.0,
           host: str = "127.0.0.1", shm_bytes: int = 64 << 20,
           return_exceptions: bool = False, grace: float = 3.0,
           pending: Callable[[int], bool] | None = None,
           max_grace: float = 10.0) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``world`` ranks; results in rank order.

    Args:
        fn: called once per rank with a connected communicator.
        world: number of ranks (processes).
        args: extra positional arguments for ``fn``.
        transport: ``"sockets"`` (TCP on ``host``) or ``"shm"`` (shared
            memory; Linux).
        timeout: seconds for the whole run; ranks still running then are
            killed and a :class:`TimeoutError` names them.
        host: the address socket ranks listen on.
        shm_bytes: size of each rank's shared data segment (``"shm"``).
        return_exceptions: put each failed rank's exception in the list
            (like :func:`asyncio.gather`) instead of raising.
        grace: after a first failure, how long the other ranks get to report
            before they are killed (a stopped rank, which cannot report until
            it is continued, is not waited for).
        pending: ``pending(rank)`` is true while a rank that has not
            reported is still sure to (it is inside a collective whose wait
            its own watchdog or timeout ends): after ``grace``, such ranks
            are waited for, up to ``max_grace`` after the first failure. On
            a loaded machine a rank's own verdict can take longer than the
            grace, and killing it then loses its report.
        max_grace: the bound on that wait (seconds after the first failure).

    Raises:
        The first failing rank's own exception (the root cause is preferred
        over the timeouts and lost peers it causes in others), with
        ``.rank`` set and a note naming the rank. No process is left behind.
    """
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world must be an int >= 1, got {world!r}")
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got "
                         f"{transport!r}")
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods()
                         else "spawn")
    segs: list = []
    pipes, procs = [], []
    try:
        if transport == "shm":
            segs = shm.make_segments(world, shm_bytes)
            setup: Any = segs
        else:
            setup = (host, new_secret(), timeout)
        for r in range(world):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_rank_main, name=f"warmup-rank-{r}",
                            args=(r, world, transport, setup, child, fn,
                                  tuple(args), os.getpid()), daemon=True)
            p.start()
            child.close()
            pipes.append(parent)
            procs.append(p)
        deadline = time.monotonic() + timeout
        if transport == "shm":
            shm.unlink(segs)           # mapped everywhere: names not needed
        else:
            addresses = []
            for r, pipe in enumerate(pipes):
                msg = _recv(pipe, procs[r], r, deadline)
                if msg[0] != "port":
                    _raise_outcome({r: msg}, world, return_exceptions)
                addresses.append((host, msg[1]))
            for pipe in pipes:
                pipe.send(addresses)
        outcomes = _collect(pipes, procs, deadline, grace, pending,
                            max(grace, max_grace))
        return _raise_outcome(outcomes, world, return_exceptions)
    finally:
        _reap(procs, pipes)
        shm.unlink(segs)
        for s in segs:
            s.close()


def _reap(procs, pipes) -> None:
    """Kill the ranks still running, join them all, close the pipes."""
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=5)
    for pipe in pipes:
        pipe.close()


def _recv(pipe, proc, rank: int, deadline: float):
    while not pipe.poll(0.05):
        if not proc.is_alive() and not pipe.poll(0):
            return ("error", RankDied(f"rank {rank} died during start-up "
                                      f"(exit code {proc.exitcode})",
                                      rank=rank, exitcode=proc.exitcode), "")
        if time.monotonic() > deadline:
            return ("error", TimeoutError(f"rank {rank} did not start"), "")
    try:
        return pipe.recv()
    except EOFError:
        return ("error", RankDied(f"rank {rank} died", rank=rank,
                                  exitcode=proc.exitcode), "")


def _collect(pipes, procs, deadline: float, grace: float,
             pending: Callable[[int], bool] | None = None,
             max_grace: float = 0.0) -> dict:
    outcomes: dict[int, tuple] = {}
    first_failure = None
    while len(outcomes) < len(pipes):
        now = time.monotonic()
        limit = deadline if first_failure is None else min(deadline,
                                                           first_failure + grace)
        if now > limit and (
                first_failure is None or pending is None
                or now > min(deadline, first_failure + max_grace)
                or not any(_pending(pending, r)
                           for r in range(len(pipes)) if r not in outcomes)):
            break
        if first_failure is not None and all(
                proc_state.stopped(procs[r].pid)
                for r in range(len(pipes)) if r not in outcomes):
            break                      # only stopped ranks are left
        ready = mp.connection.wait([pipes[r] for r in range(len(pipes))
                                    if r not in outcomes], timeout=0.05)
        for pipe in ready:
            r = pipes.index(pipe)
            try:
                outcomes[r] = pipe.recv()
            except EOFError:
                procs[r].join(timeout=1)
                outcomes[r] = ("error", RankDied(
                    f"rank {r} died without reporting (exit code "
                    f"{procs[r].exitcode})", rank=r,
                    exitcode=procs[r].exitcode), "")
            if outcomes[r][0] == "error" and first_failure is None:
                first_failure = time.monotonic()
    for r in range(len(pipes)):
        if r not in outcomes:
            what = ("still running at the launch timeout"
                    if first_failure is None else
                    "stopped (SIGSTOP), killed after another rank failed"
                    if proc_state.stopped(procs[r].pid) else
                    "killed after another rank failed")
            outcomes[r] = ("error", TimeoutError(f"rank {r} {what}"), "")
    return outcomes


def _pending(pending: Callable[[int], bool], rank: int) -> bool:
    """``pending(rank)``, false if it fails: a broken callback must not
    keep the launcher from ending its ranks."""
    try:
        return bool(pending(rank))
    except Exception:                   # noqa: BLE001 - any failure
        return False


def _raise_outcome(outcomes: dict, world: int, return_exceptions: bool):
    results, errors = [], []
    for r in range(world):
        kind, *rest = outcomes.get(r, ("error", RuntimeError("no outcome"), ""))
        if kind == "ok":
            results.append(rest[0])
            continue
        exc, tb = rest[0], rest[1] if len(rest) > 1 else ""
        try:
            exc.rank = r
        except AttributeError:
            pass
        exc.add_note(f"raised on rank {r} of {world}")
        if tb:
            exc.add_note(f"rank {r} traceback:\n{tb}")
        results.append(exc)
        errors.append((r, exc))
    if not errors or return_exceptions:
        return results

    def symptom(item) -> int:
        _, e = item
        if isinstance(e, (CollectiveTimeout, PeerLost)):
            return 2
        if type(e) is TimeoutError:
            return 3
        return 0 if not isinstance(e, RankDied) else 1
    r, exc = min(errors, key=lambda it: (symptom(it), it[0]))
    raise exc
