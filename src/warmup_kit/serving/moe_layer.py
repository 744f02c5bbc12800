"""A routed mixture-of-experts layer on real ranks (book, Chapter 9).

Expert parallelism as serving engines run it (DeepSpeed-MoE, Megatron-LM's
token dispatcher): the ``experts`` of the layer are laid out in contiguous
blocks over the ``ep`` ranks of ``comm``; each rank routes its own tokens
(:func:`warmup_kit.serving.models.routing.route`, top-k with a capacity), then

1. sends every other rank the number of rows it will get for each of that
   rank's experts (an even :func:`warmup_kit.all_to_all` of E integers);
2. *dispatch*: sends each kept choice's hidden vector to the rank of its
   expert, rows sorted by expert, with the uneven all-to-all
   (``all_to_all(..., send_counts=..., recv_counts=...)``);
3. runs each local expert (a SwiGLU FFN) on the rows it received;
4. *combine*: sends the outputs back the same way, reversed, and sums each
   token's choices weighted by its gate.

:func:`reference` computes the same layer densely in one process (every
rank's tokens routed as their rank routes them); :func:`run_job` runs it on
every rank and reports the bytes the transport counted in each phase.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from warmup_kit.collectives import all_to_all
from warmup_kit.comm.base import Comm
from warmup_kit.machine import limit_blas_threads
from warmup_kit.serving.models.routing import Routing, dispatch_bytes, route
from warmup_kit.serving.models.toy import silu


@dataclass(frozen=True)
class MoEConfig:
    """The layer and its tokens (float64)."""

    hidden: int = 64
    ffn: int = 128
    experts: int = 8
    top_k: int = 2
    capacity_factor: float | None = 1.25
    tokens_per_rank: int = 64
    seed: int = 0
    timeout_s: float = 60.0


class Experts:
    """Router and expert weights, the same on every rank (from the seed)."""

    def __init__(self, cfg: MoEConfig) -> None:
        rng = np.random.default_rng(cfg.seed)
        h, f, e = cfg.hidden, cfg.ffn, cfg.experts
        self.router = rng.standard_normal((h, e)) / np.sqrt(h)
        self.gate = rng.standard_normal((e, h, f)) / np.sqrt(h)
        self.up = rng.standard_normal((e, h, f)) / np.sqrt(h)
        self.down = rng.standard_normal((e, f, h)) / np.sqrt(f)

    def ffn(self, e: int, x: np.ndarray) -> np.ndarray:
        """Expert ``e`` on the rows ``x``."""
        return (silu(x @ self.gate[e]) * (x @ self.up[e])) @ self.down[e]


def tokens(cfg: MoEConfig, groups: int) -> np.ndarray:
    """Every group's tokens, (groups, tokens_per_rank, hidden)."""
    rng = np.random.default_rng(cfg.seed + 1)
    return rng.standard_normal((groups, cfg.tokens_per_rank, cfg.hidden))


def routing(cfg: MoEConfig, w: Experts, x: np.ndarray) -> Routing:
    return route(x @ w.router, cfg.top_k, cfg.capacity_factor)


def combine(r: Routing, rows: np.ndarray, tok: np.ndarray,
            choice: np.ndarray) -> np.ndarray:
    """Each token's kept choices summed in choice order, weighted by the
    gate; ``rows[i]`` is the expert output of (token ``tok[i]``, choice
    ``choice[i]``)."""
    part = np.zeros((r.tokens, r.expert.shape[1], rows.shape[1]))
    part[tok, choice] = rows * r.weight[tok, choice][:, None]
    return part.sum(axis=1)


def reference(cfg: MoEConfig, ranks: int) -> np.ndarray:
    """The layer's output for every rank's tokens, computed densely in one
    process (each rank's block routed as that rank routes it): (ranks,
    tokens_per_rank, hidden)."""
    w = Experts(cfg)
    x = tokens(cfg, ranks)
    out = np.empty_like(x)
    for g in range(x.shape[0]):
        r = routing(cfg, w, x[g])
        tok, choice = np.nonzero(r.keep)
        rows = np.stack([w.ffn(int(r.expert[t, j]), x[g, t])
                         for t, j in zip(tok, choice)]) if tok.size else \
            np.zeros((0, cfg.hidden))
        out[g] = combine(r, rows, tok, choice)
    return out


@dataclass
class Phase:
    """Bytes sent and seconds of one phase on one rank."""

    bytes_sent: int
    seconds: float


