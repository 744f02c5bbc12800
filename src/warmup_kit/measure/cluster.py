"""Calibrate the two tiers of an emulated cluster (book, Chapter 6; Lab 02).

What the collectives exercise is what is measured: not a lone ping-pong,
but every rank at once exchanging with a partner (sending and receiving in
the same round, as each round of a ring does), through the same executor and
transport the collectives use (:func:`warmup_kit.execute.run_schedule` on
the job's communicator). Each pattern is a small
:class:`~warmup_kit.schedule.Schedule` (:func:`exchange_schedule`): ``R``
rounds in which every pair swaps one message of ``m`` bytes, by copy or by
reduction, in place or (``intra`` only) out of place from an input array as
the public calls run. Two patterns:

* ``intra``: each rank with a partner in its own node, all nodes at once
  (the fast tier under the load of a collective's in-node phase: two ranks
  per node copying and adding on cores they share);
* ``inter``: local rank ``l`` of node 0 with local rank ``l`` of node 1, all
  local ranks at once, so the node's uplink carries ``ranks_per_node``
  messages each way per round (the slow tier as the hierarchical scheme's
  cross-node phase loads it).

One relative least-squares fit (:func:`warmup_kit.measure.fit.nnls_rel`)
over every row then gives eight non-negative numbers (:func:`params`): a
fixed cost per call; per round, each tier's latency; per byte through a
port, each tier's time (the inverse bandwidth; the slow tier's port is the
node's uplink); per byte reduced, ``gamma`` (the reduce rows differ from the
copy rows only by the ``np.add`` of what arrives); per byte reduced out of
place, what that adds (``oop``); and per byte a rank never writes, the
executor's closing copy from the input (``copy``: out-of-place copy rows
differ from in-place ones only by it). :func:`fit_tiers` returns them as
a :class:`~warmup_kit.model.emulated.TwoTier`.

A seventh number is measured on its own (``touch`` rows): what a public
call pays to fault in a new output array too large for the heap to reuse
(:data:`~warmup_kit.model.emulated.FRESH_MIN_BYTES` and up), every rank at
once running an out-of-place exchange into a new array against into a
reused one. (An ``np.add`` into a new array, the first way it was measured,
showed about two thirds of what the executor's writes pay: the transport
writes the output piece by piece while its partner waits.)

Each point is the median of at least ``reps`` calls and of as many more as
fill :data:`MIN_POINT_S` (up to :data:`MAX_REPS`): on shared cores a fast
point's five calls are too few for a steady median.
"""
from __future__ import annotations

import time

import numpy as np

from warmup_kit.collectives import allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.execute import run_schedule
from warmup_kit.measure.fit import nnls_rel
from warmup_kit.model.emulated import (FRESH_MIN_BYTES, Tier, TwoTier,
                                       time_schedule, working_set)
from warmup_kit.schedule import Schedule, Transfer

PATTERNS = ("intra", "inter")
#: message sizes (bytes per transfer) and round counts calibrated
SIZES = (16 << 10, 256 << 10, 2 << 20, 8 << 20, 32 << 20)
ROUNDS = (1, 3)
#: per-call deadline of a calibration step, seconds
TIMEOUT_S = 120.0
#: a point's calls: at least ``reps``, more until they last this long ...
MIN_POINT_S = 0.5
#: ... but no more than this many
MAX_REPS = 41
#: the touch rows' output: fresh from the kernel on every call
TOUCH_BYTES = FRESH_MIN_BYTES + (16 << 20)


def pairs(pattern: str, nodes: int, ranks_per_node: int
          ) -> list[tuple[int, int]]:
    """The (a, b) rank pairs that exchange in ``pattern``."""
    g = ranks_per_node
    if pattern == "intra":
        if g % 2:
            raise ValueError("the intra pattern pairs ranks: ranks_per_node "
                             f"must be even, got {g}")
        return [(node * g + i, node * g + i + 1)
                for node in range(nodes) for i in range(0, g, 2)]
    if pattern == "inter":
        if nodes % 2:
            raise ValueError(f"the inter pattern pairs nodes: need an even "
                             f"number of nodes, got {nodes}")
        return [(node * g + l, (node + 1) * g + l)
                for node in range(0, nodes, 2) for l in range(g)]
    raise ValueError(f"unknown pattern {pattern!r}; choose from {PATTERNS}")


