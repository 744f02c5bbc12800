"""The checks every transport must pass: DP, DDP with and without overlap,
and FSDP trained side by side on one tiny MLP (book, Chapter 7).

:func:`run_job` runs on every rank and returns JSON-able facts;
:func:`reference_params` is single-process training on the same global
batch. tests/test_train_ranks.py (sockets, shared memory, MPI) and the
chapter compare them.
"""
from __future__ import annotations

import hashlib

import numpy as np

from warmup_kit.train.data import global_batch, shard
from warmup_kit.train.ddp import DDP
from warmup_kit.train.fsdp import FSDP
from warmup_kit.train.mlp import MLP

WIDTHS = (12, 20, 20, 20, 6)       # 4 layers, 1,226 parameters
GLOBAL_BATCH = 24                  # splits over 1, 2, 3 and 4 ranks
STEPS = 3
LR = 0.01
BUCKET_BYTES = 1200                # several buckets, one weight > the cap
TIMEOUT_S = 30.0


def batch(step: int, rank: int = 0, size: int = 1):
    x, t = global_batch(step, GLOBAL_BATCH, WIDTHS[0], WIDTHS[-1])
    return shard(x, rank, size), shard(t, rank, size)


def flat(arrays) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in arrays])


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def reference_params(steps: int = STEPS) -> np.ndarray:
    """Single-process SGD on the whole global batch."""
    m = MLP(WIDTHS, seed=0)
    for k in range(steps):
        _, grads = m.gradients(*batch(k))
        m.sgd(grads, LR)
    return flat(m.params)


def run_job(comm, steps: int = STEPS) -> dict:
    """DDP with and without overlap, FSDP, and one step of each counted."""
    n, r = comm.size, comm.rank
    on = DDP(MLP(WIDTHS, seed=0), comm, bucket_bytes=BUCKET_BYTES,
             overlap=True, timeout=TIMEOUT_S)
    off = DDP(MLP(WIDTHS, seed=0), comm, bucket_bytes=BUCKET_BYTES,
              overlap=False, timeout=TIMEOUT_S)
    fsdp = FSDP(MLP(WIDTHS, seed=0), comm, timeout=TIMEOUT_S)
    grads_identical = True
    for k in range(steps):
        x, t = batch(k, r, n)
        on.step(x, t, LR)
        off.step(x, t, LR)
        fsdp.step(x, t, LR)
        grads_identical &= all(np.array_equal(a, b) for a, b in
                               zip(on.gradients(), off.gradients()))
    dp = flat(on.model.params)
    full = flat(fsdp.full_params())
    # traffic of one step each, counted where bytes cross the transport
    x, t = batch(steps, r, n)
    comm.barrier(timeout=TIMEOUT_S)
    before = comm.stats.bytes_sent
    on.step(x, t, LR)
    dp_bytes = comm.stats.bytes_sent - before
    comm.barrier(timeout=TIMEOUT_S)
    before = comm.stats.bytes_sent
    fsdp.step(x, t, LR)
    fsdp_bytes = comm.stats.bytes_sent - before
    padded = sum(s[2] for s in fsdp.sizes)
    return {"rank": r, "size": n, "dp_params": dp.tolist(),
            "dp_digest": digest(dp), "off_digest": digest(flat(
                off.model.params)), "grads_identical": bool(grads_identical),
            "fsdp_params": full.tolist(),
            "buckets": [list(map(int, m)) for m in on.buckets.members],
            "dp_bytes": int(dp_bytes), "fsdp_bytes": int(fsdp_bytes),
            "param_bytes": int(dp.nbytes), "padded_bytes": int(padded * 8),
            "shard_bytes": int(fsdp.shard_bytes)}
