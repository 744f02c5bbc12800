"""The newer parallel axes: byte counts and rules of thumb (Chapter 1).

Their step-time costs live in :mod:`warmup_kit.parallelism.costs` (one
module per axis); this module keeps what the chapters quote.

* Context parallelism (ring attention; Liu et al. 2023, Megatron-LM's
  ``context_parallel_size``): the sequence is split over ``cp`` ranks; in
  every layer each rank passes its K and V blocks around the CP ring,
  ``cp - 1`` steps of ``b (s/cp) 2 kv_dim / t`` elements, overlapped with
  the attention of the block it already holds.
* ZeRO stages (Rajbhandari et al. 2019) and FSDP: stage 1 shards the
  optimizer state over the data-parallel group, stage 2 also the gradients,
  stage 3 (FSDP) also the weights. Stages 1-2 move what plain DP moves (a
  reduce-scatter of gradients and an all-gather of weights, together one
  all-reduce: 2 passes over the parameters); stage 3 gathers the weights
  again before each forward and each backward: 3 passes.
* Expert parallelism (Lepikhin et al. 2020; Fedus et al. 2022): the
  experts of each MoE layer are split over ``ep`` ranks; each token goes to
  ``top_k`` experts, padded up to a capacity factor, by an all-to-all before
  the expert FFN and another after it (dispatch and combine).

The rank grid: TP innermost, then CP, then PP, then DP (as Megatron-LM
orders tp-cp-...-dp-pp when PP spans nodes); expert-parallel groups are
``ep`` consecutive DP ranks.
"""
from __future__ import annotations

from warmup_kit.parallelism.costs.common import collective_s
from warmup_kit.parallelism.layout import ZERO_SHARDS

__all__ = ["ZERO_SHARDS", "collective_s", "moe_all_to_all_s",
           "a2a_bytes_per_token", "zero_traffic_bytes", "comm_bound_tokens",
           "cp_hidden_tokens"]


def moe_all_to_all_s(cluster: Cluster, *, tokens: float, hidden: int,
                     top_k: int, capacity_factor: float, bytes_per: int,
                     shape: tuple[int, int, int]) -> float:
    """One MoE layer's forward all-to-alls (dispatch + combine) per GPU:
    each of ``tokens`` sends ``top_k * capacity_factor`` copies of its
    hidden vector out and gets as many back."""
    nbytes = tokens * top_k * capacity_factor * hidden * bytes_per
    return 2 * collective_s(cluster, "all_to_all", nbytes, shape)


def a2a_bytes_per_token(hidden: int, top_k: int, capacity_factor: float,
                        ep: int, bytes_per: int = 2) -> float:
    """Bytes one token sends to other GPUs per MoE layer, forward and
    backward (dispatch and combine, twice): the ``(ep-1)/ep`` of its
    ``top_k * capacity_factor`` copies that leave the GPU."""
    return 4 * top_k * capacity_factor * hidden * bytes_per * (ep - 1) / ep


def zero_traffic_bytes(params: float, stage: int, dp: int,
                       grad_bytes: int = 4, weight_bytes: int = 2,
                       micro_batches: int = 1) -> float:
    """Bytes one GPU sends per step for data parallelism at ZeRO ``stage``
    (ring collectives, ``(dp-1)/dp`` of each pass): stages 0-2 reduce the
    gradients and gather the weights once (2 passes), stage 3 gathers the
    weights for the forward and again for the backward and reduce-scatters
    the gradients, layer by layer, for every one of ``micro_batches``
    (3 passes each, as FSDP2 runs gradient accumulation by default; the
    step model, :mod:`warmup_kit.parallelism.costs.dp`, does the same)."""
    f = (dp - 1) / dp
    passes = grad_bytes + weight_bytes * (2 if stage == 3 else 1)
    if stage == 3:
        passes *= micro_batches
    if stage == 0:           # plain DP all-reduces the gradients: 2 passes
        passes = 2 * grad_bytes
    return f * params * passes


def comm_bound_tokens(peak_flops: float, bw_bytes_per_s: float, *,
                      grad_bytes: int = 2, passes: int = 2) -> float:
    """Tokens per GPU per step below which data parallelism waits for the
    network (Chapter 1's rule of thumb).

    A step computes 6 P T FLOPs per GPU for P parameters and T tokens; the
    gradient traffic is about ``passes * grad_bytes * P`` bytes per GPU (2
    passes for an all-reduce or ZeRO-1/2, 3 for ZeRO-3/FSDP). Equal times
    at T = passes * grad_bytes * peak / (6 * bw): P cancels.
    """
    return passes * grad_bytes * peak_flops / (6 * bw_bytes_per_s)


def cp_hidden_tokens(peak_flops: float, bw_bytes_per_s: float, *,
                     hidden: int, kv_dim: int) -> float:
    """Tokens per GPU (s / cp) above which ring attention's K/V exchange
    hides behind attention (Chapter 1's rule of thumb): each step computes
    about 4 (s/cp)^2 h FLOPs on a block and passes 4 (s/cp) kv_dim bytes
    (K and V, bf16), so the exchange hides once
    s/cp >= peak / bw * kv_dim / h."""
    return peak_flops / bw_bytes_per_s * kv_dim / hidden