def exchange_schedule(n: int, pair_list, rounds: int, reduce: bool
                      ) -> Schedule:
    """``rounds`` rounds in which each pair (a, b) swaps one chunk: round k,
    a sends chunk 2k to b and b sends chunk 2k+1 to a (copied, or reduced
    into the receiver's chunk)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    rs = [[t for a, b in pair_list
           for t in (Transfer(a, b, 2 * k, reduce),
                     Transfer(b, a, 2 * k + 1, reduce))]
          for k in range(rounds)]
    return Schedule(name="exchange", collective="allreduce", ranks=n,
                    chunks=2 * rounds, rounds=rs)


def time_calls(comm: Comm, fn, reps: int, timeout: float = TIMEOUT_S,
               warm_up: bool = True, min_s: float = 0.0,
               max_reps: int = MAX_REPS) -> float:
    """Median over the reps of the slowest rank's time of ``fn()``, each
    rep started together after a barrier (one warm-up call first, unless
    ``warm_up`` is False: the caller has just made one).

    ``reps`` calls at least; with ``min_s``, as many more as the first
    call's time says fill ``min_s`` seconds, up to ``max_reps`` (every rank
    takes the slowest rank's first time, so all make the same calls)."""
    return float(np.median(call_times(comm, fn, reps, timeout, warm_up,
                                      min_s, max_reps)))


def call_times(comm: Comm, fn, reps: int, timeout: float = TIMEOUT_S,
               warm_up: bool = True, min_s: float = 0.0,
               max_reps: int = MAX_REPS) -> np.ndarray:
    """The slowest rank's time of each call :func:`time_calls` makes, in
    call order (the same array on every rank): its median is the point,
    its maximum says whether one call stalled."""
    if warm_up:
        fn()
    ts: list[float] = []
    n = reps
    while len(ts) < n:
        comm.barrier(timeout=timeout)
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) == 1 and min_s > 0:
            first = float(allreduce(np.array(ts), comm, op="max",
                                    timeout=timeout)[0])
            n = max(reps, min(max_reps, int(np.ceil(min_s / max(first,
                                                                1e-9)))))
    return allreduce(np.array(ts), comm, op="max", timeout=timeout)


