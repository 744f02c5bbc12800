"""Pictures of memory, traffic and rank layouts (book, Chapter 1).

Each function returns a :mod:`warmup_kit.viz.widgets` spec (data only), drawn
by matplotlib in a kernel and by Plotly on the static site.
"""
from __future__ import annotations

from warmup_kit.model.hardware import cluster
from warmup_kit.parallelism.step import Transformer, iteration_time
from warmup_kit.parallelism.sizing import min_gpus_for_state, training_memory
from warmup_kit.parallelism.traffic import per_step
from warmup_kit.model.topology import AXES, Layout
from warmup_kit.viz.widgets import Bars, Figure, Grid, Panel, Points

GB = 1e9
PARTS = ("weights", "grads", "optimizer", "activations")
AXIS_NAMES = {"tp": "TP", "pp": "PP", "dp": "DP"}


def memory_panel(name: str, model: Transformer, *, recipe: str,
                 recompute: str, micro_batch: int = 1,
                 hbm_gb: float = 80.0) -> Panel:
    """Training memory of ``model`` on one device, by part, in GB."""
    mem = training_memory(model, recipe=recipe, recompute=recompute,
                          micro_batch=micro_batch)
    total = sum(mem.values())
    return Panel([Bars(list(PARTS), [mem[p] / GB for p in PARTS])],
                 title=f"{name}: {total / GB:,.0f} GB -> at least "
                       f"{min_gpus_for_state(total, hbm_gb)} GPUs of "
                       f"{hbm_gb:g} GB", ylabel="GB")


def layout_figure(model: Transformer, *, tp: int, pp: int, n_gpus: int,
                  global_batch: int, system: str = "dgx-h100") -> Figure:
    """One 3D layout: memory per GPU, traffic per GPU, step-time parts."""
    dp = n_gpus // (tp * pp)
    c = cluster(system, -(-n_gpus // 8))
    r = iteration_time(model, c, tp=tp, pp=pp, dp=dp,
                       global_batch=global_batch, micro_batch=1)
    gib = r.memory_gib
    traffic = per_step(model, tp=tp, pp=pp, dp=dp, global_batch=global_batch)
    parts = {"compute": r.parts["compute"] + r.parts["optimizer"],
             "TP comm": r.parts["tp_comm"],
             "PP bubble+p2p": r.parts["pp_bubble"] + r.parts["pp_p2p"]
             + r.parts["pp_imbalance"], "DP exposed": r.parts["dp_exposed"]}
    fits = "fits" if r.fits else "DOES NOT FIT"
    return Figure([
        Panel([Bars(list(PARTS) + ["total"], [gib[p] for p in PARTS]
                    + [gib["total"]])], ylabel="GiB per GPU", ylim=(0, 200),
              title=f"memory: {gib['total']:.0f} of {gib['capacity']:.0f}"
                    f" GiB ({fits})"),
        Panel([Bars(["DP", "TP", "PP"], [traffic[a]["bytes"] / GB
                                         for a in ("dp", "tp", "pp")])],
              ylabel="GB sent per GPU per step", logy=True,
              title="traffic per GPU per step (none: no bar)"),
        Panel([Bars(list(parts), list(parts.values()))], ylabel="seconds",
              title=f"step {r.total_s:.1f} s (model)")],
        title=f"tp={tp} x pp={pp} x dp={dp} on {n_gpus} GPUs")


def rank_grid(layout: Layout, axis: str, gpus_per_node: int = 8) -> Panel:
    """The world as nodes (rows) x GPUs (columns), each cell labelled with
    the rank's ``axis`` group; cells of one group share a colour."""
    groups = layout.groups(axis)
    gid = {r: i for i, g in enumerate(groups) for r in g}
    nodes = -(-layout.world // gpus_per_node)
    top = max(len(groups) - 1, 1)
    z, text = [], []
    for n in range(nodes):
        ranks = range(n * gpus_per_node, (n + 1) * gpus_per_node)
        z.append([gid[r] / top if r < layout.world else 0.0 for r in ranks])
        text.append([f"r{r}\n{AXIS_NAMES[axis]}{gid[r]}"
                     if r < layout.world else "" for r in ranks])
    first = groups[0]
    box = Points([r % gpus_per_node for r in first],
                 [r // gpus_per_node for r in first], [""] * len(first),
                 color="#d62728", open_square=True)
    return Panel([Grid(z, text, [f"gpu {g}" for g in range(gpus_per_node)],
                       [f"node {n}" for n in range(nodes)]), box],
                 title=f"{len(groups)} {AXIS_NAMES[axis]} groups of "
                       f"{len(first)} ({AXIS_NAMES[axis]}0 outlined)")


def rank_grids(layout: Layout, gpus_per_node: int = 8) -> Figure:
    """:func:`rank_grid` for TP, PP and DP side by side."""
    return Figure([rank_grid(layout, a, gpus_per_node)
                   for a in reversed(AXES)],
                  title=f"rank grid tp={layout.tp} pp={layout.pp} "
                        f"dp={layout.dp}, order {' > '.join(layout.order)}")


def splits_figure(n: int = 4) -> Figure:
    """Who holds what of one layer under TP, sequence parallelism and
    context parallelism, ``n`` GPUs (Chapter 1): a weight matrix split by
    columns (TP), the norm and dropout activations split by sequence (SP,
    inside the TP group), and every activation split by sequence (CP),
    whose attention passes K and V blocks around a ring."""
    blocks = range(n)

    def grid(owner, xl, yl):
        return Grid(z=[[owner(r, c) / max(1, n - 1) for c in blocks]
                       for r in blocks],
                    text=[[f"GPU {owner(r, c)}" for c in blocks]
                          for r in blocks],
                    xlabels=[f"{xl} {c}" for c in blocks],
                    ylabels=[f"{yl} {r}" for r in blocks])
    return Figure([
        Panel([grid(lambda r, c: c, "cols", "rows")],
              title="TP: weight W1 (h x 4h), split by columns"),
        Panel([grid(lambda r, c: r, "hidden", "tokens")],
              title="SP: norm/dropout activations (s x h), split by tokens"),
        Panel([grid(lambda r, c: r, "hidden", "tokens")],
              title="CP: every activation split by tokens; K,V go round")],
        title=f"one transformer layer over {n} GPUs")
