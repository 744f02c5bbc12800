"""Grader for Chapters 1 and 6: a (TP, PP, DP) layout that fits a model,
checked by the parallelism model (:mod:`warmup_kit.parallelism`)."""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, choice, failed, integer, passed)
from warmup_kit.model.hardware import SYSTEMS, cluster
from warmup_kit.model.topology import Layout, group_shape
from warmup_kit.parallelism.memory import GIB
from warmup_kit.parallelism.step import Transformer, iteration_time

#: the exercise's model: 39 B parameters (Narayanan et al. 2021, table 1)
GPT_39B = Transformer(layers=48, hidden=8192, heads=64, seq=2048,
                      vocab=51200)


def check_layout(tp, pp, dp, *, model: Transformer = GPT_39B,
                 gpus: int = 64, system: str = "dgx-h100",
                 global_batch: int = 512, micro_batch: int = 1,
                 order: tuple[str, ...] = ("dp", "pp", "tp")) -> Result:
    """Passes when ``tp * pp * dp`` uses the ``gpus``, every TP group sits
    inside one NVLink island, and the model's memory per GPU fits (full
    recomputation, mixed-precision Adam; Chapter 1, "Memory: what one
    parameter costs")."""
    tp, pp, dp = (integer(k, v) for k, v in (("tp", tp), ("pp", pp),
                                             ("dp", dp)))
    choice("system", system, SYSTEMS)
    if not isinstance(model, Transformer):
        raise TypeError("model must be a warmup_kit.parallelism.step."
                        f"Transformer, got {type(model).__name__}")
    ex = f"layout t={tp}, p={pp}, d={dp} on {gpus} GPUs"
    if tp * pp * dp != gpus:
        return failed(ex, f"t*p*d = {tp * pp * dp}, not {gpus}",
                      "the three degrees multiply to the number of GPUs")
    c = cluster(system, -(-gpus // SYSTEMS[system].gpus_per_node))
    lay = Layout(tp, pp, dp, tuple(order))
    islands = max(group_shape(c, g)[0] for g in lay.groups("tp"))
    if islands > 1:
        return failed(ex, f"a TP group spans {islands} NVLink islands",
                      "TP all-reduces every layer: keep each TP group "
                      "inside one NVLink island (Chapter 6)")
    try:
        r = iteration_time(model, c, tp=tp, pp=pp, dp=dp,
                           global_batch=global_batch,
                           micro_batch=micro_batch, order=tuple(order))
    except ValueError as e:
        return failed(ex, f"not a legal layout: {e}",
                      "heads and the FFN must divide by t, the layers by p, "
                      "and the batch by d times the micro-batch")
    need = r.memory.total_bytes / GIB
    cap = r.memory.capacity_bytes / GIB
    if not r.fits:
        return failed(ex, f"needs {need:.0f} GiB per GPU, has {cap:.0f}",
                      "weights, gradients and Adam's state divide by t*p; "
                      "raise the model-parallel degrees")
    return passed(ex, f"TP inside an island, {need:.0f} of {cap:.0f} GiB "
                  f"per GPU, {r.total_s:.2f} s per iteration (model)")
