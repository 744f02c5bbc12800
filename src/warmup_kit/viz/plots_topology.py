"""Pictures of the bandwidth hierarchy and of placements (book, Chapter 6).

Each function returns a :mod:`warmup_kit.viz.widgets` spec (data only), drawn
by matplotlib in a kernel and by Plotly on the static site. Numbers come
from :mod:`warmup_kit.model.hardware` and the models built on it.
"""
from __future__ import annotations

from typing import Sequence

from warmup_kit.algorithms import build
from warmup_kit.model.hardware import cluster, hierarchy_gbps
from warmup_kit.model.nccl import best
from warmup_kit.parallelism.step import Transformer
from warmup_kit.parallelism.placement import SPREAD, tp_spread
from warmup_kit.model.simulate import simulate
from warmup_kit.model.topology import Layout, packed, spread
from warmup_kit.viz.widgets import Bars, Figure, Grid, Line, Panel, Points

TIERS = ("hbm", "nvlink", "pcie", "nic")
TIER_NAMES = {"hbm": "HBM", "nvlink": "NVLink", "pcie": "PCIe",
              "nic": "NIC (IB)"}


def hierarchy(systems: Sequence[str]) -> Panel:
    """Line rate per GPU per direction of each tier, one line per system."""
    traces = []
    for name in systems:
        h = hierarchy_gbps(name)
        tiers = [t for t in TIERS if t in h]
        traces.append(Line([TIER_NAMES[t] for t in tiers],
                           [h[t] for t in tiers], name, markers=True))
    return Panel(traces, title="bandwidth per GPU, one direction",
                 ylabel="GB/s (log scale)", logy=True)


def tp_allreduce_vs_size(system: str, tp: int = 8,
                         sizes: Sequence[int] = tuple(2 ** k for k in
                                                      range(14, 31, 2))
                         ) -> Figure:
    """One TP all-reduce, inside a node vs split over two, by message size.

    Three curves: NCCL's model inside one node; NCCL's model with the group
    split 50/50 over two nodes, using every NIC rail; the ring schedule of
    Lab 01 simulated over the same split (one ring, one NIC per crossing).
    """
    c = cluster(system, 2)
    inside, across = packed(c, tp), spread(c, tp, 2)
    ring = build("allreduce", "ring", tp)
    t_in = [best("allreduce", n, c, inside).time_s * 1e6 for n in sizes]
    t_x = [best("allreduce", n, c, across).time_s * 1e6 for n in sizes]
    t_r = [simulate(ring, c, n, placement=across).total_s * 1e6
           for n in sizes]
    mib = [n / 2 ** 20 for n in sizes]
    return Figure([
        Panel([Line(mib, t_in, "1 node (NCCL model)"),
               Line(mib, t_x, "2 nodes, all rails (NCCL model)"),
               Line(mib, t_r, "2 nodes, one ring (simulated)", dash=True)],
              title="time of one all-reduce", xlabel="message (MiB)",
              ylabel="µs", logx=True, logy=True),
        Panel([Line(mib, [x / i for x, i in zip(t_x, t_in)], "all rails"),
               Line(mib, [r / i for r, i in zip(t_r, t_in)], "one ring",
                    dash=True)],
              title="2 nodes / 1 node", xlabel="message (MiB)",
              ylabel="slowdown (x)", logx=True)],
        title=f"TP={tp} all-reduce on {system}: inside a node vs across two")


def placement_view(model: Transformer, system: str, span: int, rails: int,
                   max_span: int = 8, **kwargs) -> Figure:
    """The placement widget: TP groups drawn on the nodes, and the step.

    Left: ``max_span`` nodes x GPUs; the job uses ``span`` nodes, TP=8
    spread evenly over them (TP group 0 outlined). Right: step-time parts
    of that placement (bars) and of TP inside one node (markers).
    """
    r = tp_spread(model, system, span=span, rails=rails, **kwargs)
    g = cluster(system).gpus_per_node
    lay = Layout(8, 1, span * g // 8, SPREAD)
    gid = {rk: i for i, grp in enumerate(lay.groups("tp")) for rk in grp}
    top = max(1, len(gid) // 8 - 1)
    z = [[gid[n * g + j] / top if n < span else 0.0 for j in range(g)]
         for n in range(max_span)]
    text = [[f"TP{gid[n * g + j]}" if n < span else "" for j in range(g)]
            for n in range(max_span)]
    first = lay.groups("tp")[0]
    names = ["compute", "TP comm", "DP exposed", "total"]

    def parts(x):
        p = x.parts
        return [p["compute"] + p["optimizer"], p["tp_comm"],
                p["dp_exposed"], x.total_s]
    return Figure([
        Panel([Grid(z, text, [f"gpu {j}" for j in range(g)],
                    [f"node {n}" for n in range(max_span)]),
               Points([k % g for k in first], [k // g for k in first],
                      [""] * len(first), color="#d62728", open_square=True)],
              title=f"TP=8 over {span} node(s), {8 // span} GPU(s) each"),
        Panel([Bars(names, parts(r["spread"]), name="this placement"),
               Points(names, parts(r["inside"]), name="TP inside a node",
                      color="#2ca02c")],
              ylabel="seconds per step",
              title=f"{r['slowdown']:.2f}x slower; one TP all-reduce "
                    f"{r['layer_ratio']:.1f}x (model)")],
        title=f"{system}, {rails} of {g} NIC rails in use")


def hier_vs_flat(rows: Sequence[dict]) -> Panel:
    """Lab 02's flat ring vs hierarchical all-reduce, by rank count."""
    traces = []
    for i, size in enumerate(sorted({r["nbytes"] for r in rows})):
        sel = [r for r in rows if r["nbytes"] == size]
        label = f"{size / 2 ** 20:g} MiB"
        col = ("#1f77b4", "#d62728")[i % 2]
        traces += [Line([r["ranks"] for r in sel], [r["flat_ms"] for r in sel],
                        f"flat ring, {label}", dash=True, color=col),
                   Line([r["ranks"] for r in sel],
                        [r["hierarchical_ms"] for r in sel],
                        f"hierarchical, {label}", markers=True, color=col)]
    return Panel(traces, title="all-reduce across nodes (simulated)",
                 xlabel="ranks", ylabel="ms", logx=True, logy=True)
