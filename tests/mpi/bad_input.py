"""Bad input to the collectives, on any communicator.

Two kinds of cases, run by every rank in the same order:

* LOCAL: every rank makes the same bad call; it must raise ValueError or
  TypeError with a clear message before a single byte is sent (payload and
  handshake counters stay zero).
* DISAGREE: the ranks make calls that do not match (length, dtype, op,
  algorithm, root...); every rank must raise a ValueError naming what
  differs, within the call's timeout: never a hang, never garbage.

After every case a correct all-reduce must still work (the ranks stay in
step). Used by tests/test_bad_input.py over sockets (warmup_kit.launch) and,
as a script, over MPI: mpiexec -n N python -m mpi4py tests/mpi/bad_input.py
(rank 0 prints {"ranks": N, "records": [per rank [per case]]}).
"""
from __future__ import annotations

import json
import sys

import numpy as np

import warmup_kit as wk

CALL_TIMEOUT_S = 10.0


def _x(dtype="float64", n=4):
    return np.arange(n).astype(dtype)


# name -> (exception types, words the message must contain, call(comm))
LOCAL = {
    "unknown-algorithm": ((ValueError,), ["bogus"],
                          lambda c: wk.allreduce(_x(), c, algorithm="bogus")),
    "unknown-op": ((ValueError,), ["avg"],
                   lambda c: wk.allreduce(_x(), c, op="avg")),
    "max-on-complex": ((TypeError, ValueError), ["max", "complex"],
                       lambda c: wk.allreduce(_x("complex64"), c, op="max")),
    "min-on-complex128": ((TypeError, ValueError), ["min", "complex"],
                          lambda c: wk.allreduce(_x("complex128"), c,
                                                 op="min")),
    "bool-dtype": ((TypeError,), ["bool"],
                   lambda c: wk.allreduce(np.ones(4, bool), c)),
    "object-dtype": ((TypeError,), ["object"],
                     lambda c: wk.allreduce(np.array([1, None]), c)),
    "str-dtype": ((TypeError,), ["<U"],
                  lambda c: wk.allreduce(np.array(["a", "b"]), c)),
    "datetime-dtype": ((TypeError,), ["datetime"],
                       lambda c: wk.allreduce(np.zeros(3, "M8[s]"), c)),
    "record-dtype": ((TypeError,), ["numeric"],
                     lambda c: wk.allreduce(np.zeros(3, "i4,f8"), c)),
    "list-input": ((TypeError,), ["numpy array", "list"],
                   lambda c: wk.allreduce([1.0, 2.0], c)),
    "float-input": ((TypeError,), ["numpy array", "float"],
                    lambda c: wk.allreduce(3.0, c)),
    "broadcast-root-negative": ((ValueError,), ["root"],
                                lambda c: wk.broadcast(_x(), c, root=-1)),
    "broadcast-root-too-big": ((ValueError,), ["root"],
                               lambda c: wk.broadcast(_x(), c, root=c.size)),
    "broadcast-root-str": ((ValueError, TypeError), ["root"],
                           lambda c: wk.broadcast(_x(), c, root="0")),
    "reduce-root-too-big": ((ValueError,), ["root"],
                            lambda c: wk.reduce(_x(), c, root=c.size + 3)),
    "reduce-root-float": ((ValueError, TypeError), ["root"],
                          lambda c: wk.reduce(_x(), c, root=0.5)),
    "reduce-max-on-complex": ((TypeError, ValueError), ["complex"],
                              lambda c: wk.reduce(_x("complex64"), c,
                                                  op="max")),
    "reduce-scatter-unknown-op": ((ValueError,), ["mean"],
                                  lambda c: wk.reduce_scatter(_x(), c,
                                                              op="mean")),
    "reduce-scatter-scalar": ((ValueError,), ["dimension"],
                              lambda c: wk.reduce_scatter(np.array(1.0), c)),
    "reduce-scatter-unknown-algorithm": ((ValueError,), ["tree"],
                                         lambda c: wk.reduce_scatter(
                                             _x(), c, algorithm="tree")),
    "all-gather-unknown-algorithm": ((ValueError,), ["magic"],
                                     lambda c: wk.all_gather(
                                         _x(), c, algorithm="magic")),
    "ranks-per-node-with-ring": ((ValueError,), ["ranks_per_node"],
                                 lambda c: wk.allreduce(
                                     _x(), c, ranks_per_node=2)),
    "ranks-per-node-zero": ((ValueError,), ["ranks_per_node"],
                            lambda c: wk.allreduce(
                                _x(), c, algorithm="hierarchical",
                                ranks_per_node=0)),
    "negative-timeout": ((ValueError,), ["timeout"],
                         lambda c: wk.allreduce(_x(), c, timeout=-1)),
    "not-a-comm": ((TypeError,), ["comm"],
                   lambda c: wk.allreduce(_x(), object())),
}


