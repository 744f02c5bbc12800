"""Measure one collective on real ranks: correctness first, then bytes and time.

This is the body of Lab 01 (``labs/lab01.py``), kept in the package so the
book can call it through :func:`warmup_kit.launch` or :func:`run_mpi`.
"""
from __future__ import annotations

import time

import numpy as np

from warmup_kit.algorithms import build
from warmup_kit.collectives import allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.schedule import traffic


def lab_input(rank: int, count: int) -> np.ndarray:
    """Rank ``rank``'s float64 input: small integers, so every summation
    order gives the exact same answer and any mismatch is a real bug."""
    return ((np.arange(count, dtype=np.int64) * 7 + rank * 13) % 101
            ).astype(np.float64)


def reference_sum(size: int, count: int) -> np.ndarray:
    """The exact all-reduce result of :func:`lab_input` over ``size`` ranks."""
    return sum((lab_input(r, count) for r in range(size)),
               np.zeros(count))


def measure_allreduce(comm: Comm, algorithm: str, nbytes: int, *,
                      iters: int = 3, timeout: float | None = 60.0,
                      mpi_reference=None) -> dict:
    """Run one all-reduce of ``nbytes`` (float64), check it, count its bytes.

    Args:
        comm: this rank's communicator.
        algorithm: a name from :data:`warmup_kit.ALGORITHMS`.
        nbytes: message size V in bytes (a multiple of 8).
        iters: timed repetitions after the checked one.
        mpi_reference: optional callable(x) -> MPI's own Allreduce of x.

    Returns:
        A row for this rank: the bytes the transport counted, the schedule's
        prediction, the formula, the bytes the naive algorithm sent when it
        ran here too, ``correct`` and the median time.
    """
    count = nbytes // 8
    x = lab_input(comm.rank, count)
    ref = (mpi_reference(x) if mpi_reference is not None
           else reference_sum(comm.size, count))
    y = np.empty_like(x)
    sent, received, msgs = _counted(comm, x, y, algorithm, timeout)
    correct = bool(np.array_equal(y, ref))
    n = comm.size
    predicted = traffic(build("allreduce", algorithm, n), count * 8, itemsize=8)
    naive_sent = (sent if algorithm == "naive" else
                  _counted(comm, x, np.empty_like(x), "naive", timeout)[0])
    times = []
    for _ in range(iters if correct else 0):
        t0 = time.perf_counter()
        allreduce(x, comm, out=y, algorithm=algorithm, timeout=timeout)
        times.append(time.perf_counter() - t0)
    return {
        "rank": comm.rank, "ranks": n, "algorithm": algorithm,
        "nbytes": count * 8, "correct": correct,
        "bytes_sent": sent, "bytes_received": received, "messages_sent": msgs,
        "predicted_sent": predicted.bytes_sent[comm.rank],
        "predicted_received": predicted.bytes_received[comm.rank],
        "formula_bytes": 2 * (n - 1) / n * count * 8,
        "naive_sent": naive_sent,
        "median_s": float(np.median(times)) if times else None,
    }


def _counted(comm: Comm, x, out, algorithm: str, timeout):
    """One all-reduce into ``out``; the payload the transport counted."""
    comm.reset_stats()
    allreduce(x, comm, out=out, algorithm=algorithm, timeout=timeout)
    st = comm.stats
    return st.bytes_sent, st.bytes_received, st.messages_sent


def run_lab01(comm: Comm, algorithms, sizes, *, iters: int = 3,
              timeout: float | None = 60.0, mpi_reference=None) -> list[dict]:
    """:func:`measure_allreduce` for every algorithm and size, on this rank."""
    return [measure_allreduce(comm, a, v, iters=iters, timeout=timeout,
                              mpi_reference=mpi_reference)
            for a in algorithms for v in sizes]
