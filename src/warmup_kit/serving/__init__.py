"""Serving is distributed too (book, Chapter 9).

The model, in :mod:`warmup_kit.serving.models` (never imports a transport
or anything that runs on ranks; :mod:`warmup_kit.model` and
:mod:`warmup_kit.parallelism` underneath):

* :mod:`~warmup_kit.serving.models.shapes`: published model shapes (Llama
  3, Mistral, Mixtral, OPT) and their parameter counts;
* :mod:`~warmup_kit.serving.models.kv_cache`: KV cache bytes per token, per
  request, per GPU of a TP group (replicated when tp > KV heads);
* :mod:`~warmup_kit.serving.models.decode`: per-token latency of
  tensor-parallel decode (memory-bound compute, two latency-bound
  all-reduces per layer on NCCL's LL protocol) and prefill time, by
  placement;
* :mod:`~warmup_kit.serving.models.disagg`: prefill/decode disaggregation,
  the KV cache shipped over NVLink, the network or PCIe, or recomputed;
* :mod:`~warmup_kit.serving.models.experts`: the MoE all-to-all (bytes and
  time, padded or dropless, by placement);

and, pure numpy, used by both sides:

* :mod:`~warmup_kit.serving.models.routing`: top-k routing with a capacity;
* :mod:`~warmup_kit.serving.models.toy`: a small decoder split
  Megatron-style.

On a communicator (the public collectives; no mpi4py import):

* :mod:`~warmup_kit.serving.tp_decode`: tensor-parallel greedy decoding;
* :mod:`~warmup_kit.serving.moe_layer`: a routed MoE layer over the uneven
  all-to-all;
* :mod:`~warmup_kit.serving.handoff`: the KV cache handed from prefill
  ranks to decode ranks by point-to-point;
* :mod:`~warmup_kit.serving.run`: the measured decode runs and their model
  on this machine.
"""
from warmup_kit.serving.models.kv_cache import (
    kv_bytes_per_request, kv_bytes_per_token, kv_split)
from warmup_kit.serving.models.shapes import MODELS, ModelShape, model

__all__ = ["MODELS", "ModelShape", "kv_bytes_per_request",
           "kv_bytes_per_token", "kv_split", "model"]