def moe_forward(comm: Comm, cfg: MoEConfig, w: Experts, x: np.ndarray
                ) -> tuple[np.ndarray, dict]:
    """The layer on ``comm`` (the EP group) for this rank's tokens ``x``.

    Returns:
        the output rows, and facts: ``send_counts`` (rows to each rank),
        ``dropped``, and a :class:`Phase` for ``counts``, ``dispatch``,
        ``experts`` and ``combine``.
    """
    ep, me = comm.size, comm.rank
    if cfg.experts % ep:
        raise ValueError(f"{cfg.experts} experts do not split over {ep} "
                         "ranks")
    local = cfg.experts // ep
    r = routing(cfg, w, x)
    tok, choice = np.nonzero(r.keep)
    ex = r.expert[tok, choice]
    order = np.lexsort((tok, ex))            # by expert, then token
    tok, choice, ex = tok[order], choice[order], ex[order]
    per_expert = np.bincount(ex, minlength=cfg.experts).astype(np.int64)
    send_counts = per_expert.reshape(ep, local).sum(axis=1)
    phases: dict[str, Phase] = {}

    def timed(name, fn):
        before, t0 = comm.stats.bytes_sent, time.perf_counter()
        out = fn()
        phases[name] = Phase(comm.stats.bytes_sent - before,
                             time.perf_counter() - t0)
        return out
    to = cfg.timeout_s
    # 1: rows for each of my experts from every rank: (ep, local)
    got_counts = timed("counts", lambda: all_to_all(
        per_expert, comm, timeout=to)).reshape(ep, local)
    recv_counts = got_counts.sum(axis=1)
    # 2: dispatch, rows sorted by expert
    got = timed("dispatch", lambda: all_to_all(
        np.ascontiguousarray(x[tok]), comm, send_counts=send_counts,
        recv_counts=recv_counts, timeout=to))

    # 3: each local expert on the rows it got, from every source
    def run_experts():
        out = np.empty_like(got)
        starts = np.concatenate([[0], np.cumsum(got_counts.ravel())])
        for e in range(local):
            idx = np.concatenate([np.arange(starts[i * local + e],
                                            starts[i * local + e + 1])
                                  for i in range(ep)]).astype(np.int64)
            if idx.size:
                out[idx] = w.ffn(me * local + e, got[idx])
        return out
    done = timed("experts", run_experts)
    # 4: combine: the same rows back, reversed
    back = timed("combine", lambda: all_to_all(
        done, comm, send_counts=recv_counts, recv_counts=send_counts,
        timeout=to))
    y = combine(r, back, tok, choice)
    return y, {"send_counts": [int(c) for c in send_counts],
               "dropped": r.dropped, "capacity": r.capacity,
               "phases": {k: asdict(v) for k, v in phases.items()}}


def run_job(comm: Comm, cfg: MoEConfig | None = None, ep: int | None = None
            ) -> dict:
    """The layer on every rank: groups of ``ep`` consecutive ranks
    (``comm.split``) each route their own tokens; JSON-able facts."""
    cfg = cfg or MoEConfig()
    limit_blas_threads(1)
    ep = ep or comm.size
    if comm.size % ep:
        raise ValueError(f"ep = {ep} must divide the {comm.size} ranks")
    group = comm.split(comm.rank // ep, comm.rank) if ep < comm.size \
        else comm
    try:
        w = Experts(cfg)
        x = tokens(cfg, comm.size)[comm.rank]
        y, facts = moe_forward(group, cfg, w, x)
    finally:
        if group is not comm:
            group.close()
    return dict(facts, rank=comm.rank, group=comm.rank // ep, ep=ep,
                output=y.tolist(), hidden=cfg.hidden, itemsize=8)


def matches_reference(ranks: list[dict], cfg: MoEConfig,
                      tol: float = 1e-12) -> bool:
    """Every rank's output equals the dense single-process layer's."""
    ref = reference(cfg, len(ranks))
    return all(np.allclose(np.array(r["output"]), ref[r["rank"]], rtol=tol,
                           atol=tol) for r in ranks)


def byte_rows(ranks: list[dict]) -> list[dict]:
    """Per rank: dispatch and combine bytes the transport counted, beside
    the bytes its group's routing implies
    (:func:`~warmup_kit.serving.models.routing.dispatch_bytes`)."""
    out = []
    for g in sorted({r["group"] for r in ranks}):
        group = sorted((r for r in ranks if r["group"] == g),
                       key=lambda r: r["rank"])
        counts = np.array([r["send_counts"] for r in group])
        h, item = group[0]["hidden"], group[0]["itemsize"]
        disp = dispatch_bytes(counts, h, item)
        comb = dispatch_bytes(counts.T, h, item)
        for i, r in enumerate(group):
            ph = r["phases"]
            out.append({"rank": r["rank"], "group": g, "ep": r["ep"],
                        "send_counts": r["send_counts"],
                        "kept": int(counts[i].sum()), "dropped": r["dropped"],
                        "dispatch_bytes": ph["dispatch"]["bytes_sent"],
                        "dispatch_formula": int(disp[i]),
                        "combine_bytes": ph["combine"]["bytes_sent"],
                        "combine_formula": int(comb[i]),
                        "counts_bytes": ph["counts"]["bytes_sent"],
                        "dispatch_s": ph["dispatch"]["seconds"],
                        "combine_s": ph["combine"]["seconds"],
                        "experts_s": ph["experts"]["seconds"]})
    return out


__all__ = ["Experts", "MoEConfig", "Phase", "byte_rows", "combine",
           "matches_reference", "moe_forward", "reference", "routing",
           "run_job", "tokens"]
