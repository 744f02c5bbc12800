"""The measured tensor-parallel decode of Chapter 9, and its model.

:func:`measure` runs on every rank (``launch(measure, n, args=(cfg,))``, or
on an :class:`~warmup_kit.comm.MPIComm` under mpirun). Each pass decodes
the same prompts once per all-reduce algorithm (the library default
``ring``, and ``recursive_doubling``: fewer rounds, the same bytes or
more) and times lone all-reduces of a sweep of sizes around the decode's
message (``batch x hidden`` float64) two ways: back to back, and each
right after the block of the toy's own compute that precedes it in the
loop (a layer's attention or FFN on the decode batch, on a scratch
cache). Everything runs on one
communicator, the settings interleaved so that load from elsewhere falls
on all of them.

:func:`compare` is the model of Chapter 9 on this machine: a decode step
costs its compute plus two all-reduces per layer, and an all-reduce of a
few KB costs its latency. The all-reduce cost comes from the host model
(:mod:`warmup_kit.measure.fit_host`) *fitted to the lone all-reduces of
a sweep*, never to the decode loop itself; the compute is the step's
measured time outside its all-reduce calls. By default the fit is to the
sweep after compute: on this machine an all-reduce called back to back
costs less than the same call after compute (its code and buffers still
in cache, the ranks already lined up by the previous call), and the model
fitted to those misses the loop by tens of percent (Chapter 9's stored
run: 11-43% of the step). :func:`latency_share` says how
much of the fitted cost at the decode's size is per-call and per-round
latency rather than bytes.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from warmup_kit.collectives import all_gather, allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.machine import cores, limit_blas_threads, load_average
from warmup_kit.measure import fit_host as H
from warmup_kit.schedule import traffic
from warmup_kit.algorithms import build
from warmup_kit.serving.models.toy import (
    KVCache, Shard, ToyConfig, Weights, attention_block, ffn_block, generate,
    prompts)
from warmup_kit.serving.tp_decode import TPDecoder


@dataclass
class RunConfig:
    """What :func:`measure` runs (defaults: about 10 s on 2 cores)."""

    toy: ToyConfig = field(default_factory=ToyConfig)
    batch: int = 4
    prompt: int = 16
    new_tokens: int = 9              # 8 decode steps after the prefill
    passes: int = 12                 # short passes: sweep and loop side by side
    warmup: int = 1                  # passes dropped
    algorithms: tuple = ("ring", "recursive_doubling")
    sweep_bytes: tuple = (256, 1024, 4096, 8192, 16384, 65536, 262144)
    sweep_reps: int = 8              # calls per size and pass
    timeout_s: float = 60.0

    @property
    def message_bytes(self) -> int:
        """One decode all-reduce: batch x hidden float64."""
        return self.batch * self.toy.hidden * 8


#: how the sweep's all-reduces are called: one after the other, or each
#: right after the toy's own compute that precedes it in the decode loop
SWEEPS = ("back_to_back", "after_compute")


def compute_burst(cfg: RunConfig, w: Weights, rank: int, size: int):
    """The compute that precedes each all-reduce of a decode step, on a
    scratch cache: call ``i`` runs layer ``i // 2 % layers``'s attention
    (``i`` even) or FFN block (odd) of this rank's slice on the decode
    batch, at the prompt's end."""
    shard = Shard(w, size, rank)
    cache = KVCache(shard, cfg.batch)
    x = np.random.default_rng(0).standard_normal((cfg.batch, 1,
                                                  cfg.toy.hidden))
    start = cfg.prompt

    def burst(i: int) -> None:
        layer = i // 2 % cfg.toy.layers
        if i % 2:
            ffn_block(shard, layer, x)
        else:
            attention_block(shard, cache, layer, x, start)
    return burst


