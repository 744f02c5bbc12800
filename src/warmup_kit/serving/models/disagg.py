"""Prefill/decode disaggregation: ship the KV cache or recompute it.

Book, Chapter 9. A disaggregated server runs prompts on a *prefill* pool
and generation on a *decode* pool (Zhong et al. 2024, DistServe; Patel et
al. 2024, Splitwise), so every request's KV cache must travel from the
GPUs that computed it to the GPUs that will extend it. With TP on both
sides, GPU i of the prefill group holds the KV heads GPU i of the decode
group needs: ``tp`` transfers of ``1/tp`` of the cache run side by side,
each on its GPU's own link:

* ``"nvlink"``: both groups in one NVLink island (a DGX node, a GB200
  NVL72 rack);
* ``"net"``: different nodes, GPU to GPU through each GPU's own NIC
  (GPUDirect RDMA);
* ``"pcie"``: staged through host memory, the GPU's PCIe link the
  bottleneck.

A transfer costs the link's latency plus bytes over its achievable
bandwidth (:mod:`warmup_kit.model.hardware`). Sent layer by layer while
the prefill computes the next layer, only what does not hide behind the
prefill is exposed. The alternative is to recompute: the decode pool runs
the prefill itself (:func:`warmup_kit.serving.models.decode.prefill`).
"""
from __future__ import annotations

from dataclasses import dataclass

from warmup_kit.model.hardware import SYSTEMS, Link, System
from warmup_kit.serving.models.decode import island_size, prefill
from warmup_kit.serving.models.kv_cache import cached_tokens, kv_split
from warmup_kit.serving.models.shapes import ModelShape

ROUTES = ("nvlink", "net", "pcie")


def route_link(s: System, route: str) -> Link:
    """The link one GPU's share of the cache crosses on ``route``."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    if route == "nvlink":
        if s.nvlink is None:
            raise ValueError(f"{s.name} has no NVLink")
        return s.nvlink
    return s.nic if route == "net" else s.pcie


@dataclass(frozen=True)
class Handoff:
    """One request's cache moved from the prefill group to the decode group.

    Attributes:
        kv_bytes: the whole cache (every head once).
        bytes_per_gpu: what each of the ``tp`` transfers carries.
        transfer_s: all of it, sent after the prefill.
        exposed_s: what remains once it is sent layer by layer behind the
            prefill's compute.
        prefill_s: the prefill on the prefill group.
        recompute_s: the same prefill run again on the decode group.
        link: the link each transfer crosses.
    """

    kv_bytes: float
    bytes_per_gpu: float
    transfer_s: float
    exposed_s: float
    prefill_s: float
    recompute_s: float
    link: str

    @property
    def ship_vs_recompute(self) -> float:
        """Transfer time as a fraction of the recomputation."""
        return self.transfer_s / self.recompute_s


def transfer_s(link: Link, nbytes: float, messages: int = 1) -> float:
    """``messages`` latencies plus ``nbytes`` at the link's achievable rate."""
    return messages * link.latency_s + nbytes / link.bytes_per_s


def handoff(m: ModelShape, system: str | System, *, prompt: int,
            route: str, tp: int = 8, decode_tp: int | None = None,
            kv_bytes: int = 2) -> Handoff:
    """Move one ``prompt``-token request's cache between TP groups.

    Args:
        route: ``"nvlink"``, ``"net"`` or ``"pcie"`` (see the module).
        tp: the prefill group's TP size; ``decode_tp`` the decode group's
            (default the same). With different sizes each decode GPU pulls
            its heads from the prefill GPUs that hold them, so the
            transfers carry the decode side's share.
    """
    s = SYSTEMS[system] if isinstance(system, str) else system
    decode_tp = decode_tp or tp
    if route == "nvlink" and tp + decode_tp > island_size(s):
        raise ValueError(f"{tp} + {decode_tp} GPUs do not fit in one NVLink "
                         f"island of {island_size(s)}")
    link = route_link(s, route)
    tokens = cached_tokens(m, prompt)
    whole = tokens * kv_split(m, 1, kv_bytes).per_rank_bytes_per_token
    # each decode GPU needs its heads (replicas included, when tp > kv)
    per_gpu = tokens * kv_split(m, decode_tp, kv_bytes).per_rank_bytes_per_token
    after = transfer_s(link, per_gpu)
    pre = prefill(m, s, tp=tp, batch=1, prompt=prompt).step_s
    per_layer = transfer_s(link, per_gpu / m.layers)
    # layer l is sent while layer l+1 computes: a pipeline of L stages
    pipe = max(pre + per_layer, pre / m.layers + m.layers * per_layer)
    rec = prefill(m, s, tp=decode_tp, batch=1, prompt=prompt).step_s
    return Handoff(whole, per_gpu, after, pipe - pre, pre, rec, link.name)


def kv_bytes_per_flop(m: ModelShape, kv_bytes: int = 2) -> float:
    """Cache bytes a prompt leaves per FLOP its prefill computes (scores
    left out): the ratio that makes shipping cheaper than recomputing
    whenever the link moves more than this many bytes per FLOP the GPUs
    compute."""
    return kv_split(m, 1, kv_bytes).per_rank_bytes_per_token / \
        m.flops_per_token()


__all__ = ["Handoff", "ROUTES", "handoff", "kv_bytes_per_flop",
           "route_link", "transfer_s"]
