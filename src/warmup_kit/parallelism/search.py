"""Search all (tp, pp, dp, micro-batch) layouts for the fastest that fits.

Book, Chapter 1: the layout question Narayanan et al. 2021 answer by hand in
section 3.3 ("takeaways": TP up to the NVLink island, then PP to fit, then DP).
Here every legal layout is priced with
:func:`~warmup_kit.parallelism.step.iteration_time` and the ones that fit in
memory are ranked by iteration time.
"""
from __future__ import annotations

from typing import Iterable

from warmup_kit.model.hardware import Cluster, cluster as make_cluster
from warmup_kit.parallelism.step import (
    IterationResult, Transformer, layout_of, memory, step)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(model: Transformer, n_gpus: int, global_batch: int, *,
            max_tp: int, micro_batches: Iterable[int] = (1, 2, 4, 8),
            interleaves: Iterable[int] = (1,)
            ) -> Iterable[tuple[int, int, int, int, int]]:
    """Legal (tp, pp, dp, micro_batch, interleave) tuples for ``n_gpus``."""
    for tp in _divisors(n_gpus):
        if tp > max_tp or model.heads % tp or model.ffn % tp:
            continue
        for pp in _divisors(n_gpus // tp):
            dp = n_gpus // (tp * pp)
            if global_batch % dp:
                continue
            for v in interleaves:
                if model.layers % (pp * v) or (v > 1 and pp == 1):
                    continue
                for mb in micro_batches:
                    if (global_batch // dp) % mb == 0:
                        yield tp, pp, dp, mb, v


def layouts_nd(model: Transformer, n_gpus: int, global_batch: int, *,
               max_tp: int, micro_batches: Iterable[int] = (1, 2, 4, 8),
               interleaves: Iterable[int] = (1,), cps: Iterable[int] = (1,),
               zeros: Iterable[int] = (0,), eps: Iterable[int] = (1,)
               ) -> Iterable[dict]:
    """Legal layouts with the newer axes, as keyword dicts for
    :func:`iteration_time`: context parallelism ``cp`` (divides the
    sequence), ZeRO stage ``zero``, expert parallelism ``ep`` (divides DP
    and the experts); pipelines may be uneven (:func:`stage_layers`)."""
    zeros, eps, micro_batches = tuple(zeros), tuple(eps), tuple(micro_batches)
    interleaves = tuple(interleaves)
    for cp in cps:
        if n_gpus % cp or model.seq % cp:
            continue
        rest = n_gpus // cp
        for tp in _divisors(rest):
            if tp > max_tp or model.heads % tp or model.ffn % tp:
                continue
            for pp in _divisors(rest // tp):
                dp = rest // (tp * pp)
                if global_batch % dp or pp > model.layers:
                    continue
                for v in interleaves:
                    if v > 1 and (pp == 1 or model.layers % (pp * v)):
                        continue
                    for mb in micro_batches:
                        if (global_batch // dp) % mb:
                            continue
                        for ep in eps:
                            if ep > 1 and (dp % ep or not model.experts
                                           or model.experts % ep):
                                continue
                            for z in zeros:
                                if z and dp * cp == 1:
                                    continue
                                yield dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep,
                                           zero=z, micro_batch=mb,
                                           interleave=v)


def search(model: Transformer, cluster: Cluster | int, global_batch: int, *,
           system: str = "dgx-a100", top: int = 5,
           micro_batches: Iterable[int] = (1, 2, 4, 8),
           interleaves: Iterable[int] = (1,), max_tp: int | None = None,
           cps: Iterable[int] | None = None, zeros: Iterable[int] | None = None,
           eps: Iterable[int] | None = None,
           **kwargs) -> list[IterationResult]:
    """The ``top`` fastest layouts of ``model`` that fit in memory.

    Args:
        model: the transformer.
        cluster: a cluster, or a GPU count (whole nodes of ``system``).
        global_batch: sequences per iteration.
        micro_batches, interleaves: values to try.
        max_tp: largest TP size; default the NVLink island (TP beyond it
            crosses the network on every layer).
        cps, zeros, eps: context-parallel sizes, ZeRO stages and
            expert-parallel sizes to try (the newer axes; default: the
            3D search of tp, pp, dp only, with even pipelines).
        **kwargs: passed to :func:`iteration_time` (recompute, ...).

    Returns:
        Results sorted by ``total_s``; each has ``.config`` with the layout.
        Empty when nothing fits.
    """
    if isinstance(cluster, int):
        g = make_cluster(system).gpus_per_node
        cluster = make_cluster(system, -(-cluster // g))
        n_gpus = cluster.n_gpus
    else:
        n_gpus = cluster.n_gpus
    sysm = cluster.system
    island = sysm.nvlink_domain if sysm.nvlink else sysm.gpus_per_node
    max_tp = min(island, n_gpus) if max_tp is None else max_tp
    out = []
    if cps is None and zeros is None and eps is None:
        grid = (dict(tp=tp, pp=pp, dp=dp, micro_batch=mb, interleave=v)
                for tp, pp, dp, mb, v in layouts(
                    model, n_gpus, global_batch, max_tp=max_tp,
                    micro_batches=micro_batches, interleaves=interleaves))
    else:
        grid = layouts_nd(model, n_gpus, global_batch, max_tp=max_tp,
                          micro_batches=micro_batches,
                          interleaves=interleaves, cps=cps or (1,),
                          zeros=zeros or (0,), eps=eps or (1,))
    formula = kwargs.pop("flops_formula", "megatron")
    for kw in grid:
        lay = layout_of(global_batch=global_batch, **kw, **kwargs)
        if not memory(model, cluster, lay).fits:   # price only what fits
            continue
        out.append(step(model, cluster, lay, flops_formula=formula))
    out.sort(key=lambda r: r.total_s)
    return out[:top]
