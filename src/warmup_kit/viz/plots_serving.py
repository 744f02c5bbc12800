"""Pictures of serving (book, Chapter 9): the decode widget's view, the
all-reduce regime of decode, placement, the MoE all-to-all, and measured
against modelled runs.

Each function returns a :mod:`warmup_kit.viz.widgets` spec (data only),
drawn by matplotlib in a kernel and by Plotly on the static site.
"""
from __future__ import annotations

from typing import Sequence

from warmup_kit.model.hardware import SYSTEMS
from warmup_kit.serving.models.decode import (
    ACT_BYTES, decode_step, tp_allreduce)
from warmup_kit.serving.models.experts import moe_layer_s
from warmup_kit.serving.models.shapes import model as shape
from warmup_kit.viz.widgets import Bars, Figure, Line, Panel, Points

GIB = 1 << 30
#: the widget's TP groups: (GPUs, NVLink islands they span; None = as few
#: as fit). TP 8 in one DGX node or split 4 + 4 over two nodes; TP 16
#: needs two nodes either way
TP_GROUPS = {"TP 2": (2, None), "TP 4": (4, None), "TP 8, 1 node": (8, None),
             "TP 8, 2 nodes": (8, 2), "TP 16, 2 nodes": (16, 2)}
WIDGET_MODELS = ("Llama 3 8B", "Llama 3 70B", "Llama 3 405B",
                 "Mixtral 8x7B")
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def decode_point(name: str, tp_group: str, batch: int, context: int,
                 system: str = "dgx-h100"):
    """The decode step the widget shows (:func:`decode_step`)."""
    tp, islands = TP_GROUPS[tp_group]
    return decode_step(shape(name), system, tp=tp, batch=batch,
                       context=context, islands=islands)


def decode_view(model: str, tp_group: str, batch: int, context: int,
                system: str = "dgx-h100") -> Figure:
    """One decode step's parts, and per-token latency against batch.

    Left: the step's time per GPU split into reading the weights, reading
    the KV cache and the 2 x layers all-reduces. Right: per-token latency
    (and its all-reduce part) for every batch, the chosen one marked with
    the group's tokens per second; its title says what each GPU holds.
    """
    st = decode_point(model, tp_group, batch, context, system)
    curve = [decode_point(model, tp_group, b, context, system)
             for b in BATCHES]
    i = BATCHES.index(batch)
    ms = [c.step_s * 1e3 for c in curve]
    left = Panel([Bars(["weights", "KV cache", "all-reduces"],
                       [st.weights_s * 1e3, st.kv_s * 1e3,
                        st.comm_s * 1e3])],
                 title=f"{tp_group}: {st.step_s * 1e3:.1f} ms/token, "
                       f"{st.allreduce.protocol} all-reduces",
                 ylabel="ms per decode step", logy=True)
    fits = "fits" if st.fits else "does NOT fit"
    right = Panel([Line(BATCHES, ms, name="per-token latency", markers=True),
                   Line(BATCHES, [c.comm_s * 1e3 for c in curve],
                        name="of which all-reduces", dash=True),
                   Points([batch], [ms[i]],
                          [f"{st.tokens_per_s:,.0f} tokens/s"])],
                  title=f"per GPU: KV {st.kv_bytes_per_gpu / GIB:,.1f} GiB + "
                        f"weights {st.weight_bytes_per_gpu / GIB:.0f} GiB "
                        f"({fits})",
                  xlabel="batch (sequences decoded together)",
                  ylabel="ms per token", logx=True, logy=True)
    return Figure([left, right], title=f"{model}, {context:,}-token "
                                       f"context, batch {batch}")


