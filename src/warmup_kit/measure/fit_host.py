"""The alpha-beta-gamma model with the mechanisms of ranks sharing one host.

:mod:`warmup_kit.measure.fit` is the textbook model: a round costs alpha, plus beta
per byte through the busiest port, plus gamma per byte reduced. On one host
there is no wire: MPI moves a message through shared memory, the sender's CPU
copying it in and the receiver's copying it out, so "bandwidth" is CPU time,
and CPUs are what ranks share. This model keeps the three kinds of cost and
counts what is really there:

* ``call``: a fixed cost per call (the Python call, the plan lookup, the
  skew the barrier before each timed call leaves between ranks);
* ``alpha`` per round (one message's latency) and ``mu`` per message on the
  wire: large messages travel in slices
  (:data:`warmup_kit.execute.plan.SLICE_BYTES`), each one a wait;
* ``rho`` per message that takes MPICH's rendezvous path: a message of
  :data:`RNDV_BYTES` or more no longer fits one shared-memory cell, and the
  sender must first hand the receiver a header and wait for it (MPICH 5.0.2
  defaults, as ``mpivars`` prints them: ``MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_
  CELL_SIZE=8192`` and ``MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD=8192``). Without
  this term the ring's error jumped from +20% at 4 KiB to -16..-30% at
  16-256 KiB, the sizes whose chunks first cross 8 KiB;
* ``beta`` per byte *copied*, counted at both ends (sent + received: both
  CPUs copy), and ``gamma`` per byte reduced;
* ranks sharing cores: a round lasts as long as its busiest rank's CPU work,
  or as all ranks' work spread over the cores, whichever is longer (4 ranks
  on 2 cores doing equal work: twice one rank's work);
* a cache-resident bandwidth (``fit_host(..., cache=True)``): bytes are
  cheaper to copy and reduce while they stay in the CPU's caches. The share
  ``min(1, C / W)`` of a call's working set ``W`` (every rank's input,
  output and the buffers it reduces from: :func:`working_set`) that fits
  in ``C`` bytes of cache costs ``f`` times the out-of-cache beta and
  gamma, the rest costs them in full. ``C`` and ``f`` are fitted with the
  rest (each ``C`` a power of two from 256 KiB up to the last-level cache,
  each ``f`` from 0.05 to 1: :data:`CACHE_FACTORS`), the same two numbers
  for every size and algorithm.

A call then costs ``call + R alpha + M mu + s (B beta + G gamma) + V rho``
where :func:`features` counts ``R`` rounds, ``M`` messages of the busiest
rank, ``B``, ``G`` bytes copied and reduced on the critical path, ``V``
rendezvous messages of the busiest rank, and ``s = 1 - (1 - f) min(1, C /
W)`` (1 without the cache term): six non-negative numbers (and ``C``,
``f``), one set for every size and algorithm at one N, fitted by relative
least squares (:func:`fit_host`) -- never one per size.

Why the cache term: on the shared 2-core test machine (a VM: a private
2 MiB L2 per core; sysfs reports the host's 480 MiB L3, which other
tenants share) numpy copies 14.8 GB/s in cache and 2.3 GB/s out of it,
and the model without the term, fitted to 1 KiB-64 MiB at N = 2, put the
ring 34% too slow at 256 KiB and 34-68% too fast from 1 MiB up (at a load
of 5): one beta cannot be both speeds. With it that run's fit chose C =
4 MiB (the two cores' L2) and f = 0.15 (near the memcpy ratio, 0.16) and
the ring's worst error fell to 26%.

Tried and left out: numpy's own memcpy and add speeds in and out of the
cache as fixed constants for beta and gamma. They move by 3x between runs
on the shared machine (0.1-0.3 ns/B out of cache: the memory bus is shared
with other tenants) and they are not what MPI's copies through its
shared-memory cells cost; :func:`measure_host` still measures them, and the
report sets the fitted beta beside memcpy's (the distance to the limit).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from warmup_kit.execute import plan as P
from warmup_kit.machine import cores
from warmup_kit.machine import llc_bytes as machine_llc
from warmup_kit.measure.fit import ITEMSIZE, nnls_rel, schedule_rounds
from warmup_kit.schedule import chunk_sizes

PARAMS = ("call_s", "alpha_s", "mu_s", "beta_s_per_byte", "gamma_s_per_byte",
          "rho_s")

#: messages this large take MPICH's rendezvous path between ranks on one
#: host (its shared-memory cell size and single-copy threshold, both 8 KiB)
RNDV_BYTES = 8192


#: the cache factors ``f`` and the smallest cache size ``C`` the fit tries
CACHE_FACTORS = tuple(np.round(np.arange(0.05, 1.0001, 0.05), 2))
MIN_CACHE_BYTES = 256 << 10


def llc_bytes(default: int = 32 << 20) -> int:
    """Size of this machine's last-level CPU cache
    (:func:`warmup_kit.machine.llc_bytes`), or ``default``."""
    return machine_llc() or default


def cache_sizes(llc: int | None = None) -> list[int]:
    """The cache sizes ``C`` the fit tries: powers of two from
    :data:`MIN_CACHE_BYTES` up to the last-level cache."""
    top = llc or llc_bytes()
    out, c = [], MIN_CACHE_BYTES
    while c <= max(top, MIN_CACHE_BYTES):
        out.append(c)
        c *= 2
    return out


def cache_scale(working_set_bytes, cache_bytes: float,
                cached_factor: float):
    """``s``: the factor on the per-byte costs of a call whose working set
    (all ranks) is ``working_set_bytes``: its share within
    ``cache_bytes`` costs ``cached_factor``, the rest 1."""
    if not cache_bytes:
        return np.ones_like(np.asarray(working_set_bytes, dtype=float)) \
            if np.ndim(working_set_bytes) else 1.0
    w = np.maximum(np.asarray(working_set_bytes, dtype=float), 1.0)
    out = 1.0 - (1.0 - cached_factor) * np.minimum(1.0, cache_bytes / w)
    return out if np.ndim(out) else float(out)


#: the most :func:`measure_host` allocates per array out of cache (a VM may
#: report its host's whole L3, 480 MiB on the test machine, shared with
#: other tenants: 4x that in three arrays would be 5.6 GiB)
OUT_BYTES_MAX = 128 << 20


def measure_host(reps: int = 15, in_bytes: int = 2 << 20) -> dict:
    """numpy memcpy and add (float64) on one core, GB/s of the destination
    array, in cache (``in_bytes``) and out of it (4x the last-level cache,
    at most :data:`OUT_BYTES_MAX`; medians)."""
    def gbps(nbytes: int, add: bool) -> float:
        n = nbytes // 8
        a, b, c = np.ones(n), np.ones(n), np.ones(n)
        ts = []
        for _ in range(reps + 2):
            t0 = time.perf_counter()
            if add:
                np.add(a, b, out=c)
            else:
                np.copyto(c, a)
            ts.append(time.perf_counter() - t0)
        return nbytes / float(np.median(ts[2:])) / 1e9
    llc = llc_bytes()
    out = min(4 * llc, OUT_BYTES_MAX)
    return {"llc_mib": llc / 2 ** 20, "out_mib": out / 2 ** 20,
            "cores": cores(),
            "memcpy_in_cache_gbps": gbps(in_bytes, False),
            "memcpy_gbps": gbps(out, False),
            "add_in_cache_gbps": gbps(in_bytes, True),
            "add_gbps": gbps(out, True)}


def _pieces(nbytes: float) -> int:
    """Messages a transfer of ``nbytes`` becomes on the wire (as
    :func:`warmup_kit.execute.p2p._pieces` slices it)."""
    if nbytes <= 0:
        return 0
    if nbytes < P.SLICE_MIN_BYTES:
        return 1
    return -(-int(nbytes) // P.SLICE_BYTES)


def working_set(algorithm: str, nbytes: int, n: int, *,
                collective: str = "allreduce", itemsize: int = 8) -> float:
    """Bytes all ``n`` ranks touch in one call: each rank's input and
    output (the public call runs out of place) and a buffer for every
    message it reduces (received apart, then reduced), at the largest rank
    (as :func:`warmup_kit.model.emulated.working_set`), times ``n``."""
    chunks, rounds = schedule_rounds(collective, algorithm, n)
    sizes = np.asarray(chunk_sizes(nbytes // itemsize, chunks)) * itemsize
    staged = np.zeros(n)
    for rnd in rounds:
        for src, dst, ch, reduce in rnd:
            if reduce:
                staged[dst] += float(sizes[list(ch)].sum())
    return float(n * (2 * nbytes + staged.max()))


def features(algorithm: str, nbytes: int, n: int, ncores: int, *,
             collective: str = "allreduce", itemsize: int = 8,
             cache_bytes: float = 0.0, cached_factor: float = 1.0
             ) -> np.ndarray:
    """``[1, R, M, sB, sG, V]``: the call, rounds, the busiest rank's
    messages, bytes copied and reduced on the critical path (times the
    cache's factor ``s``, :func:`cache_scale`; 1 with ``cache_bytes`` 0),
    and the busiest rank's rendezvous messages, ``n`` ranks sharing
    ``ncores`` cores."""
    chunks, rounds = schedule_rounds(collective, algorithm, n)
    sizes = np.asarray(chunk_sizes(nbytes // itemsize, chunks)) * itemsize
    R, M, V, B, G = 0, 0, 0, 0.0, 0.0
    for rnd in rounds:
        moved, red = np.zeros(n), np.zeros(n)
        msgs, rndv = np.zeros(n), np.zeros(n)
        for src, dst, ch, reduce in rnd:
            b = float(sizes[list(ch)].sum())
            k = _pieces(b)
            moved[src] += b
            moved[dst] += b
            msgs[src] += k
            msgs[dst] += k
            if b >= RNDV_BYTES:
                rndv[src] += k
                rndv[dst] += k
            if reduce:
                red[dst] += b
        if not moved.any():
            continue
        R += 1
        M += int(msgs.max())
        V += int(rndv.max())
        # CPU work of a rank (copy and add cost about alike per byte here;
        # the split below only decides whose work bounds the round)
        work = moved + red
        if work.sum() / ncores >= work.max():      # the cores are the limit
            B += moved.sum() / ncores
            G += red.sum() / ncores
        else:                                      # the busiest rank is
            i = int(work.argmax())
            B += moved[i]
            G += red[i]
    s = cache_scale(working_set(algorithm, nbytes, n, collective=collective,
                                itemsize=itemsize),
                    cache_bytes, cached_factor) if cache_bytes else 1.0
    return np.array([1.0, R, M, s * B, s * G, V])


@dataclass
class HostFit:
    """Fitted host model (see the module docstring) and its errors."""

    call_s: float
    alpha_s: float
    mu_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    rho_s: float = 0.0
    cores: int = 1
    cache_bytes: float = 0.0
    cached_factor: float = 1.0
    ranks: int | None = None
    points: int = 0
    rms_rel_error: float = 0.0
    max_rel_error: float = 0.0
    errors: list = field(default_factory=list, repr=False)

    @property
    def params(self) -> np.ndarray:
        return np.array([self.call_s, self.alpha_s, self.mu_s,
                         self.beta_s_per_byte, self.gamma_s_per_byte,
                         self.rho_s])

    def as_dict(self) -> dict:
        return {"call_us": self.call_s * 1e6, "alpha_us": self.alpha_s * 1e6,
                "mu_us": self.mu_s * 1e6, "rho_us": self.rho_s * 1e6,
                "beta_ns_per_byte": self.beta_s_per_byte * 1e9,
                "gamma_ns_per_byte": self.gamma_s_per_byte * 1e9,
                "cores": self.cores, "ranks": self.ranks,
                "cache_mib": self.cache_bytes / 2 ** 20,
                "cached_factor": self.cached_factor,
                "points": self.points, "rms_rel_error": self.rms_rel_error,
                "max_rel_error": self.max_rel_error}


def predict(algorithm: str, nbytes: int, n: int, fitted: HostFit, *,
            collective: str = "allreduce", itemsize: int = 8) -> float:
    """Predicted seconds of one call."""
    x = features(algorithm, nbytes, n, fitted.cores, collective=collective,
                 itemsize=itemsize, cache_bytes=fitted.cache_bytes,
                 cached_factor=fitted.cached_factor)
    return float(x @ fitted.params)


def fit_host(rows: list[dict], *, ncores: int | None = None,
             collective: str = "allreduce", min_bytes: int = 1 << 10,
             max_bytes: int = 1 << 40,
             algorithms: tuple[str, ...] | None = None,
             cache: bool = False, llc: int | None = None) -> HostFit:
    """Fit the six numbers to ``warmup-bench --json`` rows (ours only);
    ``ncores`` defaults to this machine's. ``cache``: fit the cache term
    too (``C`` from :func:`cache_sizes` of ``llc``, default this machine's
    last-level cache, ``f`` from :data:`CACHE_FACTORS`: the pair whose fit
    has the least rms relative error)."""
    ncores = ncores or cores()
    use = [r for r in rows if r["algorithm"] != "mpi"
           and r.get("collective", collective) == collective
           and (not algorithms or r["algorithm"] in algorithms)
           and min_bytes <= r["size"] <= max_bytes and r["time_us"] > 0]
    if len(use) < len(PARAMS):
        raise ValueError(f"need at least {len(PARAMS)} measurements, got "
                         f"{len(use)}")
    kw = [dict(collective=collective, itemsize=ITEMSIZE.get(r.get("type"), 8))
          for r in use]
    X0 = np.array([features(r["algorithm"], r["size"], r["ranks"], ncores,
                            **k) for r, k in zip(use, kw)])
    t = np.array([r["time_us"] * 1e-6 for r in use])
    grid = [(0.0, 1.0)]
    if cache:
        grid += [(c, f) for c in cache_sizes(llc) for f in CACHE_FACTORS
                 if f < 1.0]
        W = np.array([working_set(r["algorithm"], r["size"], r["ranks"], **k)
                      for r, k in zip(use, kw)])
    best = None
    for c, f in grid:
        X = X0
        if c:
            X = X0.copy()
            X[:, 3:5] *= cache_scale(W, c, f)[:, None]
        p = nnls_rel(X, t)
        rel = (X @ p - t) / t
        rms = float(np.sqrt(np.mean(rel ** 2)))
        if best is None or rms < best[0] - 1e-12:
            best = (rms, c, f, X, p, rel)
    rms, c, f, X, p, rel = best
    out = HostFit(*map(float, p), cores=ncores, points=len(use),
                  cache_bytes=float(c), cached_factor=float(f),
                  ranks=use[0]["ranks"] if len({r["ranks"] for r in use}) == 1
                  else None)
    pred = X @ p
    out.errors = [{"algorithm": r["algorithm"], "ranks": r["ranks"],
                   "size": r["size"], "measured_us": r["time_us"],
                   "predicted_us": float(q * 1e6),
                   "rel_error": float((q - m) / m)}
                  for r, q, m in zip(use, pred, t)]
    out.rms_rel_error = rms
    out.max_rel_error = float(np.abs(rel).max())
    return out
