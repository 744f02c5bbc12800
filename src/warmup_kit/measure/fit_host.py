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
  on 2 cores doing equal work: twice one rank's work).

A call then costs ``call + R alpha + M mu + B beta + G gamma + V rho``
where :func:`features` counts ``R`` rounds, ``M`` messages of the busiest
rank, ``B``, ``G`` bytes copied and reduced on the critical path, and ``V``
rendezvous messages of the busiest rank: six non-negative numbers, one set for every size and algorithm at one N, fitted
by relative least squares (:func:`fit_host`) -- never one per size.

Tried and left out: numpy's own memcpy and add speeds in and out of the last
level cache as fixed constants for beta and gamma. On the shared 2-core test
machine the out-of-cache speeds moved by 3x between runs (0.1-0.3 ns/B: the
memory bus is shared with other tenants), and the measured collectives show
no step at the cache size (MPI's copies through its shared-memory cells
dominate). :func:`measure_host` still measures them: the report sets the
fitted beta beside memcpy's (the distance to the limit).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from warmup_kit.execute import plan as P
from warmup_kit.machine import cores
from warmup_kit.measure.fit import ITEMSIZE, nnls_rel, schedule_rounds
from warmup_kit.schedule import chunk_sizes

PARAMS = ("call_s", "alpha_s", "mu_s", "beta_s_per_byte", "gamma_s_per_byte",
          "rho_s")

#: messages this large take MPICH's rendezvous path between ranks on one
#: host (its shared-memory cell size and single-copy threshold, both 8 KiB)
RNDV_BYTES = 8192


def llc_bytes(default: int = 32 << 20) -> int:
    """Size of this machine's largest CPU cache (sysfs), or ``default``."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in os.listdir(base):
            with open(f"{base}/{d}/size") as f:
                t = f.read().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
            best = max(best, int(t.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        pass
    return best or default


def measure_host(reps: int = 15, in_bytes: int = 2 << 20) -> dict:
    """numpy memcpy and add (float64) on one core, GB/s of the destination
    array, in the last-level cache and far out of it (medians)."""
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
    out = 4 * llc
    return {"llc_mib": llc / 2 ** 20, "cores": cores(),
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


def features(algorithm: str, nbytes: int, n: int, ncores: int, *,
             collective: str = "allreduce", itemsize: int = 8
             ) -> np.ndarray:
    """``[1, R, M, B, G, V]``: the call, rounds, the busiest rank's messages,
    bytes copied and reduced on the critical path, and the busiest rank's
    rendezvous messages, ``n`` ranks sharing ``ncores`` cores."""
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
    return np.array([1.0, R, M, B, G, V])


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
                "points": self.points, "rms_rel_error": self.rms_rel_error,
                "max_rel_error": self.max_rel_error}


def predict(algorithm: str, nbytes: int, n: int, fitted: HostFit, *,
            collective: str = "allreduce", itemsize: int = 8) -> float:
    """Predicted seconds of one call."""
    x = features(algorithm, nbytes, n, fitted.cores, collective=collective,
                 itemsize=itemsize)
    return float(x @ fitted.params)


def fit_host(rows: list[dict], *, ncores: int | None = None,
             collective: str = "allreduce", min_bytes: int = 1 << 10,
             max_bytes: int = 1 << 40,
             algorithms: tuple[str, ...] | None = None) -> HostFit:
    """Fit the five numbers to ``warmup-bench --json`` rows (ours only);
    ``ncores`` defaults to this machine's."""
    ncores = ncores or cores()
    use = [r for r in rows if r["algorithm"] != "mpi"
           and r.get("collective", collective) == collective
           and (not algorithms or r["algorithm"] in algorithms)
           and min_bytes <= r["size"] <= max_bytes and r["time_us"] > 0]
    if len(use) < len(PARAMS):
        raise ValueError(f"need at least {len(PARAMS)} measurements, got "
                         f"{len(use)}")
    X = np.array([features(r["algorithm"], r["size"], r["ranks"], ncores,
                           collective=collective,
                           itemsize=ITEMSIZE.get(r.get("type"), 8))
                  for r in use])
    t = np.array([r["time_us"] * 1e-6 for r in use])
    p = nnls_rel(X, t)
    out = HostFit(*map(float, p), cores=ncores, points=len(use),
                  ranks=use[0]["ranks"] if len({r["ranks"] for r in use}) == 1
                  else None)
    pred = X @ p
    out.errors = [{"algorithm": r["algorithm"], "ranks": r["ranks"],
                   "size": r["size"], "measured_us": r["time_us"],
                   "predicted_us": float(q * 1e6),
                   "rel_error": float((q - m) / m)}
                  for r, q, m in zip(use, pred, t)]
    rel = (pred - t) / t
    out.rms_rel_error = float(np.sqrt(np.mean(rel ** 2)))
    out.max_rel_error = float(np.abs(rel).max())
    return out
