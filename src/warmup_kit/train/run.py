"""The measured runs of Chapter 7: bucket size x overlap on real ranks.

:func:`measure` runs on every rank (``launch(measure, n, args=(cfg,))``, or
on an :class:`~warmup_kit.comm.MPIComm` under mpirun): in each pass, one lone
all-reduce of each sweep size (for comparison: hot caches, ranks lined up)
and one training step of every (bucket cap, overlap) setting, all on one
communicator. What the record means (the model beside the measured steps)
is :mod:`warmup_kit.train.analysis`, which runs without ranks.
``benchmarks/overlap.py`` prints the table; the chapter loads its JSON
(``book/data/overlap.json``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from warmup_kit.collectives import all_gather, allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.train.data import global_batch, shard
from warmup_kit.train.ddp import DDP
from warmup_kit.train.mlp import MLP
from warmup_kit.machine import cores, load_average
from warmup_kit.train.timeline import ready_positions


@dataclass
class Config:
    """The toy job. 8 layers of 512 x 512 float64: 16 MiB of gradients,
    about as much communication as backward compute on 2 CPU cores."""
    widths: tuple = (512,) * 9
    batch_per_rank: int = 64
    #: by PyTorch's rule (a bucket closes once it holds the cap): 8
    #: buckets (a layer each), 4 (two layers), 2, 1 (nothing to overlap)
    bucket_sizes: tuple = (256 << 10, 4 << 20, 8 << 20, 32 << 20)
    steps: int = 15                  # timed passes (medians)
    warmup: int = 2                  # passes dropped
    lr: float = 0.001
    seed: int = 0
    algorithm: str = "ring"
    timeout_s: float = 120.0
    #: lone all-reduces the host model is fitted to
    sweep_bytes: tuple = tuple(4 << (2 * k) for k in range(5, 12, 2))


def _lone(comm: Comm, flat: np.ndarray, cfg: Config, alg: str,
          nbytes: int) -> float:
    buf = flat[:nbytes // flat.itemsize]
    comm.barrier(timeout=cfg.timeout_s)
    t0 = time.perf_counter()
    allreduce(buf, comm, out=buf, algorithm=alg, timeout=cfg.timeout_s)
    return time.perf_counter() - t0


def measure(comm: Comm, cfg: Config | None = None) -> dict | None:
    """Every setting on this rank; the record on rank 0 (None elsewhere).

    The settings are interleaved: each pass times one lone all-reduce of
    every sweep size and one step of every (bucket size, overlap) setting,
    so that load from elsewhere lands on all of them alike; the first
    ``cfg.warmup`` passes are dropped.
    """
    cfg = cfg or Config()
    base = MLP(cfg.widths, seed=cfg.seed)
    flat = comm.empty(sum(p.size for p in base.params))
    settings = [(b, o) for b in cfg.bucket_sizes for o in (False, True)]
    ddps = [DDP(base.copy(), comm, bucket_bytes=b, overlap=o,
                algorithm=cfg.algorithm, timeout=cfg.timeout_s, flat=flat)
            for b, o in settings]
    lone = {(a, nb): [] for a in ("ring", "tree") for nb in cfg.sweep_bytes}
    steps: list[list] = [[] for _ in settings]
    batch = cfg.batch_per_rank * comm.size
    for p in range(cfg.warmup + cfg.steps):
        for key in lone:
            dt = _lone(comm, flat, cfg, *key)
            if p >= cfg.warmup:
                lone[key].append(dt)
        x, t = global_batch(p, batch, cfg.widths[0], cfg.widths[-1])
        x, t = shard(x, comm.rank, comm.size), shard(t, comm.rank, comm.size)
        for i, ddp in enumerate(ddps):
            comm.barrier(timeout=cfg.timeout_s)
            st = ddp.step(x, t, cfg.lr)
            # how far the slowest rank's backward ended after this one's
            ends = all_gather(np.array([st.backward_end]), comm,
                              timeout=cfg.timeout_s)
            if p >= cfg.warmup:
                steps[i].append(dict(st.as_dict(), lag_s=float(
                    ends.max() - st.backward_end)))
    layer_of = [i // 2 for i in range(len(base.params))]
    runs = [{"bucket_bytes": b, "overlap": o,
             "bucket_nbytes": ddp.buckets.nbytes,
             "ready_after": ready_positions(ddp.buckets.members, base.layers,
                                            layer_of),
             "steps": st} for (b, o), ddp, st in zip(settings, ddps, steps)]
    sweep = [{"algorithm": a, "size": nb, "ranks": comm.size,
              "type": "double", "time_us": float(np.median(ts)) * 1e6}
             for (a, nb), ts in lone.items()]
    if comm.rank:
        return None
    return {"config": asdict(cfg), "ranks": comm.size, "cores": cores(),
            "loadavg": load_average(), "sweep": sweep, "runs": runs}


__all__ = ["Config", "measure"]
