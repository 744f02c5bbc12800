"""Draw a widget spec as Plotly data (the static twin, no kernel needed)."""
from __future__ import annotations

import html
import math
from typing import Sequence

from warmup_kit.viz.spec import (
    CELL_COLORS, Bars, Figure, Grid, Line, Points, Trace, cell_color, cell_outline)


def _nan_to_none(v: Sequence[float]) -> list:
    return [None if x != x else x for x in v]


#: about the width of a widget's plotting area on the page (the figure
#: less its margins and gaps), in CSS pixels
PLOT_PX = 540


def _cell_font(g: Grid, panels: int) -> dict:
    """The cells' text size: 11 px where the longest line fits its cell,
    else Plotly's own size, which shrinks text to fit (a fixed size would
    spill over the neighbours; an auto-sized short label in a wide cell
    would shrink for no reason, to a dash when the label is long)."""
    cols = max(1, len(g.xlabels))
    chars = max((len(line) for row in g.text for c in row
                 for line in c.split("\n")), default=1)
    size = PLOT_PX / panels / cols / (0.7 * max(chars, 1))
    font = dict(color="#111111")
    if size >= 7:
        font["size"] = min(11, int(size))
    return font


def _plotly_trace(t: Trace, i: int, axis: int, panels: int = 1
                  ) -> dict | list[dict]:
    """One spec trace as Plotly trace dict(s); always as many per kind."""
    xa, ya = ("x", "y") if axis == 1 else (f"x{axis}", f"y{axis}")
    col = cell_color(getattr(t, "color", None), i)
    base = dict(xaxis=xa, yaxis=ya)
    if isinstance(t, Line):
        return dict(base, type="scatter", x=list(t.x), y=list(t.y),
                    name=t.name, showlegend=bool(t.name),
                    mode="lines+markers" if t.markers else "lines",
                    line=dict(color=col, dash="dash" if t.dash else "solid"))
    if isinstance(t, Bars):
        return dict(base, type="bar", x=[str(v) for v in t.x], y=list(t.y),
                    name=t.name, showlegend=bool(t.name), marker_color=col)
    if isinstance(t, Points) and t.open_square:
        ox, oy = cell_outline(t)
        return [dict(base, type="scatter", mode="lines", hoverinfo="skip",
                     x=_nan_to_none(ox), y=_nan_to_none(oy), showlegend=False,
                     line=dict(color=col, width=3)),
                dict(base, type="scatter", mode="text", x=list(t.x),
                     y=[y + 0.32 for y in t.y], text=list(t.text),
                     textfont=dict(color=col), showlegend=False,
                     hoverinfo="skip")]
    if isinstance(t, Points):
        return dict(base, type="scatter", x=list(t.x), y=list(t.y),
                    text=list(t.text), mode="markers+text",
                    textposition="bottom center", name=t.name,
                    showlegend=bool(t.name), marker=dict(color=col, size=8))
    return dict(base, type="heatmap", z=[list(r) for r in t.z],
                text=[[c.replace("\n", "<br>") for c in r] for r in t.text],
                texttemplate="%{text}",
                zmin=t.zmin, zmax=t.zmax, colorscale=CELL_COLORS,
                textfont=_cell_font(t, panels),
                showscale=False, hoverinfo="text", name="")


def _finite(vals, log: bool) -> list[float]:
    out = []
    for v in vals:
        if isinstance(v, (int, float)) and v == v and (v > 0 or not log):
            out.append(float(v))
    return out


def line_ranges(frames: list[Figure], p: int, log: bool, axis: str):
    """One fixed range per axis over all frames, so frames compare."""
    vals = []
    for f in frames:
        for t in f.panels[p].traces:
            if not isinstance(t, Grid):
                vals += _finite(getattr(t, axis), log)
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
        pad = 0.05 * (hi - lo or 1)
        return [lo - pad, hi + pad]
    lo = min(lo, 0.0) if axis == "y" else lo
    pad = 0.05 * (hi - lo or 1)
    return [lo - pad, hi + pad]


#: a panel title's characters per pixel of width (13 px sans-serif)
TITLE_CHAR_PX = 7.0
#: the height of one more line of a panel's title, in pixels
TITLE_LINE_PX = 17
#: the top margin (figure title, one line of panel titles), in pixels
TOP_PX = 70


