"""Run N socket ranks on this host, and MPI programs under the venv's mpiexec.

:func:`launch` is what tests, notebooks and ``labs/lab01.py --world N`` use to
get real ranks without MPI: N processes on loopback, each calling
``fn(comm, *args)`` with a :class:`~warmup_kit.comm.SocketComm`. The parent
only brokers the addresses and collects results (over multiprocessing pipes);
rank-to-rank traffic goes over the ranks' own TCP mesh.

:func:`run_mpi` runs a script or module under ``mpiexec`` as a subprocess and
returns the JSON object it prints, so a notebook can show a real MPI run.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from warmup_kit.errors import RankDied
from warmup_kit.comm.sockets import SocketComm

#: environment that makes oversubscribed MPICH ranks yield the CPU
MPICH_YIELD_ENV = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
                   "MPIR_CVAR_POLLS_BEFORE_YIELD": "100"}


def _rank_main(rank: int, size: int, host: str, conn, fn, args,
               connect_timeout: float) -> None:
    try:
        listener = socket.create_server((host, 0), backlog=max(size, 1))
        conn.send(("port", listener.getsockname()[1]))
        addresses = conn.recv()
        with SocketComm(rank, size, addresses, listener=listener,
                        connect_timeout=connect_timeout) as comm:
            listener.close()
            result = fn(comm, *args)
        conn.send(("ok", result))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        tb = traceback.format_exc()
        try:
            # the parent must be able to rebuild it: an exception class whose
            # __init__ takes other arguments than its args pickles fine but
            # fails to unpickle there, which would lose the rank and the cause
            pickle.loads(pickle.dumps(exc))
            conn.send(("error", exc, tb))
        except Exception:  # noqa: BLE001 - unpicklable exception
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}"),
                       tb))
    finally:
        conn.close()


def _context(start_method: str | None):
    if start_method is None:
        start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    return mp.get_context(start_method)


def launch(fn: Callable[..., Any], world: int = 4, *, args: Sequence = (),
           timeout: float = 60.0, host: str = "127.0.0.1",
           return_exceptions: bool = False, start_method: str | None = None,
           grace: float = 3.0) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``world`` socket ranks; results in rank order.

    Args:
        fn: called once per rank with a connected SocketComm.
        world: number of ranks (processes).
        args: extra positional arguments for ``fn``.
        timeout: seconds for the whole run; ranks still running then are
            killed and :class:`~warmup_kit.CollectiveTimeout`-like
            :class:`TimeoutError` is raised naming them.
        return_exceptions: put each failed rank's exception in the list
            (like :func:`asyncio.gather`) instead of raising.
        start_method: multiprocessing start method (default: fork where
            available, so functions defined in a notebook work).
        grace: after a first failure, how long the other ranks get to report
            before they are killed.

    Raises:
        The first failing rank's own exception (the root cause is preferred
        over the timeouts and lost peers it causes in others), with
        ``.rank`` set and a note naming the rank. No process is left behind.
    """
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be an int >= 1, got {world!r}")
    ctx = _context(start_method)
    pipes, procs = [], []
    try:
        for r in range(world):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_rank_main, name=f"warmup-rank-{r}",
                            args=(r, world, host, child, fn, tuple(args),
                                  timeout), daemon=True)
            p.start()
            child.close()
            pipes.append(parent)
            procs.append(p)
        deadline = time.monotonic() + timeout
        addresses = []
        for r, pipe in enumerate(pipes):
            msg = _recv(pipe, procs[r], r, deadline)
            if msg[0] != "port":
                _raise_outcome({r: msg}, world, return_exceptions)
            addresses.append((host, msg[1]))
        for pipe in pipes:
            pipe.send(addresses)
        outcomes = _collect(pipes, procs, deadline, grace)
        return _raise_outcome(outcomes, world, return_exceptions)
    finally:
        _reap(procs, pipes)


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


def _collect(pipes, procs, deadline: float, grace: float) -> dict:
    outcomes: dict[int, tuple] = {}
    first_failure = None
    while len(outcomes) < len(pipes):
        now = time.monotonic()
        limit = deadline if first_failure is None else min(deadline,
                                                           first_failure + grace)
        if now > limit:
            break
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
            what = ("killed after another rank failed" if first_failure
                    else "still running at the launch timeout")
            outcomes[r] = ("error", TimeoutError(f"rank {r} {what}"), "")
    return outcomes


def _raise_outcome(outcomes: dict, world: int, return_exceptions: bool):
    from warmup_kit.errors import CollectiveTimeout, PeerLost
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


# ----------------------------------------------------------------- mpiexec
def find_mpiexec() -> str:
    """The ``mpiexec`` beside this Python (the venv's, from the mpich wheel)."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise FileNotFoundError("mpiexec not found: run `make venv` (the "
                                "mpich wheel ships it)")
    return found


def mpi_command(target: str, n: int, args: Sequence[str] = ()) -> list[str]:
    """``mpiexec -n N python -m mpi4py TARGET ARGS`` (a script or -m module)."""
    if target.endswith(".py"):
        run = [target]
    else:
        run = ["-m", target]
    return [find_mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py",
            *run, *map(str, args)]


def run_mpi(target: str, n: int = 4, *, args: Sequence = (),
            timeout: float = 120.0, env: dict | None = None) -> dict:
    """Run a script/module under mpiexec; return the JSON object it prints.

    The program must print one JSON object on a line of its own (rank 0).
    The whole process group is killed if it runs past ``timeout``.
    """
    full_env = {**os.environ, **MPICH_YIELD_ENV, **(env or {})}
    proc = subprocess.Popen(mpi_command(target, n, args), env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"mpiexec -n {n} {target} ran past {timeout}s") \
            from None
    if proc.returncode != 0:
        raise RuntimeError(f"mpiexec -n {n} {target} failed "
                           f"({proc.returncode}):\n{err[-3000:]}")
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{target} printed no JSON line:\n{out[-2000:]}")
