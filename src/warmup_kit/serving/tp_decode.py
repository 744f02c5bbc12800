"""Tensor-parallel greedy decoding on a communicator (book, Chapter 9).

Every rank of ``comm`` holds its
:class:`~warmup_kit.serving.models.toy.Shard` of the toy decoder and its
part of the KV cache; each forward pass calls
:func:`warmup_kit.allreduce` twice per layer on the partial sums (the
public call, default settings unless ``algorithm`` says otherwise), so the
group computes exactly what one process computes with the whole model.
Each step is timed on the rank: the all-reduce calls (communication,
waits for slower ranks included) and the rest (compute), and the bytes
the transport counted.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from warmup_kit.collectives import allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.machine import limit_blas_threads
from warmup_kit.serving.models.toy import (
    KVCache, Shard, ToyConfig, Weights, forward, prompts)


@dataclass
class StepTime:
    """One forward pass on one rank.

    Attributes:
        step_s: the whole pass; ``comm_s`` in its all-reduce calls;
            ``compute_s`` the rest.
        calls: all-reduces issued (2 per layer).
        entries: ``time.perf_counter()`` as each all-reduce was called (one
            clock for every process of a host: ranks can compare them).
        bytes_sent: payload bytes the transport sent during the pass.
        tokens: positions processed per sequence (the prompt, or 1).
    """

    step_s: float
    comm_s: float
    calls: int
    bytes_sent: int
    tokens: int
    entries: list = field(default_factory=list)

    @property
    def compute_s(self) -> float:
        return self.step_s - self.comm_s

    def as_dict(self) -> dict:
        return dict(asdict(self), compute_s=self.compute_s)


class TPDecoder:
    """Greedy decoding of a batch of prompts, tensor-parallel over ``comm``.

    Args:
        comm: the TP group (a sub-communicator is fine).
        cfg: the toy's shape; every rank builds the same weights from
            ``cfg.seed`` and keeps its slice.
        batch: sequences decoded together.
        algorithm: of the all-reduces (the library default: ``"ring"``).
        timeout: seconds for each all-reduce.
    """

    def __init__(self, comm: Comm, cfg: ToyConfig, batch: int, *,
                 algorithm: str = "ring", timeout: float = 60.0,
                 weights: Weights | None = None) -> None:
        self.comm, self.cfg, self.batch = comm, cfg, batch
        self.algorithm, self.timeout = algorithm, timeout
        self.shard = Shard(weights or Weights(cfg), comm.size, comm.rank)
        self.cache = KVCache(self.shard, batch)
        self._comm_s = 0.0
        self._calls = 0
        self._entries: list[float] = []

    def _allreduce(self, x: np.ndarray) -> np.ndarray:
        if self.comm.size == 1:
            return x
        t0 = time.perf_counter()
        self._entries.append(t0)
        allreduce(x, self.comm, out=x, algorithm=self.algorithm,
                  timeout=self.timeout)
        self._comm_s += time.perf_counter() - t0
        self._calls += 1
        return x

    def forward(self, tokens: np.ndarray) -> tuple[np.ndarray, StepTime]:
        """One pass over ``tokens`` (batch, s): the next tokens and its
        timing."""
        self._comm_s, self._calls, self._entries = 0.0, 0, []
        before = self.comm.stats.bytes_sent
        t0 = time.perf_counter()
        logits = forward(self.shard, self.cache, tokens, self._allreduce)
        nxt = np.argmax(logits, axis=-1)
        st = StepTime(time.perf_counter() - t0, self._comm_s, self._calls,
                      self.comm.stats.bytes_sent - before, tokens.shape[1],
                      self._entries)
        return nxt, st

    def prefill(self, prompt: np.ndarray) -> tuple[np.ndarray, StepTime]:
        """The prompt pass: the first generated token of each sequence."""
        if prompt.shape[0] != self.batch:
            raise ValueError(f"expected {self.batch} prompts, got "
                             f"{prompt.shape[0]}")
        return self.forward(prompt)

    def decode(self, first: np.ndarray, new_tokens: int
               ) -> tuple[np.ndarray, list[StepTime]]:
        """Continue from ``first`` (batch,) until each sequence has
        ``new_tokens`` tokens (``first`` included); one pass per token."""
        out, steps = [np.asarray(first)], []
        for _ in range(new_tokens - 1):
            nxt, st = self.forward(out[-1][:, None])
            out.append(nxt)
            steps.append(st)
        return np.stack(out, axis=1), steps

    def generate(self, prompt: np.ndarray, new_tokens: int
                 ) -> tuple[np.ndarray, StepTime, list[StepTime]]:
        """Prefill then decode: (tokens, prefill timing, decode timings)."""
        first, pre = self.prefill(prompt)
        toks, steps = self.decode(first, new_tokens)
        return toks, pre, steps


def run_job(comm: Comm, cfg: ToyConfig | None = None, *, batch: int = 2,
            prompt: int = 8, new_tokens: int = 6,
            algorithm: str = "ring") -> dict:
    """Decode on every rank of ``comm``; JSON-able facts (the tokens, what
    each step cost in calls and bytes, the cache's bytes per token)."""
    cfg = cfg or ToyConfig()
    limit_blas_threads(1)
    dec = TPDecoder(comm, cfg, batch, algorithm=algorithm)
    toks, pre, steps = dec.generate(prompts(cfg, batch, prompt), new_tokens)
    return {"rank": comm.rank, "size": comm.size, "tokens": toks.tolist(),
            "prefill": {"calls": pre.calls, "bytes_sent": pre.bytes_sent},
            "steps": [{"calls": s.calls, "bytes_sent": s.bytes_sent}
                      for s in steps],
            "kv_bytes_per_token": dec.cache.bytes_per_token,
            "kv_heads": dec.shard.kv_heads, "q_heads": dec.shard.q_heads}


__all__ = ["StepTime", "TPDecoder", "run_job"]
