"""Prefill on some ranks, decode on others: the KV cache handed over.

Book, Chapter 9 (disaggregation,
:mod:`warmup_kit.serving.models.disagg` for its costs). ``comm`` of
``2 tp`` ranks is split (``comm.split``) into a
*prefill* group (ranks ``0 .. tp-1``) and a *decode* group (ranks ``tp ..
2tp-1``), each tensor-parallel over its own sub-communicator. The prefill
group runs the prompts; prefill rank i sends decode rank ``tp + i`` the
first tokens and its shard of the KV cache (the heads decode rank i will
read) by point-to-point ``comm.send`` / ``comm.recv``; the decode group
installs it and generates. The tokens must equal single-process decoding.

Measured on the decode side: the hand-off (``reps`` times), the bytes the
transport counted, and, for comparison, the decode group computing the
same prefill itself (while the prefill group computes it for real, so
both run under the same load).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from warmup_kit.comm.base import Comm
from warmup_kit.machine import limit_blas_threads
from warmup_kit.serving.tp_decode import TPDecoder
from warmup_kit.serving.models.toy import ToyConfig, Weights, generate, prompts

_TAG = 4101


@dataclass(frozen=True)
class HandoffConfig:
    """The requests handed over."""

    toy: ToyConfig = ToyConfig()
    batch: int = 4
    prompt: int = 32
    new_tokens: int = 8
    reps: int = 5
    timeout_s: float = 60.0


def run_job(comm: Comm, cfg: HandoffConfig | None = None) -> dict:
    """Every rank: prefill or decode; facts on the decode ranks."""
    cfg = cfg or HandoffConfig()
    limit_blas_threads(1)
    if comm.size % 2:
        raise ValueError("the hand-off needs an even number of ranks")
    tp = comm.size // 2
    role = comm.rank // tp                      # 0: prefill, 1: decode
    peer = comm.rank + tp if role == 0 else comm.rank - tp
    group = comm.split(role, comm.rank)
    to = cfg.timeout_s
    try:
        w = Weights(cfg.toy)
        dec = TPDecoder(group, cfg.toy, cfg.batch, timeout=to, weights=w)
        p = prompts(cfg.toy, cfg.batch, cfg.prompt)
        first = np.empty(cfg.batch, np.int64)
        # both groups run the prompts at once: the prefill group for real,
        # the decode group as the alternative to the hand-off (recompute)
        tok, pre = dec.prefill(p)
        if role == 0:
            first[:] = tok
            kv = dec.cache.pack()
        else:
            dec = TPDecoder(group, cfg.toy, cfg.batch, timeout=to,
                            weights=w)          # an empty cache again
            kv = np.empty(cfg.batch * cfg.prompt * dec.cache.bytes_per_token
                          // 8)
        times, nbytes = [], []
        for _ in range(cfg.reps):
            comm.barrier(timeout=to)
            before = comm.stats.bytes_sent + comm.stats.bytes_received
            t0 = time.perf_counter()
            if role == 0:
                comm.send(first, peer, _TAG, timeout=to)
                comm.send(kv, peer, _TAG, timeout=to)
            else:
                comm.recv(first, peer, _TAG, timeout=to)
                comm.recv(kv, peer, _TAG, timeout=to)
            times.append(time.perf_counter() - t0)
            nbytes.append(comm.stats.bytes_sent + comm.stats.bytes_received
                          - before)
        if role == 0:
            return {"rank": comm.rank, "role": "prefill",
                    "prefill_s": pre.step_s, "kv_bytes": int(kv.nbytes),
                    "transfer_bytes": nbytes}
        dec.cache.unpack(kv, cfg.prompt)
        toks, steps = dec.decode(first, cfg.new_tokens)
        return {"rank": comm.rank, "role": "decode", "tp": tp,
                "tokens": toks.tolist(), "kv_bytes": int(kv.nbytes),
                "transfer_bytes": nbytes, "transfer_s": times,
                "recompute_s": pre.step_s,
                "bytes_per_token": dec.cache.bytes_per_token,
                "decode_step_s": float(np.median([s.step_s for s in steps]))}
    finally:
        group.close()


def reference_tokens(cfg: HandoffConfig) -> np.ndarray:
    """What single-process decoding of the same prompts generates."""
    return generate(cfg.toy, prompts(cfg.toy, cfg.batch, cfg.prompt),
                    cfg.new_tokens)


def rows(ranks: list[dict], cfg: HandoffConfig) -> list[dict]:
    """Per decode rank: the tokens against single-process decoding, the
    bytes received against the cache's size (its shard of the prompt's KV
    plus the first tokens), the hand-off's median time and the
    recomputation's."""
    ref = reference_tokens(cfg)
    out = []
    for r in ranks:
        if r["role"] != "decode":
            continue
        formula = cfg.batch * cfg.prompt * r["bytes_per_token"] + \
            cfg.batch * 8
        t = float(np.median(r["transfer_s"]))
        out.append({"rank": r["rank"], "tp": r["tp"],
                    "tokens_equal": bool(np.array_equal(
                        np.array(r["tokens"]), ref)),
                    "bytes": sorted(set(r["transfer_bytes"])),
                    "formula_bytes": formula, "transfer_s": t,
                    "gbps": formula / t / 1e9,
                    "recompute_s": r["recompute_s"],
                    "decode_step_s": r["decode_step_s"]})
    return out


__all__ = ["HandoffConfig", "reference_tokens", "rows", "run_job"]
