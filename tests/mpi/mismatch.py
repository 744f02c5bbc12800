"""Collectives called with arguments that differ between ranks, in the
default mode (no ``WARMUP_KIT_DEBUG``): every rank must raise CallMismatch
naming the argument, promptly (long before the call's timeout), with no
payload moved, and a correct all-reduce must work afterwards.

In each case some ranks pass one value and the others another, spread so
that a mismatched rank may be one that would only send (a broadcast's root)
or receive nothing at all (a reduce's leaf). ``run_all`` runs every case in
one job, in order, on any communicator (the communicator stays in step
after each), and returns name -> outcome.

Used by tests/test_mismatch.py over sockets and shared memory
(warmup_kit.launch), over MPI (mpiexec -n N python -m mpi4py
tests/mpi/mismatch.py) and over the hybrid transport (python -m
warmup_kit.run ... tests/mpi/mismatch.py); rank 0 prints one JSON line:
{"ranks": N, "records": [per rank {case: outcome}]}.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

import warmup_kit as wk
from bad_input import follow_up

#: each call's timeout: today's code waits this long where a rank hangs
CALL_TIMEOUT_S = 4.0


def _x(n=6, dtype="float64", rows=None):
    a = np.arange(n).astype(dtype)
    return a if rows is None else a.reshape(rows, -1)


def _pick(c, odd, even):
    """``odd`` on odd ranks, ``even`` on the others (so with N >= 3 both
    groups hold a rank that would only send and one that would receive)."""
    return odd if c.rank % 2 else even


def _last(c, last, rest):
    """``last`` on the last rank, ``rest`` on the others."""
    return last if c.rank == c.size - 1 else rest


# name -> (field the error must name, call(comm, timeout))
CASES = {
    # the case: [0.0, 1.0, 0.0] on 3 ranks
    "broadcast-root": ("root", lambda c, t: wk.broadcast(
        np.full(3, float(c.rank)), c, root=_pick(c, 1, 0), timeout=t)),
    "broadcast-root-each-its-own": ("root", lambda c, t: wk.broadcast(
        _x(), c, root=c.rank, timeout=t)),
    "broadcast-count": ("count", lambda c, t: wk.broadcast(
        _x(n=_last(c, 7, 6)), c, timeout=t)),
    "broadcast-dtype": ("dtype", lambda c, t: wk.broadcast(
        _x(dtype=_pick(c, "float32", "int32")), c, timeout=t)),
    "reduce-root": ("root", lambda c, t: wk.reduce(
        _x(), c, root=_last(c, c.size - 1, 0), timeout=t)),
    "reduce-op": ("op", lambda c, t: wk.reduce(
        _x(), c, op=_pick(c, "max", "sum"), timeout=t)),
    "allreduce-op": ("op", lambda c, t: wk.allreduce(
        _x(), c, op=_last(c, "max", "sum"), timeout=t)),
    "allreduce-count": ("count", lambda c, t: wk.allreduce(
        _x(n=_pick(c, 5, 6)), c, timeout=t)),
    "allreduce-count-zero": ("count", lambda c, t: wk.allreduce(
        _x(n=_last(c, 0, 6)), c, timeout=t)),
    "allreduce-dtype": ("dtype", lambda c, t: wk.allreduce(
        _x(dtype=_last(c, "float32", "float64")), c, timeout=t)),
    "allreduce-algorithm": ("algorithm", lambda c, t: wk.allreduce(
        _x(), c, algorithm=_pick(c, "tree", "ring"), timeout=t)),
    "all-gather-count": ("count", lambda c, t: wk.all_gather(
        _x(n=_last(c, 3, 2)), c, timeout=t)),
    "reduce-scatter-rows": ("unit", lambda c, t: wk.reduce_scatter(
        _x(n=12, rows=_pick(c, 4, 6)), c, timeout=t)),
    "gather-root": ("root", lambda c, t: wk.gather(
        _x(), c, root=_pick(c, 1, 0), timeout=t)),
    "scatter-root": ("root", lambda c, t: wk.scatter(
        _x(n=6 * c.size), c, root=_last(c, c.size - 1, 0), timeout=t)),
    "all-to-all-count": ("count", lambda c, t: wk.all_to_all(
        _x(n=c.size * _last(c, 2, 1)), c, timeout=t)),
    "all-to-all-v-dtype": ("dtype", lambda c, t: wk.all_to_all(
        _x(n=c.size, dtype=_pick(c, "int64", "float64")), c,
        send_counts=[1] * c.size, timeout=t)),
    "all-to-all-v-recv-counts": ("algorithm", lambda c, t: wk.all_to_all(
        _x(n=c.size), c, send_counts=[1] * c.size,
        recv_counts=_last(c, [1] * c.size, None), timeout=t)),
    "collective": ("collective", lambda c, t: (
        wk.broadcast(_x(), c, timeout=t) if c.rank == 0 else
        wk.allreduce(_x(), c, timeout=t))),
    "collective-all-to-all": ("collective", lambda c, t: (
        wk.all_to_all(_x(n=2 * c.size), c, timeout=t) if c.rank % 2 else
        wk.all_gather(_x(n=2), c, timeout=t))),
}


def outcome(call, comm) -> dict:
    comm.reset_stats()
    t0 = time.monotonic()
    out = {"kind": "returned", "message": "", "fields": [], "ranks": [],
           "values": []}
    try:
        call(comm, CALL_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - the result under test
        out.update(kind=type(exc).__name__, message=str(exc),
                   fields=list(getattr(exc, "fields", ())),
                   ranks=list(getattr(exc, "ranks", ())),
                   values=[list(v) for v in getattr(exc, "values", ())])
    out["elapsed_s"] = time.monotonic() - t0
    out["payload"] = [comm.stats.bytes_sent, comm.stats.bytes_received]
    out["follow_up"] = follow_up(comm, CALL_TIMEOUT_S) if out["kind"] in (
        "returned", "CallMismatch") else "skipped: the call failed otherwise"
    return out


def run_all(comm) -> dict:
    return {name: outcome(call, comm) for name, (_, call) in CASES.items()}


def main() -> int:
    if "--hybrid" in sys.argv:
        from warmup_kit.comm.rendezvous import comm_from_env, gather_json
        comm = comm_from_env(timeout=60)
        every = gather_json(comm, run_all(comm), timeout=60)
        size = comm.size
        comm.close()
    else:
        from mpi4py import MPI

        from warmup_kit.comm import MPIComm
        comm = MPIComm()
        every = MPI.COMM_WORLD.gather(run_all(comm), root=0)  # harness only
        size = comm.size
    if every is not None:
        print(json.dumps({"ranks": size, "records": every}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
