"""Bad input to the collectives, on any communicator.

Three kinds of cases:

* LOCAL: every rank makes the same bad call; it must raise ValueError or
  TypeError with a clear message before a single byte is sent (payload and
  control counters stay zero).
* DISAGREE, in the debug mode (``WARMUP_KIT_DEBUG=DETAIL``, or
  ``comm.debug = True``): the ranks make
  calls that do not match (length, dtype, op, algorithm, root...); every
  rank must raise a ValueError naming what differs, having moved only the
  small agreement message.
* DISAGREE with the default agreement turned off (``comm.check_calls =
  False``; with it on, every rank raises CallMismatch: tests/mpi/mismatch.py):
  the fingerprint in every message's tag still makes the call fail loudly, a
  ProtocolError where a message with another fingerprint arrives, a timeout
  or a lost peer elsewhere; no rank that receives returns a result. The
  communicator is then broken (like NCCL's after an error), so each such
  case runs in a job of its own (``run_default``).

After every LOCAL and debug-mode case a correct all-reduce must still work
(the ranks stay in step). Used by tests/test_bad_input.py over sockets (warmup_kit.launch) and,
as a script, over MPI: mpiexec -n N python -m mpi4py tests/mpi/bad_input.py
(rank 0 prints {"ranks": N, "records": [per rank [per case]]}).
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

import warmup_kit as wk

CALL_TIMEOUT_S = 10.0


def _x(dtype="float64", n=4):
    return np.arange(n).astype(dtype)


# name -> (exception types, words the message must contain, call(comm))
LOCAL = {
    "unknown-algorithm": ((ValueError,), ["bogus"],
                          lambda c: wk.allreduce(_x(), c, algorithm="bogus")),
    "unknown-op": ((ValueError,), ["mean"],
                   lambda c: wk.allreduce(_x(), c, op="mean")),
    "avg-on-int": ((TypeError, ValueError), ["avg", "int"],
                   lambda c: wk.allreduce(_x("int32"), c, op="avg")),
    "out-wrong-shape": ((ValueError,), ["out", "shape"],
                        lambda c: wk.allreduce(_x(), c, out=np.empty(5))),
    "out-wrong-dtype": ((ValueError,), ["out", "dtype"],
                        lambda c: wk.allreduce(_x(), c,
                                               out=np.empty(4, "float32"))),
    "out-not-array": ((TypeError,), ["out", "list"],
                      lambda c: wk.allreduce(_x(), c, out=[0.0] * 4)),
    "out-overlaps-input": ((ValueError,), ["overlap"],
                           lambda c: _overlap(c)),
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
    "nan-timeout": ((ValueError,), ["timeout", "nan"],
                    lambda c: wk.allreduce(_x(), c, timeout=float("nan"))),
    "str-timeout": ((TypeError,), ["timeout", "str"],
                    lambda c: wk.allreduce(_x(), c, timeout="5")),
    "async-negative-timeout": ((ValueError,), ["timeout"],
                               lambda c: wk.allreduce(_x(), c, timeout=-1,
                                                      async_op=True)),
    "not-a-comm": ((TypeError,), ["comm"],
                   lambda c: wk.allreduce(_x(), object())),
}


# the same, where only N > 1 makes them wrong
LOCAL_MULTI = {
    "all-to-all-not-divisible": ((ValueError,), ["divisible"],
                                 lambda c: wk.all_to_all(
                                     _x(n=c.size + 1), c)),
}


def _overlap(c):
    x = np.arange(8.0)
    return wk.allreduce(x[:4], c, out=x[2:6])


def _by_rank(rank, values):
    """values[rank], or the last one for higher ranks."""
    return values[min(rank, len(values) - 1)]


# name -> (word the message must name, call(comm, timeout)); rank 0 vs the
# others.
# (Two shapes of one size, (2, 3) and (3, 2), are not a disagreement: like
# MPI, an all-reduce sees only the element count.)
DISAGREE = {
    "length": ("count", lambda c, t: wk.allreduce(
        _x(n=_by_rank(c.rank, [4, 5])), c, timeout=t)),
    "dtype": ("dtype", lambda c, t: wk.allreduce(
        _x(_by_rank(c.rank, ["float32", "float64"])), c,
        timeout=t)),
    "dtype-same-itemsize": ("dtype", lambda c, t: wk.allreduce(
        _x(_by_rank(c.rank, ["int32", "float32"])), c,
        timeout=t)),
    "op": ("op", lambda c, t: wk.allreduce(
        _x(), c, op=_by_rank(c.rank, ["sum", "max"]),
        timeout=t)),
    "algorithm": ("algorithm", lambda c, t: wk.allreduce(
        _x(), c, algorithm=_by_rank(c.rank, ["ring", "tree"]),
        timeout=t)),
    "root": ("root", lambda c, t: wk.broadcast(
        _x(), c, root=_by_rank(c.rank, [0, c.size - 1]),
        timeout=t)),
    "collective": ("collective", lambda c, t: (
        wk.broadcast(_x(), c, timeout=t) if c.rank == 0 else
        wk.allreduce(_x(), c, timeout=t))),
    "ranks-per-node": ("ranks_per_node", lambda c, t: wk.allreduce(
        _x(), c, algorithm="hierarchical",
        ranks_per_node=_by_rank(c.rank, [1, c.size]),
        timeout=t)),
    "length-in-reduce-scatter": ("count", lambda c, t: wk.reduce_scatter(
        _x(n=_by_rank(c.rank, [6, 7])), c, timeout=t)),
    "length-in-all-gather": ("count", lambda c, t: wk.all_gather(
        _x(n=_by_rank(c.rank, [2, 3])), c, timeout=t)),
}


def _stats(comm) -> list[int]:
    st = comm.stats
    return [st.bytes_sent, st.bytes_received, st.messages_sent,
            st.messages_received, st.control_bytes_sent,
            st.control_bytes_received]


def follow_up(comm, timeout: float = CALL_TIMEOUT_S) -> str | None:
    """A correct all-reduce after a bad call: None if right (also used by
    tests/mpi/mismatch.py)."""
    try:
        y = wk.allreduce(np.full(5, comm.rank + 1.0), comm, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - reported
        return f"follow-up call raised {type(exc).__name__}: {exc}"
    want = comm.size * (comm.size + 1) / 2
    return None if np.array_equal(y, np.full(5, want)) else \
        f"follow-up call returned {y}"


def _outcome(call, comm) -> dict:
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
    out["follow_up"] = follow_up(comm)
    return out


def run_all(comm) -> dict:
    """Every LOCAL case, and every DISAGREE case in the debug mode, on this
    rank: name -> outcome."""
    out = {}
    for name, (_, _, call) in LOCAL.items():
        out[f"local:{name}"] = _outcome(call, comm)
    if comm.size > 1:
        for name, (_, _, call) in LOCAL_MULTI.items():
            out[f"local:{name}"] = _outcome(call, comm)
        comm.debug = True            # what WARMUP_KIT_DEBUG=DETAIL sets
        try:
            for name, (_, call) in DISAGREE.items():
                out[f"disagree:{name}"] = _outcome(
                    lambda c, call=call: call(c, CALL_TIMEOUT_S), comm)
        finally:
            comm.debug = False
    return out


#: the DISAGREE cases run without the debug mode, one job each
DEFAULT_MODE = ("length", "dtype-same-itemsize", "op", "algorithm",
                "collective", "length-in-all-gather")
DEFAULT_TIMEOUT_S = 5.0


def run_default(comm, name: str) -> dict:
    """One DISAGREE case with neither the debug mode nor the default
    agreement: what this rank saw."""
    call = DISAGREE[name][1]
    comm.check_calls = False
    t0 = time.monotonic()
    try:
        call(comm, DEFAULT_TIMEOUT_S)
        kind, message = "returned", ""
    except Exception as exc:  # noqa: BLE001 - the result under test
        kind, message = type(exc).__name__, str(exc)
    return {"kind": kind, "message": message,
            "elapsed_s": time.monotonic() - t0,
            "received": comm.stats.messages_received}


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