def allreduce_regime_panel(system: str = "dgx-h100", tp: int = 8,
                           sizes: Sequence[int] = tuple(
                               1 << k for k in range(10, 27))) -> Panel:
    """One TP all-reduce against its size, NCCL's pick inside one node and
    across two, beside the bytes alone at NVLink speed: decode's messages
    (a few KB to 1 MB) sit where latency is everything."""
    s = SYSTEMS[system]
    kib = [b / 1024 for b in sizes]
    inside = [tp_allreduce(s, b, tp).time_s * 1e6 for b in sizes]
    across = [tp_allreduce(s, b, tp, 2).time_s * 1e6 for b in sizes]
    wire = [2 * (tp - 1) / tp * b / s.nvlink.bytes_per_s * 1e6
            for b in sizes]
    marks = [(1, 8192), (64, 8192)]         # batch x hidden of Llama 3 70B
    pts = [tp_allreduce(s, b * h * ACT_BYTES, tp) for b, h in marks]
    return Panel([Line(kib, inside, name="NCCL model, 1 node", markers=True),
                  Line(kib, across, name="NCCL model, 2 nodes"),
                  Line(kib, wire, name="bytes alone at NVLink speed",
                       dash=True),
                  Points([p.nbytes / 1024 for p in pts],
                         [p.time_s * 1e6 for p in pts],
                         [f"batch {b}: {p.algorithm}/{p.protocol}"
                          for (b, _), p in zip(marks, pts)])],
                 title=f"one TP all-reduce on {tp} GPUs ({system})",
                 xlabel="message (KiB)", ylabel="microseconds", logx=True,
                 logy=True)


def placement_panel(name: str = "Llama 3 70B", tp: int = 8,
                    context: int = 4096, system: str = "dgx-h100") -> Panel:
    """Per-token latency against batch with the TP group in one node or
    spread over two (the model)."""
    traces = []
    for label, isl in (("TP in one node", None), ("TP over 2 nodes", 2)):
        st = [decode_step(shape(name), system, tp=tp, batch=b,
                          context=context, islands=isl) for b in BATCHES]
        traces.append(Line(BATCHES, [x.step_s * 1e3 for x in st],
                           name=label, markers=True))
        traces.append(Line(BATCHES, [x.comm_s * 1e3 for x in st],
                           name=f"{label}: all-reduces", dash=True))
    return Panel(traces, title=f"{name}, TP {tp}, {context:,}-token "
                               "context: per-token latency (model)",
                 xlabel="batch", ylabel="ms per token", logx=True)


def a2a_panel(system: str = "dgx-h100", *, hidden: int = 4096,
              top_k: int = 2, ep: int = 8,
              tokens: Sequence[int] = (1, 4, 16, 64, 256, 1024, 4096)
              ) -> Panel:
    """One MoE layer's dispatch + combine per GPU against tokens per GPU,
    the EP group in one NVLink island or spread over 2 and 4 nodes."""
    traces = []
    for label, isl in (("EP in one node", None), ("over 2 nodes", 2),
                       ("over 4 nodes", 4)):
        traces.append(Line(tokens, [moe_layer_s(
            system, tokens=t, hidden=hidden, top_k=top_k, ep=ep,
            islands=isl) * 1e6 for t in tokens], name=label, markers=True))
    return Panel(traces, title=f"MoE all-to-all, EP {ep}, top-{top_k}, "
                               f"hidden {hidden} (model, {system})",
                 xlabel="tokens per GPU", ylabel="microseconds per layer",
                 logx=True, logy=True)


def measured_panel(rows: Sequence[dict], title: str) -> Panel:
    """Measured communication per decode step beside the model's, one bar
    pair per (transport, ranks, algorithm)."""
    labels = [f"{r['transport']} N={r['ranks']} "
              f"{'RD' if r['algorithm'] != 'ring' else 'ring'}"
              for r in rows]
    return Panel([Bars(labels, [r["comm_ms"] for r in rows],
                       name="measured all-reduces"),
                  Bars(labels, [r["model_comm_ms"] for r in rows],
                       name="model (after-compute fit)"),
                  Bars(labels, [r["compute_ms"] for r in rows],
                       name="measured compute")],
                 title=title, ylabel="ms per decode step")


__all__ = ["BATCHES", "TP_GROUPS", "WIDGET_MODELS", "a2a_panel",
           "allreduce_regime_panel", "decode_point", "decode_view",
           "measured_panel", "placement_panel"]