# the same, where only N > 1 makes them wrong
LOCAL_MULTI = {
    "all-to-all-not-divisible": ((ValueError,), ["divisible"],
                                 lambda c: wk.all_to_all(
                                     _x(n=c.size + 1), c)),
}


def _by_rank(rank, values):
    """values[rank], or the last one for higher ranks."""
    return values[min(rank, len(values) - 1)]


# name -> (word the message must name, call(comm)); rank 0 vs the others
DISAGREE = {
    "length": ("shape", lambda c: wk.allreduce(
        _x(n=_by_rank(c.rank, [4, 5])), c, timeout=CALL_TIMEOUT_S)),
    "dtype": ("dtype", lambda c: wk.allreduce(
        _x(_by_rank(c.rank, ["float32", "float64"])), c,
        timeout=CALL_TIMEOUT_S)),
    "dtype-same-itemsize": ("dtype", lambda c: wk.allreduce(
        _x(_by_rank(c.rank, ["int32", "float32"])), c,
        timeout=CALL_TIMEOUT_S)),
    "op": ("op", lambda c: wk.allreduce(
        _x(), c, op=_by_rank(c.rank, ["sum", "max"]),
        timeout=CALL_TIMEOUT_S)),
    "algorithm": ("algorithm", lambda c: wk.allreduce(
        _x(), c, algorithm=_by_rank(c.rank, ["ring", "tree"]),
        timeout=CALL_TIMEOUT_S)),
    "shape-same-size": ("shape", lambda c: wk.allreduce(
        np.zeros(_by_rank(c.rank, [(2, 3), (3, 2)])), c,
        timeout=CALL_TIMEOUT_S)),
    "root": ("root", lambda c: wk.broadcast(
        _x(), c, root=_by_rank(c.rank, [0, c.size - 1]),
        timeout=CALL_TIMEOUT_S)),
    "collective": ("collective", lambda c: (
        wk.broadcast(_x(), c, timeout=CALL_TIMEOUT_S) if c.rank == 0 else
        wk.allreduce(_x(), c, timeout=CALL_TIMEOUT_S))),
    "ranks-per-node": ("ranks_per_node", lambda c: wk.allreduce(
        _x(), c, algorithm="hierarchical",
        ranks_per_node=_by_rank(c.rank, [1, c.size]),
        timeout=CALL_TIMEOUT_S)),
    "length-in-reduce-scatter": ("shape", lambda c: wk.reduce_scatter(
        _x(n=_by_rank(c.rank, [6, 7])), c, timeout=CALL_TIMEOUT_S)),
    "length-in-all-gather": ("shape", lambda c: wk.all_gather(
        _x(n=_by_rank(c.rank, [2, 3])), c, timeout=CALL_TIMEOUT_S)),
}


def _stats(comm) -> list[int]:
    st = comm.stats
    return [st.bytes_sent, st.bytes_received, st.messages_sent,
            st.messages_received, st.control_bytes_sent,
            st.control_bytes_received]


def _follow_up(comm) -> str | None:
    """A correct all-reduce after the bad one: None if right."""
    try:
        y = wk.allreduce(np.full(5, comm.rank + 1.0), comm,
                         timeout=CALL_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - reported
        return f"follow-up call raised {type(exc).__name__}: {exc}"
    want = comm.size * (comm.size + 1) / 2
    return None if np.array_equal(y, np.full(5, want)) else \
        f"follow-up call returned {y}"


def _outcome(call, comm) -> dict:
    import time
    comm.reset_stats()
    t0 = time.monotonic()
    try:
        call(comm)
        out = {"kind": "returned", "message": ""}
    except Exception as exc:  # noqa: BLE001 - the result under test
        out = {"kind": type(exc).__name__, "message": str(exc),
               "type_error": isinstance(exc, TypeError),
               "value_error": isinstance(exc, ValueError)}
    out["elapsed_s"] = time.monotonic() - t0
    out["stats"] = _stats(comm)
    out["follow_up"] = _follow_up(comm)
    return out


def run_all(comm) -> dict:
    """Every LOCAL and DISAGREE case on this rank: name -> outcome."""
    out = {}
    for name, (_, _, call) in LOCAL.items():
        out[f"local:{name}"] = _outcome(call, comm)
    if comm.size > 1:
        for name, (_, _, call) in LOCAL_MULTI.items():
            out[f"local:{name}"] = _outcome(call, comm)
        for name, (_, call) in DISAGREE.items():
            out[f"disagree:{name}"] = _outcome(call, comm)
    return out


def main() -> int:
    from mpi4py import MPI

    from warmup_kit.comm import MPIComm
    world = MPI.COMM_WORLD
    comm = MPIComm()
    records = run_all(comm)
    gathered = world.gather(records, root=0)      # test harness only
    if world.Get_rank() == 0:
        print(json.dumps({"ranks": world.Get_size(), "records": gathered}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