def touch_rows(comm: Comm, nodes: int, ranks_per_node: int, reps: int,
               nbytes: int = TOUCH_BYTES,
               point_s: float = MIN_POINT_S) -> list[dict]:
    """The ``touch`` rows: every rank at once swaps half of ``nbytes`` with
    its in-node partner (the ``intra`` pattern, one copy round) out of place,
    as a public call runs, writing into a new output (``fresh``) and into
    one kept (``reused``). The output is written the way a collective
    writes its own: by the transport's receive and the executor's copies."""
    s = exchange_schedule(comm.size, pairs("intra", nodes, ranks_per_node),
                          1, False)
    src = np.ones(nbytes // 8)
    kept = np.empty_like(src)
    rows = []
    for fresh in (False, True):
        def fn(fresh=fresh):
            return run_schedule(s, np.empty_like(src) if fresh else kept,
                                comm, src=src,
                                deadline=time.monotonic() + TIMEOUT_S)
        rows.append({"pattern": "touch", "nbytes": nbytes, "rounds": 1,
                     "reduce": fresh,
                     "time_s": time_calls(comm, fn, reps, min_s=point_s)})
    return rows


def touch_cost(rows: list[dict]) -> float:
    """Seconds per byte a fresh output adds (0 if the rows show none)."""
    t = {r["reduce"]: r for r in rows if r["pattern"] == "touch"}
    if set(t) != {False, True}:
        return 0.0
    return max(0.0, (t[True]["time_s"] - t[False]["time_s"])
               / t[True]["nbytes"])


def calibrate(comm: Comm, nodes: int, ranks_per_node: int, *,
              patterns=PATTERNS, sizes=SIZES, rounds=ROUNDS, reps: int = 5,
              inter_max_bytes: int = 8 << 20,
              point_s: float = MIN_POINT_S) -> list[dict]:
    """Time the exchange patterns on this job's ranks (call on every rank).

    Each point is ``reps`` calls or as many as fill ``point_s`` seconds
    (0: ``reps`` calls only, a quick and noisier calibration).

    Returns:
        rows ``{"pattern", "nbytes" (per message), "rounds", "reduce",
        "src", "time_s"}``, identical on every rank (``src``: run out of
        place; a ``touch`` row's ``reduce`` says whether its output was
        fresh).
    """
    if comm.size != nodes * ranks_per_node:
        raise ValueError(f"{comm.size} ranks is not {nodes} nodes x "
                         f"{ranks_per_node}")
    rows = [{"pattern": "barrier", "nbytes": 0, "rounds": 0,
             "reduce": False,
             "time_s": time_calls(comm, lambda: comm.barrier(
                 timeout=TIMEOUT_S), max(reps, 9))}]
    rows += touch_rows(comm, nodes, ranks_per_node, reps, point_s=point_s)
    for pattern in patterns:
        pl = pairs(pattern, nodes, ranks_per_node)
        for nbytes in sizes:
            if pattern == "inter" and nbytes > inter_max_bytes:
                continue
            for r in rounds:
                for red, src in ([(False, False), (True, False),
                                  (False, True), (True, True)]
                                 if pattern == "intra" else [(False, False)]):
                    s = exchange_schedule(comm.size, pl, r, red)
                    buf = np.ones(2 * r * nbytes // 8)
                    inp = np.ones_like(buf) if src else None
                    t = time_calls(comm, lambda: run_schedule(
                        s, buf, comm, src=inp,
                        deadline=time.monotonic() + TIMEOUT_S),
                        reps, min_s=point_s)
                    rows.append({"pattern": pattern, "nbytes": nbytes,
                                 "rounds": r, "reduce": red, "src": src,
                                 "time_s": t})
    return rows


def charged_bytes(row: dict, tt: TwoTier) -> float:
    """Bytes the busiest uplink pays for at its rate in an ``inter`` row,
    as the model charges them (:func:`warmup_kit.model.emulated.
    time_schedule`: the rest passes on the token bucket's tokens, refilled
    while the uplink idles), given the tiers ``tt``."""
    r, m = row["rounds"], row["nbytes"]
    s = exchange_schedule(tt.ranks, pairs("inter", tt.nodes,
                                          tt.ranks_per_node), r,
                          row["reduce"])
    link_s = (time_schedule(tt, s, 2 * r * m) - tt.call_s
              - r * tt.inter.alpha_s
              - (tt.gamma_s_per_byte * r * m if row["reduce"] else 0.0))
    return max(0.0, link_s) * tt.inter.bw_bytes_per_s


def features(row: dict, ranks_per_node: int, tt: TwoTier | None = None
             ) -> np.ndarray:
    """``[1, R_intra, R_inter, B_intra, B_inter, G, O, C]`` of a
    calibration row: the call, rounds of each tier, bytes through the
    busiest port of each tier (the uplink carries every local rank's
    message; with ``tt``, only what its token bucket does not let through,
    :func:`charged_bytes`), bytes reduced, bytes reduced out of place, bytes
    copied from the input at the end (out of place, a rank never writes
    the chunks it sends: one per round). With ``tt``, the fast tier's
    per-byte columns carry its cache factor (:meth:`TwoTier.scale` of the
    row's :func:`row_working_set`). :func:`params` is the matching
    parameter vector."""
    r, m = row["rounds"], row["nbytes"]
    intra = row["pattern"] == "intra"
    src = bool(row.get("src", False))
    port = m if intra else ranks_per_node * m
    link = 0.0 if intra else (r * port if tt is None
                              else charged_bytes(row, tt))
    f = 1.0 if tt is None or not intra else tt.scale(row_working_set(row))
    return np.array([1.0, r if intra else 0, 0 if intra else r,
                     f * r * port if intra else 0, link,
                     f * r * m if row["reduce"] else 0,
                     f * r * m if row["reduce"] and src else 0,
                     f * r * m if src else 0])


def row_working_set(row: dict) -> float:
    """Bytes one rank touches in a calibration row's exchange
    (:func:`warmup_kit.model.emulated.working_set`)."""
    r, m = row["rounds"], row["nbytes"]
    s = exchange_schedule(2, [(0, 1)], r, row["reduce"])
    return working_set(s, 2 * r * m, src=bool(row.get("src", False)))


def params(tt: TwoTier) -> np.ndarray:
    """``tt``'s numbers in the order of :func:`features`' columns: a row's
    modelled time is ``features(row, g, tt) @ params(tt)``."""
    return np.array([tt.call_s, tt.intra.alpha_s, tt.inter.alpha_s,
                     1 / tt.intra.bw_bytes_per_s, 1 / tt.inter.bw_bytes_per_s,
                     tt.gamma_s_per_byte, tt.oop_s_per_byte,
                     tt.copy_s_per_byte])


#: the cache factors :func:`fit_tiers` tries
CACHE_FACTORS = tuple(np.round(np.arange(0.2, 1.0001, 0.05), 2))


def fit_tiers(rows: list[dict], nodes: int, ranks_per_node: int,
              burst_bytes: float = 0.0, cores: int = 0,
              cache_bytes: float = 0.0) -> tuple[TwoTier, dict]:
    """The :class:`TwoTier` that explains ``rows`` best (relative least
    squares), and the fit's report (``rms_rel_error``, ``max_rel_error``,
    per-row errors); ``touch`` rows give ``touch_s_per_byte``
    (:func:`touch_cost`). ``burst_bytes``: the link's token bucket depth;
    ``cores``: the cores the ranks share (every calibration round has all
    ranks busy, so it does not change the fit); the
    ``barrier`` row (if any) gives the gap between calls. The bucket makes
    the cost nonlinear in the link's bandwidth: fitted to a fixed point.
    ``cache_bytes``: the last-level cache the ranks share; where some rows'
    working sets fit in it and others do not, the cache factor is the one
    of :data:`CACHE_FACTORS` whose fit is best."""
    gaps = [r["time_s"] for r in rows if r["pattern"] == "barrier"]
    touch = touch_cost(rows)
    rows = [r for r in rows if r["pattern"] in PATTERNS]
    pats = {r["pattern"] for r in rows}
    if pats != set(PATTERNS):
        raise ValueError(f"need rows of both patterns {PATTERNS}, got "
                         f"{sorted(pats)}")
    t = np.array([r["time_s"] for r in rows])
    if (t <= 0).any():
        raise ValueError("every calibration time must be > 0")
    gap = float(np.median(gaps)) if gaps else 0.0
    ranks = nodes * ranks_per_node
    fits = {r["pattern"] == "intra" and ranks * row_working_set(r)
            <= cache_bytes for r in rows}
    factors = CACHE_FACTORS if cache_bytes and fits == {True, False} \
        else (1.0,)
    best = None
    for f in factors:
        tt, X, p = _fit_fixed_point(rows, t, nodes, ranks_per_node,
                                    burst_bytes, gap, cores, touch,
                                    cache_bytes, f)
        rel = (X @ p - t) / t
        rms = float(np.sqrt(np.mean(rel ** 2)))
        if best is None or rms < best[0]:
            best = (rms, tt, X, p, rel)
    rms, tt, X, p, rel = best
    report = {"gap_s": gap, "rms_rel_error": rms,
              "max_rel_error": float(np.abs(rel).max()),
              "rows": [dict(r, model_s=float(q)) for r, q in zip(rows, X @ p)]}
    return tt, report


def _fit_fixed_point(rows, t, nodes, ranks_per_node, burst_bytes, gap,
                     cores, touch, cache_bytes, factor):
    """:func:`fit_tiers` for one cache factor: the tiers, the features and
    the parameters at the fixed point."""
    tt, last = None, None
    for _ in range(60):
        X = np.array([features(r, ranks_per_node, tt) for r in rows])
        p = nnls_rel(X, t)
        call, a1, a2, b1, b2, gamma, oop, copy = map(float, p)
        if b1 <= 0 or b2 <= 0:
            raise ValueError("the fit found no per-byte cost for a tier: "
                             "calibrate with larger messages")
        tt = TwoTier(nodes, ranks_per_node, Tier(a1, 1 / b1),
                     Tier(a2, 1 / b2), gamma, call, burst_bytes, gap, cores,
                     touch, oop, copy, cache_bytes, factor)
        if last is not None and np.allclose(p, last, rtol=1e-10, atol=0):
            break
        last = p
    return tt, X, p
