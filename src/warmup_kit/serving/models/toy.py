"""A small decoder in numpy, split Megatron-style over a TP group.

Book, Chapter 9. Llama-shaped (RMSNorm, grouped-query attention with a KV
cache, SwiGLU FFN, learned positions instead of rotary ones), float64,
deterministic weights from a seed. :class:`Shard` cuts it for rank r of a
tensor-parallel group of ``tp`` (Shoeybi et al. 2019, section 3):

* attention: the query heads split ``heads / tp`` per rank (columns of
  W_q), each rank keeping the KV heads its query heads read (columns of
  W_k, W_v; one head per rank, replicated, when ``tp > kv_heads``), and
  the rows of W_o that multiply its heads' outputs;
* FFN: columns of W_gate and W_up, the matching rows of W_down.

Each rank's attention output and FFN output is a *partial sum* of the
layer's result: :func:`forward` hands each to ``allreduce`` (two per
layer) and adds the sum to the residual stream. With ``tp = 1`` and the
identity for ``allreduce`` it is the plain single-process model, the
reference every TP run must reproduce token for token. The embedding and
the output layer are kept whole on every rank (Megatron-LM splits them by
vocabulary and adds one more collective; here they stay out of the
two-per-layer count).

Pure numpy: :mod:`warmup_kit.serving.tp_decode` runs it on a communicator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from warmup_kit.serving.models.kv_cache import kv_heads_per_rank
from warmup_kit.serving.models.shapes import ModelShape

EPS = 1e-6


@dataclass(frozen=True)
class ToyConfig:
    """The toy decoder's shape (defaults: 4 layers, hidden 256, 8 query
    heads over 2 KV heads, FFN 512, vocabulary 512)."""

    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 2
    ffn: int = 512
    vocab: int = 512
    max_seq: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must divide by heads, heads by kv_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def shape(self) -> ModelShape:
        """The toy as a :class:`ModelShape`, so the serving model's formulas
        (KV bytes, all-reduce volume) apply to it (with 8-byte elements)."""
        return ModelShape("toy", self.layers, self.hidden, self.heads,
                          self.kv_heads, self.head_dim, self.ffn, self.vocab,
                          positions=self.max_seq,
                          source="warmup_kit.serving.models.toy")


class Weights:
    """Every weight of the toy, drawn from ``cfg.seed`` (std 1/sqrt(fan-in))."""

    def __init__(self, cfg: ToyConfig) -> None:
        rng = np.random.default_rng(cfg.seed)
        h, f, d = cfg.hidden, cfg.ffn, cfg.head_dim

        def w(*shape):
            return rng.standard_normal(shape) / np.sqrt(shape[0])
        self.cfg = cfg
        self.embed = rng.standard_normal((cfg.vocab, h))
        self.pos = 0.1 * rng.standard_normal((cfg.max_seq, h))
        self.layers = [dict(
            wq=w(h, cfg.heads * d), wk=w(h, cfg.kv_heads * d),
            wv=w(h, cfg.kv_heads * d), wo=w(cfg.heads * d, h),
            w_gate=w(h, f), w_up=w(h, f), w_down=w(f, h),
            norm1=1 + 0.1 * rng.standard_normal(h),
            norm2=1 + 0.1 * rng.standard_normal(h))
            for _ in range(cfg.layers)]
        self.norm = 1 + 0.1 * rng.standard_normal(h)
        self.head = w(h, cfg.vocab)


class Shard:
    """Rank ``rank``'s slice of :class:`Weights` for a TP group of ``tp``.

    Attributes:
        q_heads: the global query heads this rank computes.
        kv_heads: the global KV heads it keeps (and caches).
        layers: per layer, its column/row slices (contiguous copies).
    """

    def __init__(self, weights: Weights, tp: int = 1, rank: int = 0) -> None:
        cfg = weights.cfg
        if not 0 <= rank < tp or cfg.heads % tp or cfg.ffn % tp:
            raise ValueError(f"tp = {tp} must divide the {cfg.heads} heads "
                             f"and FFN {cfg.ffn}; rank in [0, tp)")
        d, hl, fl = cfg.head_dim, cfg.heads // tp, cfg.ffn // tp
        kvl = kv_heads_per_rank(cfg.kv_heads, tp)
        group = cfg.heads // cfg.kv_heads        # query heads per KV head
        self.cfg, self.tp, self.rank = cfg, tp, rank
        self.q_heads = list(range(rank * hl, (rank + 1) * hl))
        first = self.q_heads[0] // group
        self.kv_heads = list(range(first, first + kvl))
        qc = slice(rank * hl * d, (rank + 1) * hl * d)
        kc = slice(first * d, (first + kvl) * d)
        fc = slice(rank * fl, (rank + 1) * fl)

        def c(a):
            return np.ascontiguousarray(a)
        self.layers = [dict(
            wq=c(L["wq"][:, qc]), wk=c(L["wk"][:, kc]), wv=c(L["wv"][:, kc]),
            wo=c(L["wo"][qc, :]), w_gate=c(L["w_gate"][:, fc]),
            w_up=c(L["w_up"][:, fc]), w_down=c(L["w_down"][fc, :]),
            norm1=L["norm1"], norm2=L["norm2"]) for L in weights.layers]
        self.embed, self.pos = weights.embed, weights.pos
        self.norm, self.head = weights.norm, weights.head


class KVCache:
    """One rank's cache: per layer K and V of shape (batch, kv heads kept,
    max_seq, head_dim), float64."""

    def __init__(self, shard: Shard, batch: int) -> None:
        cfg = shard.cfg
        shape = (batch, len(shard.kv_heads), cfg.max_seq, cfg.head_dim)
        self.k = [np.zeros(shape) for _ in range(cfg.layers)]
        self.v = [np.zeros(shape) for _ in range(cfg.layers)]
        self.length = 0

    @property
    def bytes_per_token(self) -> int:
        """What one token of one sequence takes in this rank's cache."""
        _, kvl, _, d = self.k[0].shape
        return len(self.k) * 2 * kvl * d * self.k[0].itemsize

    def pack(self) -> np.ndarray:
        """The filled part (every layer's K then V) as one contiguous
        buffer: what a prefill rank ships to a decode rank."""
        n = self.length
        return np.concatenate([np.ravel(a[:, :, :n]) for pair in
                               zip(self.k, self.v) for a in pair])

    def unpack(self, flat: np.ndarray, length: int) -> None:
        """Install a buffer made by :meth:`pack` of ``length`` tokens."""
        b, kvl, _, d = self.k[0].shape
        size = b * kvl * length * d
        if flat.size != 2 * len(self.k) * size:
            raise ValueError(f"a cache of {length} tokens has "
                             f"{2 * len(self.k) * size} elements, got "
                             f"{flat.size}")
        parts = flat.reshape(2 * len(self.k), b, kvl, length, d)
        for i, (k, v) in enumerate(zip(self.k, self.v)):
            k[:, :, :length] = parts[2 * i]
            v[:, :, :length] = parts[2 * i + 1]
        self.length = length


def rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * g


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def attention_block(shard: Shard, cache: KVCache, layer: int,
                    x: np.ndarray, start: int) -> np.ndarray:
    """This rank's heads on the residual stream ``x``: norm, project, cache
    K and V at ``start``, attend causally, multiply by its rows of W_o (a
    partial sum of the layer's attention output)."""
    L = shard.layers[layer]
    hn = rmsnorm(x, L["norm1"])
    b, s, _ = hn.shape
    d = shard.cfg.head_dim
    q = (hn @ L["wq"]).reshape(b, s, -1, d)
    k = (hn @ L["wk"]).reshape(b, s, -1, d).transpose(0, 2, 1, 3)
    v = (hn @ L["wv"]).reshape(b, s, -1, d).transpose(0, 2, 1, 3)
    end = start + s
    cache.k[layer][:, :, start:end] = k
    cache.v[layer][:, :, start:end] = v
    keys, vals = cache.k[layer][:, :, :end], cache.v[layer][:, :, :end]
    # query i (position start + i) sees keys 0 .. start + i
    mask = np.arange(end)[None, :] > (start + np.arange(s))[:, None]
    # local query heads in groups sharing one KV head: (b, kv, g, s, d)
    kvl = len(shard.kv_heads)
    qg = q.transpose(0, 2, 1, 3).reshape(b, kvl, -1, s, d)
    sc = np.einsum("bkgsd,bktd->bkgst", qg, keys) / np.sqrt(d)
    sc[..., mask] = -np.inf
    sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
    sc /= sc.sum(axis=-1, keepdims=True)
    out = np.einsum("bkgst,bktd->bkgsd", sc, vals)
    out = out.reshape(b, -1, s, d).transpose(0, 2, 1, 3)
    return out.reshape(b, s, -1) @ L["wo"]


def ffn_block(shard: Shard, layer: int, x: np.ndarray) -> np.ndarray:
    """This rank's FFN columns on ``x``: a partial sum of the FFN output."""
    L = shard.layers[layer]
    hn = rmsnorm(x, L["norm2"])
    return (silu(hn @ L["w_gate"]) * (hn @ L["w_up"])) @ L["w_down"]


def forward(shard: Shard, cache: KVCache, tokens: np.ndarray,
            allreduce: Callable[[np.ndarray], np.ndarray] | None = None
            ) -> np.ndarray:
    """Run ``tokens`` (batch, s) from position ``cache.length``; extend the
    cache; return the logits of the last position (batch, vocab).

    ``allreduce`` sums a partial result over the TP group (called twice
    per layer; None: a group of one).
    """
    reduce = allreduce or (lambda x: x)
    tokens = np.asarray(tokens)
    b, s = tokens.shape
    start = cache.length
    if start + s > shard.cfg.max_seq:
        raise ValueError(f"{start + s} positions > max_seq "
                         f"{shard.cfg.max_seq}")
    x = shard.embed[tokens] + shard.pos[start:start + s]
    for i in range(len(shard.layers)):
        x = x + reduce(attention_block(shard, cache, i, x, start))
        x = x + reduce(ffn_block(shard, i, x))
    cache.length = start + s
    return rmsnorm(x[:, -1], shard.norm) @ shard.head


def prompts(cfg: ToyConfig, batch: int, length: int, seed: int = 1
            ) -> np.ndarray:
    """Deterministic prompts: (batch, length) token ids."""
    return np.random.default_rng(seed).integers(0, cfg.vocab,
                                                (batch, length))


def generate(cfg: ToyConfig, prompt: np.ndarray, new_tokens: int
             ) -> np.ndarray:
    """Single-process greedy decoding: the reference (batch, new_tokens)."""
    shard = Shard(Weights(cfg))
    cache = KVCache(shard, prompt.shape[0])
    out = [np.argmax(forward(shard, cache, prompt), axis=-1)]
    for _ in range(new_tokens - 1):
        out.append(np.argmax(forward(shard, cache, out[-1][:, None]),
                             axis=-1))
    return np.stack(out, axis=1)


__all__ = ["KVCache", "Shard", "ToyConfig", "Weights", "attention_block",
           "ffn_block", "forward",
           "generate", "prompts", "rmsnorm", "silu"]
