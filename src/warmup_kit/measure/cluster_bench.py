"""The emulated cluster's experiments, rank side (``benchmarks/cluster.py``).

On every rank of a ``nodes x ranks_per_node`` job, through the public API
as a user calls it (:func:`warmup_kit.allreduce` with ``algorithm=`` and
nothing else):

* ``allreduce``: flat ring, hierarchical and the two-level leader scheme
  over all ranks;
* ``tp``: the TP all-reduce, a ring in each group of ``ranks_per_node``
  ranks, all groups at once: groups inside one node, or split across nodes
  (sub-communicators from :meth:`~warmup_kit.comm.Comm.split`).

Each variant's first call is checked against numpy (exactly: the inputs are
small integers, so every summation order gives the same floats) and its
payload bytes against the schedule's (:func:`warmup_kit.schedule.traffic`);
then the median, over calls back to back, of the slowest rank's time
(at least ``reps`` calls, more for a fast point: :func:`~warmup_kit.
measure.cluster.call_times` with :data:`~warmup_kit.measure.cluster.
MIN_POINT_S`), and the slowest of all its calls, the checked one included
(``worst_ms``: a call that stalled, as when a link drops and comes back).

:func:`node_probe` times the same local work on every rank at once and
gives each node's slowest rank: the nodes' own speed, with no network in
it (what a per-node health check does before a job is trusted).
"""
from __future__ import annotations

import time

import numpy as np

from warmup_kit.algorithms import build
from warmup_kit.collectives import allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.measure.cluster import MIN_POINT_S, TIMEOUT_S, call_times
from warmup_kit.model.emulated import (TP_PLACEMENTS, VARIANTS, TwoTier,
                                       tp_groups)
from warmup_kit.schedule import traffic

def inputs(rank: int, count: int) -> np.ndarray:
    """Rank ``rank``'s all-reduce input: small integers, exact in float64."""
    return (np.arange(count, dtype=np.float64) % 251) + 1000.0 * rank


def expected(ranks, count: int) -> np.ndarray:
    """The sum of :func:`inputs` over ``ranks``, computed by numpy in one
    pass (len(ranks) copies of the pattern plus the ranks' offsets)."""
    ranks = list(ranks)
    return (len(ranks) * (np.arange(count, dtype=np.float64) % 251)
            + 1000.0 * sum(ranks))


def _checked(world: Comm, comm: Comm, members, algorithm: str,
             nbytes: int) -> tuple[dict, np.ndarray]:
    """One call checked against numpy and the schedule's bytes (all ranks
    agree on the verdict); also returns this rank's input."""
    count = nbytes // 8
    x = inputs(world.rank, count)
    before = comm.stats.bytes_sent
    t0 = time.perf_counter()
    y = allreduce(x, comm, algorithm=algorithm, timeout=TIMEOUT_S)
    took = time.perf_counter() - t0
    sent = comm.stats.bytes_sent - before
    ok = bool(np.array_equal(y, expected(members, count)))
    want = traffic(build("allreduce", algorithm, comm.size), nbytes,
                   itemsize=8).bytes_sent[comm.rank]
    flags = allreduce(np.array([0.0 if ok else 1.0,
                                0.0 if sent == want else 1.0, took]), world,
                      op="max", timeout=TIMEOUT_S)
    return ({"nbytes": nbytes, "correct": not flags[0],
             "bytes_match": not flags[1], "checked_ms": flags[2] * 1e3,
             "bytes_sent_rank0": int(sent) if world.rank == 0 else None}, x)


def run_experiments(world: Comm, tt_shape: TwoTier, sizes, reps: int = 5,
                    experiments=("allreduce", "tp")) -> list[dict]:
    """Every experiment at every size on this job (call on every rank).

    Args:
        world: the job's communicator (all ranks, packed node by node).
        tt_shape: gives ``nodes`` and ``ranks_per_node`` (its tiers are not
            used here).
        sizes: all-reduce buffer sizes per rank, bytes (multiples of 8).
        reps: timed calls per point at least (after the checked one).

    Returns:
        rows ``{"experiment", "variant", "algorithm", "nbytes",
        "measured_ms", "correct", "bytes_match", ...}``, same on every rank.
    """
    if world.size != tt_shape.ranks:
        raise ValueError(f"{world.size} ranks is not {tt_shape.nodes} nodes "
                         f"x {tt_shape.ranks_per_node}")
    rows = []
    subs = {}
    if "tp" in experiments:
        for label, spread in zip(TP_PLACEMENTS, (False, True)):
            groups = tp_groups(tt_shape, spread)
            color = next(i for i, m in enumerate(groups) if world.rank in m)
            subs[label] = (world.split(color, key=world.rank),
                           groups[color])
    for nbytes in sizes:
        if nbytes % 8:
            raise ValueError(f"size {nbytes} is not a whole number of "
                             "float64")
        points = []                      # (row, comm, algorithm, input)
        if "allreduce" in experiments:
            for label, alg in VARIANTS.items():
                r, x = _checked(world, world, range(world.size), alg, nbytes)
                points.append((dict(r, experiment="allreduce", variant=label,
                                    algorithm=alg), world, alg, x))
        for label, (sub, members) in subs.items():
            r, x = _checked(world, sub, members, "ring", nbytes)
            points.append((dict(r, experiment="tp", variant=label,
                                algorithm="ring"), sub, "ring", x))
        for row, c, a, x in points:
            # back to back after the checked call (timing a size's
            # variants in turn, rep after rep, made the in-node TP rows 2-4x
            # slower, which the model does not explain: see the book's note)
            ts = call_times(world, lambda: allreduce(x, c, algorithm=a,
                                                     timeout=TIMEOUT_S),
                            reps, TIMEOUT_S, warm_up=False,
                            min_s=MIN_POINT_S)
            checked = row.pop("checked_ms")
            rows.append(dict(row, measured_ms=float(np.median(ts)) * 1e3,
                             worst_ms=max(float(ts.max()) * 1e3, checked),
                             calls=len(ts) + 1))
    for sub, _ in subs.values():
        sub.close()
    return rows


#: :func:`node_probe`'s work: adds of this many bytes, this many times
PROBE_BYTES = 1 << 20
PROBE_REPS = 300


def node_probe(world: Comm, nodes: int, ranks_per_node: int,
               nbytes: int = PROBE_BYTES, reps: int = PROBE_REPS
               ) -> list[dict]:
    """Each node's speed on local work alone (call on every rank).

    Every rank, started together after a barrier, adds two arrays of
    ``nbytes`` ``reps`` times (the reduction a collective does, with no
    message); the wall time of the whole loop, not a per-add median, so a
    node held back by the scheduler for part of it shows. Returns, on
    every rank, ``[{"node", "probe_ms", "ranks_ms"}]``: the node's slowest
    rank and each of its ranks."""
    a = np.ones(nbytes // 8)
    b = np.ones_like(a)
    out = np.empty_like(a)
    world.barrier(timeout=TIMEOUT_S)
    t0 = time.perf_counter()
    for _ in range(reps):
        np.add(a, b, out=out)
    mine = np.zeros(world.size)
    mine[world.rank] = (time.perf_counter() - t0) * 1e3
    every = allreduce(mine, world, timeout=TIMEOUT_S)
    return [{"node": k,
             "probe_ms": float(every[k * ranks_per_node:
                                     (k + 1) * ranks_per_node].max()),
             "ranks_ms": [round(float(t), 3) for t in
                          every[k * ranks_per_node:(k + 1) * ranks_per_node]]}
            for k in range(nodes)]