def _sweep(comm: Comm, cfg: RunConfig, alg: str, nbytes: int,
           burst=None) -> list[float]:
    buf = np.ones(nbytes // 8)
    comm.barrier(timeout=cfg.timeout_s)
    out = []
    for i in range(cfg.sweep_reps):
        if burst is not None:
            burst(i)
        t0 = time.perf_counter()
        allreduce(buf, comm, out=buf, algorithm=alg, timeout=cfg.timeout_s)
        out.append(time.perf_counter() - t0)
    return out


def _row(s) -> dict:
    d = s.as_dict()
    d.pop("entries")
    return d


def lags(comm: Comm, steps, timeout: float) -> np.ndarray:
    """Per step, how long this rank's all-reduces waited for the last rank
    to call them: the sum over the step's calls of (latest entry over the
    ranks - this rank's entry), from the entry times every rank records
    on the host's one clock."""
    mine = np.array([s.entries for s in steps], dtype=np.float64)
    every = all_gather(mine.ravel(), comm, timeout=timeout).reshape(
        (comm.size,) + mine.shape)
    return (every.max(axis=0) - mine).sum(axis=1)


def measure(comm: Comm, cfg: RunConfig | None = None) -> dict | None:
    """Every setting on this rank; the record on rank 0 (None elsewhere)."""
    cfg = cfg or RunConfig()
    limit_blas_threads(1)
    w = Weights(cfg.toy)
    p = prompts(cfg.toy, cfg.batch, cfg.prompt)
    steps: dict = {a: [] for a in cfg.algorithms}
    prefills: dict = {a: [] for a in cfg.algorithms}
    lone: dict = {(m, a, b): [] for m in SWEEPS for a in cfg.algorithms
                  for b in cfg.sweep_bytes}
    burst = compute_burst(cfg, w, comm.rank, comm.size)
    tokens: dict = {}
    for k in range(cfg.warmup + cfg.passes):
        for a in cfg.algorithms:
            dec = TPDecoder(comm, cfg.toy, cfg.batch, algorithm=a,
                            timeout=cfg.timeout_s, weights=w)
            comm.barrier(timeout=cfg.timeout_s)
            toks, pre, st = dec.generate(p, cfg.new_tokens)
            tokens[a] = toks
            lag = lags(comm, st, cfg.timeout_s)
            if k >= cfg.warmup:
                steps[a] += [dict(_row(s), lag_s=float(g))
                             for s, g in zip(st, lag)]
                prefills[a].append(_row(pre))
        for m, a, b in lone:
            ts = _sweep(comm, cfg, a, b,
                        burst if m == "after_compute" else None)
            if k >= cfg.warmup:
                lone[(m, a, b)] += ts
    # every rank must hold the same tokens
    same = {a: bool(np.all(all_gather(t.ravel(), comm, timeout=cfg.timeout_s)
                           .reshape(comm.size, -1) == t.ravel()))
            for a, t in tokens.items()}
    if comm.rank:
        return None
    ref = generate(cfg.toy, p, cfg.new_tokens)
    sweep = [{"sweep": m, "algorithm": a, "size": b, "ranks": comm.size,
              "type": "double", "time_us": float(np.median(ts)) * 1e6}
             for (m, a, b), ts in lone.items()]
    return {"config": asdict(cfg), "ranks": comm.size, "cores": cores(),
            "loadavg": load_average(), "steps": steps, "prefill": prefills,
            "sweep": sweep, "tokens": ref.tolist(),
            "tokens_equal": {a: bool(np.array_equal(t, ref))
                             for a, t in tokens.items()},
            "tokens_same_on_every_rank": same}


def allreduce_bytes(algorithm: str, nbytes: int, n: int, rank: int = 0
                    ) -> int:
    """Bytes ``rank`` sends in one all-reduce of ``nbytes`` float64 (the
    schedule's own traffic: 2(N-1)/N of the buffer for the ring)."""
    if n < 2:
        return 0
    return traffic(build("allreduce", algorithm, n), nbytes,
                   itemsize=8).bytes_sent[rank]


def host_fit(record: dict, sweep: str = "after_compute") -> H.HostFit:
    """The host model fitted to the record's lone all-reduces of one
    ``sweep`` (:data:`SWEEPS`)."""
    if sweep not in SWEEPS:
        raise ValueError(f"sweep must be one of {SWEEPS}")
    return H.fit_host([r for r in record["sweep"] if r["sweep"] == sweep],
                      min_bytes=0, ncores=record["cores"])


def latency_share(fit: H.HostFit, algorithm: str, nbytes: int, n: int
                  ) -> float:
    """Fraction of the fitted all-reduce cost that does not grow with the
    bytes: the call, its rounds, messages and rendezvous, as against bytes
    copied and reduced."""
    x = H.features(algorithm, nbytes, n, fit.cores)
    parts = x * fit.params            # [call, R a, M mu, B beta, G gamma, V rho]
    total = float(parts.sum())
    return float(parts[[0, 1, 2, 5]].sum()) / total if total else 1.0


def compare(record: dict, sweep: str = "after_compute") -> list[dict]:
    """Per algorithm: the measured decode step (medians over every step of
    every pass) beside the model's, ``compute + 2 layers x all-reduce``,
    the all-reduce from the host model fitted to ``sweep``. ``error`` is
    the median over the steps of each step's model (its own measured
    compute plus the modelled all-reduces) against that step."""
    fit = host_fit(record, sweep)
    cfg = record["config"]
    n, layers = record["ranks"], cfg["toy"]["layers"]
    nbytes = cfg["batch"] * cfg["toy"]["hidden"] * 8
    out = []
    for alg, st in record["steps"].items():
        step = float(np.median([s["step_s"] for s in st]))
        comm = float(np.median([s["comm_s"] for s in st]))
        compute = float(np.median([s["compute_s"] for s in st]))
        lag = float(np.median([s["lag_s"] for s in st]))
        call = H.predict(alg, nbytes, n, fit) if n > 1 else 0.0
        model_comm = 2 * layers * call
        calls = {s["calls"] for s in st}
        sent = {s["bytes_sent"] for s in st}
        out.append({
            "algorithm": alg, "ranks": n, "step_ms": step * 1e3,
            "compute_ms": compute * 1e3, "comm_ms": comm * 1e3,
            "model_comm_ms": model_comm * 1e3, "lag_ms": lag * 1e3,
            "model_step_ms": (compute + model_comm) * 1e3,
            # step by step: the model of step i is fed by step i's compute
            "error": float(np.median([(s["compute_s"] + model_comm)
                                      / s["step_s"] - 1 for s in st])),
            "comm_error": model_comm / comm - 1 if comm else 0.0,
            "calls_per_step": sorted(calls),
            "bytes_per_step": sorted(sent),
            "formula_bytes_per_step": 2 * layers * allreduce_bytes(
                alg, nbytes, n),
            "latency_share": latency_share(fit, alg, nbytes, n)
            if n > 1 else 1.0,
            "tokens_equal": record["tokens_equal"][alg]})
    return out


__all__ = ["RunConfig", "allreduce_bytes", "compare", "host_fit",
           "latency_share", "measure"]
