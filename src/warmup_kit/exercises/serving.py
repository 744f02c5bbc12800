"""Grader for Chapter 9: the KV cache of a served model, checked by
:mod:`warmup_kit.serving.models.kv_cache`."""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, close, failed, integer, number, off_by, passed)
from warmup_kit.serving.models.kv_cache import kv_per_gpu_bytes
from warmup_kit.serving.models.shapes import model


def check_kv_cache(answer_bytes, *, model_name: str, tp: int, batch: int,
                   context: int, bytes_per: int = 2,
                   rel: float = 0.005) -> Result:
    """KV-cache bytes on each GPU of a TP group of ``tp`` for ``batch``
    requests of ``context`` tokens (Chapter 9, "The KV cache")."""
    a = number("answer_bytes", answer_bytes)
    if not isinstance(model_name, str):
        raise TypeError("model_name must be a string such as 'Llama 3 70B'")
    m = model(model_name)
    tp, batch = integer("tp", tp), integer("batch", batch)
    context, bytes_per = integer("context", context), integer("bytes_per",
                                                              bytes_per)
    truth = kv_per_gpu_bytes(m, tp, batch=batch, context=context,
                             bytes_per=bytes_per)
    ex = f"KV cache per GPU, {model_name}, t={tp}"
    if close(a, truth, rel):
        return passed(ex, f"{a / 2**30:.2f} GiB per GPU agrees with "
                      "kv_cache.kv_per_gpu_bytes")
    return failed(ex, f"{a / 2**30:.2f} GiB per GPU is {off_by(a, truth)}",
                  "per token: layers x 2 (K and V) x KV heads x head "
                  "width x bytes; a TP group splits the KV heads, and "
                  "replicates them when t exceeds their number")
