"""Measured against modelled on the emulated cluster (book, Chapter 6 and
Lab 02): the stored run of ``benchmarks/cluster.py`` as a figure spec.

Returns a :mod:`warmup_kit.viz.widgets` spec (data only), drawn by
matplotlib in a kernel and by Plotly on the static site.
"""
from __future__ import annotations

from warmup_kit.viz.widgets import Figure, Line, Panel

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
TITLES = {"allreduce": "all-reduce over all ranks",
          "tp": "TP all-reduce (groups of one node's size)"}


def label(doc: dict) -> str:
    """The run's machine and link settings, for a title."""
    m, c = doc["machine"], doc["cluster"]
    load = f"load {m['loadavg'][0]:.2f}"
    if "loadavg_before" in m:
        load = (f"load {m['loadavg_before'][0]:.2f} before, "
                f"{m['loadavg'][0]:.2f} after")
    if m.get("steal_share") is not None:
        load += f", {m['steal_share']:.0%} of CPU time stolen by the host"
    return (f"{c['nodes']} nodes x {c['ranks_per_node']} ranks, link "
            f"{c['link']} (tbf), tier ratio {doc['tiers']['ratio']:.1f}x; "
            f"{m['cpu']}, {m['cores']} cores, {load}, {m['date']}")


def measured_vs_model(doc: dict) -> Figure:
    """One panel per experiment: each variant's measured times (markers)
    and the model's (dashes) against the message size; the title names
    the cluster, the link and the machine's load (:func:`label` has it
    all)."""
    panels = []
    for exp in ("allreduce", "tp"):
        rows = [r for r in doc["rows"] if r["experiment"] == exp]
        traces = []
        variants = list(dict.fromkeys(r["variant"] for r in rows))
        for i, v in enumerate(variants):
            mine = sorted((r for r in rows if r["variant"] == v),
                          key=lambda r: r["nbytes"])
            xs = [r["nbytes"] for r in mine]
            col = COLORS[i % len(COLORS)]
            traces += [Line(xs, [r["measured_ms"] for r in mine],
                            f"{v}, measured", markers=True, color=col),
                       Line(xs, [r["model_ms"] for r in mine],
                            f"{v}, model", dash=True, color=col)]
        panels.append(Panel(traces, title=TITLES[exp],
                            xlabel="bytes per rank", ylabel="ms",
                            logx=True, logy=True))
    m, c = doc["machine"], doc["cluster"]
    load = m.get("loadavg_before", m["loadavg"])[0]
    return Figure(panels, title=(
        f"emulated cluster, {c['nodes']} x {c['ranks_per_node']} ranks, "
        f"link {c['link']}, tiers {doc['tiers']['ratio']:.1f}x, "
        f"{m['cores']} cores, load {load:.2f}, {m['date'][:10]}"))


__all__ = ["label", "measured_vs_model"]