def panel_domains(k: int) -> list[tuple[float, float]]:
    """Each of ``k`` side-by-side panels' x domain (paper coordinates): the
    same width each, a gap between neighbours for the next one's y axis."""
    gap = 0.12 if k > 1 else 0.0
    w = (1 - gap * (k - 1)) / k
    return [(p * (w + gap), p * (w + gap) + w) for p in range(k)]


def title_lines(text: str, k: int) -> list[str]:
    """A panel's title broken at spaces into lines that fit the panel's
    width when ``k`` panels share the figure (one line when ``k`` is 1: a
    lone panel's title has the figure's whole width)."""
    if k == 1:
        return [text]
    width = max(12, int(PLOT_PX / k / TITLE_CHAR_PX))
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def most_title_lines(specs: Sequence[Figure]) -> int:
    """The most lines any panel title of ``specs`` takes (see
    :func:`title_lines`)."""
    return max((len(title_lines(p.title, len(s.panels)))
                for s in specs for p in s.panels), default=1)


def plotly_layout(spec: Figure, ranges: list, lines: int | None = None
                  ) -> dict:
    """Plotly's layout for ``spec``. ``lines``: the panel titles' room, in
    lines (default: what this spec's titles take; a widget passes the most
    over all its frames, so that the plot does not jump as sliders move)."""
    k = len(spec.panels)
    lines = most_title_lines([spec]) if lines is None else lines
    # a title of several lines grows up from the panel's top: the figure's
    # own title is pinned to the top edge, above it
    top = TOP_PX + TITLE_LINE_PX * (lines - 1)
    layout: dict = dict(title=dict(text=html.escape(spec.title), x=0.5,
                                   yref="container", y=1, yanchor="top",
                                   pad=dict(t=20)),
                        annotations=[], margin=dict(t=top, l=60, r=20),
                        legend=dict(x=0.01, y=0.99, xanchor="left",
                                    yanchor="top",
                                    bgcolor="rgba(255,255,255,0.8)"),
                        plot_bgcolor="white")
    for p, panel in enumerate(spec.panels):
        sfx = "" if p == 0 else str(p + 1)
        x0, x1 = panel_domains(k)[p]
        grid = next((t for t in panel.traces if isinstance(t, Grid)), None)
        # (automargin: a long category label at the right end, slanted,
        # widens the right margin instead of running off the figure)
        xa = dict(domain=[x0, x1], title=dict(text=panel.xlabel),
                  anchor=f"y{sfx}", gridcolor="#e5e5e5",
                  automargin="left+right",
                  type="log" if panel.logx else "-")  # "-": autotype
        ya = dict(title=dict(text=panel.ylabel), anchor=f"x{sfx}",
                  gridcolor="#e5e5e5", type="log" if panel.logy else "linear")
        if grid is not None:
            nr, nc = len(grid.ylabels), len(grid.xlabels)
            xa.update(range=[-0.5, nc - 0.5], tickvals=list(range(nc)),
                      ticktext=list(grid.xlabels), showgrid=False)
            ya.update(range=[nr - 0.5, -0.5], tickvals=list(range(nr)),
                      ticktext=list(grid.ylabels), showgrid=False)
            if p == 0:    # the legend sits over the first panel: it would
                layout["legend"].update(       # hide cells; under the plot
                    orientation="h", x=0, y=-0.12, yanchor="top")
        else:
            xa["range"], ya["range"] = ranges[p]
            if panel.ylim:
                ya["range"] = list(panel.ylim)
            if panel.yticks:
                ya.update(tickvals=[v for v, _ in panel.yticks],
                          ticktext=[t for _, t in panel.yticks])
        layout[f"xaxis{sfx}"], layout[f"yaxis{sfx}"] = xa, ya
        layout["annotations"].append(dict(
            text="<br>".join(html.escape(t) for t in title_lines(
                panel.title, k)), x=(x0 + x1) / 2, y=1.0,
            xref="paper", yref="paper", xanchor="center", yanchor="bottom",
            showarrow=False, font=dict(size=13)))
    return layout


def figure_data(spec: Figure) -> list[dict]:
    out: list[dict] = []
    for p, panel in enumerate(spec.panels):
        for i, t in enumerate(panel.traces):
            tr = _plotly_trace(t, i, p + 1, len(spec.panels))
            out += tr if isinstance(tr, list) else [tr]
    return out


def shape_data(spec: Figure) -> list[tuple[int, str]]:
    return [(p, type(t).__name__) for p, panel in enumerate(spec.panels)
            for t in panel.traces]


def frame_key(idx: Sequence[int]) -> str:
    return "f" + "_".join(map(str, idx))

