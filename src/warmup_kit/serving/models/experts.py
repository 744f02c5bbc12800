"""Expert parallelism in serving: the all-to-all of an MoE layer, as costs.

Book, Chapter 9. With the experts of each MoE layer spread over ``ep``
GPUs, every layer sends each token's hidden vector to the GPUs of its
``top_k`` experts (*dispatch*) and brings the expert outputs back
(*combine*): two all-to-alls per MoE layer, in every forward pass, on the
critical path (Lepikhin et al. 2021; Rajbhandari et al. 2022, DeepSpeed-MoE,
section 5). Per GPU and per layer, with T tokens on the GPU:

* **dropless** (uneven all-to-all, what a serving engine sends): each kept
  choice whose expert lives on another GPU moves ``hidden x bytes``; under
  uniform routing that is ``T k (ep-1)/ep`` vectors each way;
* **padded** (fixed capacity, GShard's dispatch tensor): every expert's
  ``capacity = cf T k / E`` slots move whether filled or not: ``cf T k
  (ep-1)/ep`` vectors each way.

:func:`~warmup_kit.serving.models.routing.dispatch_bytes` counts the exact
bytes of one routing, as a rank's transport counts them;
:func:`moe_layer_s` prices both all-to-alls with NCCL's model on the GPUs
the EP group spans (one NVLink island, or several across the network).
"""
from __future__ import annotations

from warmup_kit.model.hardware import SYSTEMS, Cluster, System
from warmup_kit.parallelism.axes import moe_all_to_all_s
from warmup_kit.serving.models.decode import ACT_BYTES, group_shape
from warmup_kit.serving.models.routing import dispatch_bytes


def expected_dispatch_bytes(tokens: float, hidden: int, top_k: int, ep: int,
                            *, capacity_factor: float = 1.0,
                            padded: bool = False,
                            bytes_per: int = ACT_BYTES) -> float:
    """Bytes one GPU sends in one dispatch (as many come back in the
    combine) for ``tokens`` routed uniformly at random; drops left out."""
    if ep < 1:
        raise ValueError("ep must be >= 1")
    copies = tokens * top_k * (capacity_factor if padded else 1.0)
    return copies * (ep - 1) / ep * hidden * bytes_per


def moe_layer_s(system: str | System, *, tokens: float, hidden: int,
                top_k: int, ep: int, islands: int | None = None,
                capacity_factor: float = 1.0,
                bytes_per: int = ACT_BYTES) -> float:
    """Dispatch + combine of one MoE layer's forward on each GPU, with
    ``tokens`` per GPU, the EP group spread over ``islands`` NVLink islands
    (default: the fewest). Priced as NCCL's all-to-all of the padded send
    buffer (``cf T k`` vectors; :func:`warmup_kit.parallelism.axes.
    moe_all_to_all_s`)."""
    s = SYSTEMS[system] if isinstance(system, str) else system
    if ep < 2:
        return 0.0
    shape = group_shape(s, ep, islands)
    return moe_all_to_all_s(Cluster(s, shape[1]), tokens=tokens,
                            hidden=hidden, top_k=top_k,
                            capacity_factor=capacity_factor,
                            bytes_per=bytes_per, shape=shape)


__all__ = ["dispatch_bytes", "expected_dispatch_bytes", "moe_layer_s"]
