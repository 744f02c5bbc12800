"""Draw a widget spec with matplotlib (the live rendering, in a kernel)."""
from __future__ import annotations

import io

from warmup_kit.viz.spec import (
    CELL_COLORS, Bars, Figure, Grid, Line, Panel, Points, Trace, cell_color, cell_outline, as_figure)


def _mpl_trace(ax, t: Trace, i: int) -> None:
    if isinstance(t, Line):
        ax.plot(t.x, t.y, "--" if t.dash else "-", marker="o" if t.markers
                else None, color=cell_color(t.color, i), label=t.name or None)
    elif isinstance(t, Bars):
        ax.bar([str(v) for v in t.x], t.y, color=cell_color(t.color, i),
               label=t.name or None)
    elif isinstance(t, Points) and t.open_square:
        ox, oy = cell_outline(t)
        ax.plot(ox, oy, color=cell_color(t.color, i), linewidth=2.5, zorder=3)
        for x, y, s in zip(t.x, t.y, t.text):
            ax.text(x, y + 0.32, s, ha="center", va="center", fontsize=8,
                    color=cell_color(t.color, i), weight="bold")
    elif isinstance(t, Points):
        ax.scatter(t.x, t.y, color=cell_color(t.color, i), label=t.name or None,
                   zorder=3)
        for x, y, s in zip(t.x, t.y, t.text):
            ax.annotate(s, (x, y), xytext=(0, -10), textcoords="offset points",
                        ha="center", va="top", fontsize=8)
    elif isinstance(t, Grid):
        from matplotlib.colors import LinearSegmentedColormap
        cmap = LinearSegmentedColormap.from_list(
            "cells", [(p, c) for p, c in CELL_COLORS])
        ax.imshow(t.z, cmap=cmap, vmin=t.zmin, vmax=t.zmax, aspect="auto")
        for (r, c), s in _cells(t):
            ax.text(c, r, s, ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(t.xlabels)), list(t.xlabels))
        ax.set_yticks(range(len(t.ylabels)), list(t.ylabels))


def _cells(g: Grid):
    for r, row in enumerate(g.text):
        for c, s in enumerate(row):
            yield (r, c), s


def render_mpl(spec: Figure | Panel):
    """Draw a spec with matplotlib; returns a ``matplotlib.figure.Figure``.

    Uses the object-oriented API only (no pyplot state), so a kernel's
    figures never leak into cell outputs.
    """
    from matplotlib.figure import Figure as MplFigure
    spec = as_figure(spec)
    k = len(spec.panels)
    fig = MplFigure(figsize=(5.2 * k, 3.9), layout="constrained")
    axes = fig.subplots(1, k, squeeze=False)[0]
    for ax, p in zip(axes, spec.panels):
        for i, t in enumerate(p.traces):
            _mpl_trace(ax, t, i)
        ax.set_title(p.title, fontsize=10)
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
        if p.logx:
            ax.set_xscale("log")
        if p.logy:
            ax.set_yscale("log")
        if p.ylim:
            ax.set_ylim(*p.ylim)
        if p.yticks:
            ax.set_yticks([v for v, _ in p.yticks],
                          [t for _, t in p.yticks])
        if any(t.name for t in p.traces if isinstance(t, (Line, Bars))
               or (isinstance(t, Points) and not t.open_square)):
            ax.legend(fontsize=8)
        if not any(isinstance(t, Grid) for t in p.traces):
            ax.grid(alpha=0.3)
    if spec.title:
        fig.suptitle(spec.title)
    return fig


def png_bytes(spec: Figure | Panel, dpi: int = 96) -> bytes:
    """The spec drawn by matplotlib, as PNG bytes."""
    buf = io.BytesIO()
    render_mpl(spec).savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()

