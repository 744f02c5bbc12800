"""One definition, two renderings: the book's interactive figures.

A widget is a *view*: a function from knob values to a :class:`Figure` spec
(lines, bars, a grid of cells, labelled points; data only, no drawing code).
:func:`explore` draws that one spec two ways, chosen automatically:

* **live** (a Jupyter kernel): ipywidgets sliders and dropdowns driving a
  matplotlib figure, redrawn on every change;
* **static** (the book build, where ``WARMUP_KIT_STATIC=1``): a Plotly figure
  with one frame precomputed per combination of knob values and sliders that
  switch frames in the browser, without a kernel. The page needs
  ``window.Plotly``; :mod:`warmup_kit.sphinxext` ships plotly.js inside the
  built site, so the pages work offline.

Example::

    def view(n, v_mb):
        ns = list(range(2, n + 1))
        return Panel([Line(ns, [2 * (k - 1) / k * v_mb for k in ns], "ring")],
                     title=f"V = {v_mb} MB", xlabel="N", ylabel="MB sent")

    explore(view, [Knob("n", range(2, 9), default=4),
                   Knob("v_mb", [1, 16, 256], label="V (MB)")])

:func:`show` is the same with no knobs: a plain figure.
"""
from __future__ import annotations

import html
import io
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

STATIC_ENV = "WARMUP_KIT_STATIC"
MAX_FRAMES = 400                  # precomputed frames per static widget

# light to dark blue: what a Grid cell holds (same in both renderings)
CELL_COLORS = [[0.0, "#f7fbff"], [0.5, "#c6dbef"], [1.0, "#4292c6"]]
SLIDER_PX = 95                    # vertical room per slider, static twin

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f")


# ---------------------------------------------------------------- the spec
@dataclass(frozen=True)
class Line:
    """A polyline; ``dash`` for model curves, ``markers`` for measurements."""
    x: Sequence[float]
    y: Sequence[float]
    name: str = ""
    dash: bool = False
    markers: bool = False
    color: str | None = None


@dataclass(frozen=True)
class Bars:
    """Vertical bars at categories or positions ``x``."""
    x: Sequence[Any]
    y: Sequence[float]
    name: str = ""
    color: str | None = None


@dataclass(frozen=True)
class Points:
    """Markers with an optional text label under each; may vary in count."""
    x: Sequence[float]
    y: Sequence[float]
    text: Sequence[str] = ()
    name: str = ""
    color: str | None = None
    open_square: bool = False     # an outline around a Grid cell


@dataclass(frozen=True)
class Grid:
    """Cells coloured by ``z`` (in [zmin, zmax]) with ``text`` written in.

    Row i, column j is centred at (x=j, y=i); a panel holding a Grid shows
    row 0 at the top.
    """
    z: Sequence[Sequence[float]]
    text: Sequence[Sequence[str]]
    xlabels: Sequence[str]
    ylabels: Sequence[str]
    zmin: float = 0.0
    zmax: float = 1.0


Trace = Union[Line, Bars, Points, Grid]


@dataclass(frozen=True)
class Panel:
    """One set of axes."""
    traces: Sequence[Trace]
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    logx: bool = False
    logy: bool = False
    ylim: tuple[float, float] | None = None


@dataclass(frozen=True)
class Figure:
    """Panels side by side, under one title."""
    panels: Sequence[Panel]
    title: str = ""


@dataclass(frozen=True)
class Knob:
    """A named input of a view: a slider (numbers) or a dropdown (strings)."""
    name: str
    values: Sequence[Any]
    label: str | None = None
    default: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        if not self.values:
            raise ValueError(f"knob {self.name!r} has no values")
        if self.default is None:
            object.__setattr__(self, "default", self.values[0])
        elif self.default not in self.values:
            raise ValueError(f"knob {self.name!r}: default {self.default!r} "
                             "is not one of its values")

    @property
    def text(self) -> str:
        return self.label or self.name


def as_figure(spec: Figure | Panel) -> Figure:
    """Accept a bare Panel where a Figure is expected."""
    return spec if isinstance(spec, Figure) else Figure([spec])


def static_mode() -> bool:
    """True in the book build (``WARMUP_KIT_STATIC`` set and not "0")."""
    return os.environ.get(STATIC_ENV, "0") not in ("", "0")


# ------------------------------------------------------ matplotlib (live)
def _color(c: str | None, i: int) -> str:
    return c or PALETTE[i % len(PALETTE)]


def _mpl_trace(ax, t: Trace, i: int) -> None:
    if isinstance(t, Line):
        ax.plot(t.x, t.y, "--" if t.dash else "-", marker="o" if t.markers
                else None, color=_color(t.color, i), label=t.name or None)
    elif isinstance(t, Bars):
        ax.bar([str(v) for v in t.x], t.y, color=_color(t.color, i),
               label=t.name or None)
    elif isinstance(t, Points) and t.open_square:
        ox, oy = _outline(t)
        ax.plot(ox, oy, color=_color(t.color, i), linewidth=2.5, zorder=3)
        for x, y, s in zip(t.x, t.y, t.text):
            ax.text(x, y + 0.32, s, ha="center", va="center", fontsize=8,
                    color=_color(t.color, i), weight="bold")
    elif isinstance(t, Points):
        ax.scatter(t.x, t.y, color=_color(t.color, i), label=t.name or None,
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


def _outline(t: Points, h: float = 0.44) -> tuple[list, list]:
    """Closed squares around cells (x, y), separated by NaN gaps."""
    xs: list[float] = []
    ys: list[float] = []
    for x, y in zip(t.x, t.y):
        xs += [x - h, x + h, x + h, x - h, x - h, float("nan")]
        ys += [y - h, y - h, y + h, y + h, y - h, float("nan")]
    return xs, ys


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


# ----------------------------------------------------------- plotly (static)
def _nan_to_none(v: Sequence[float]) -> list:
    return [None if x != x else x for x in v]


def _plotly_trace(t: Trace, i: int, axis: int) -> dict | list[dict]:
    """One spec trace as Plotly trace dict(s); always as many per kind."""
    xa, ya = ("x", "y") if axis == 1 else (f"x{axis}", f"y{axis}")
    col = _color(getattr(t, "color", None), i)
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
        ox, oy = _outline(t)
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
                text=[list(r) for r in t.text], texttemplate="%{text}",
                zmin=t.zmin, zmax=t.zmax, colorscale=CELL_COLORS,
                textfont=dict(color="#111111"),
                showscale=False, hoverinfo="text", name="")


def _finite(vals, log: bool) -> list[float]:
    out = []
    for v in vals:
        if isinstance(v, (int, float)) and v == v and (v > 0 or not log):
            out.append(float(v))
    return out


def _line_ranges(frames: list[Figure], p: int, log: bool, axis: str):
    """One fixed range per axis over all frames, so frames compare."""
    import math
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


def _plotly_layout(spec: Figure, ranges: list) -> dict:
    k = len(spec.panels)
    gap = 0.06 if k > 1 else 0.0
    layout: dict = dict(title=dict(text=html.escape(spec.title), x=0.5),
                        annotations=[], margin=dict(t=70, l=60, r=20),
                        legend=dict(x=0.01, y=0.99, xanchor="left",
                                    yanchor="top",
                                    bgcolor="rgba(255,255,255,0.8)"),
                        plot_bgcolor="white")
    for p, panel in enumerate(spec.panels):
        sfx = "" if p == 0 else str(p + 1)
        x0, x1 = p / k + gap / 2 * (p > 0), (p + 1) / k - gap / 2 * (p < k - 1)
        grid = next((t for t in panel.traces if isinstance(t, Grid)), None)
        xa = dict(domain=[x0, x1], title=dict(text=panel.xlabel),
                  anchor=f"y{sfx}", gridcolor="#e5e5e5",
                  type="log" if panel.logx else "-")  # "-": autotype
        ya = dict(title=dict(text=panel.ylabel), anchor=f"x{sfx}",
                  gridcolor="#e5e5e5", type="log" if panel.logy else "linear")
        if grid is not None:
            nr, nc = len(grid.ylabels), len(grid.xlabels)
            xa.update(range=[-0.5, nc - 0.5], tickvals=list(range(nc)),
                      ticktext=list(grid.xlabels), showgrid=False)
            ya.update(range=[nr - 0.5, -0.5], tickvals=list(range(nr)),
                      ticktext=list(grid.ylabels), showgrid=False)
        else:
            xa["range"], ya["range"] = ranges[p]
            if panel.ylim:
                ya["range"] = list(panel.ylim)
        layout[f"xaxis{sfx}"], layout[f"yaxis{sfx}"] = xa, ya
        layout["annotations"].append(dict(
            text=html.escape(panel.title), x=(x0 + x1) / 2, y=1.0,
            xref="paper", yref="paper", xanchor="center", yanchor="bottom",
            showarrow=False, font=dict(size=13)))
    return layout


def _figure_data(spec: Figure) -> list[dict]:
    out: list[dict] = []
    for p, panel in enumerate(spec.panels):
        for i, t in enumerate(panel.traces):
            tr = _plotly_trace(t, i, p + 1)
            out += tr if isinstance(tr, list) else [tr]
    return out


def _shape(spec: Figure) -> list[tuple[int, str]]:
    return [(p, type(t).__name__) for p, panel in enumerate(spec.panels)
            for t in panel.traces]


def _key(idx: Sequence[int]) -> str:
    return "f" + "_".join(map(str, idx))


# ------------------------------------------------------------ the explorer
_ids = itertools.count()


@dataclass
class Explorer:
    """A view bound to its knobs; displays live or static (see module doc)."""
    view: Callable[..., Figure | Panel]
    knobs: Sequence[Knob]
    title: str = ""
    static: bool | None = None
    height: int = 430
    _frames: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate knob names in {names}")
        n = 1
        for k in self.knobs:
            n *= len(k.values)
        if n > MAX_FRAMES:
            raise ValueError(f"{n} knob combinations; the static twin "
                             f"precomputes at most {MAX_FRAMES}")

    # -- the one definition
    def spec(self, **values: Any) -> Figure:
        """The view at these knob values (defaults for the rest)."""
        kw = {k.name: values.get(k.name, k.default) for k in self.knobs}
        return as_figure(self.view(**kw))

    def frames(self) -> dict[tuple[int, ...], Figure]:
        """Every knob combination (as value indices) -> its spec."""
        if not self._frames:
            for idx in itertools.product(*(range(len(k.values))
                                           for k in self.knobs)):
                vals = {k.name: k.values[i] for k, i in zip(self.knobs, idx)}
                self._frames[idx] = self.spec(**vals)
            shapes = {tuple(_shape(f)) for f in self._frames.values()}
            if len(shapes) != 1:
                raise ValueError("a view must return the same panels and "
                                 "trace kinds for every knob value")
        return self._frames

    # -- rendering 2: Plotly, kernel-free
    def plotly_json(self) -> dict:
        """The static twin as a Plotly figure dict with named frames."""
        frames = self.frames()
        specs = list(frames.values())
        default = tuple(k.values.index(k.default) for k in self.knobs)
        ranges = [(_line_ranges(specs, p, pan.logx, "x"),
                   _line_ranges(specs, p, pan.logy, "y"))
                  for p, pan in enumerate(specs[0].panels)]
        first = frames[default]
        layout = _plotly_layout(first, ranges)
        k = len(self.knobs)
        layout.update(height=self.height + SLIDER_PX * k,
                      sliders=self._sliders(default), autosize=True)
        layout["margin"]["b"] = 90 + SLIDER_PX * k
        return dict(data=_figure_data(first), layout=layout, frames=[
            dict(name=_key(i), data=_figure_data(f),
                 layout=_plotly_layout(f, ranges))
            for i, f in frames.items()])

    def _sliders(self, default: tuple[int, ...]) -> list[dict]:
        paper_px = self.height - 160          # plot area: height - margins
        return [dict(name=k.name, active=default[j], pad=dict(t=0),
                     y=-(75 + SLIDER_PX * j) / paper_px, yanchor="top",
                     currentvalue=dict(prefix=f"{k.text} = "),
                     steps=[dict(method="skip", label=str(v), value=str(i),
                                 args=[]) for i, v in enumerate(k.values)])
                for j, k in enumerate(self.knobs)]

    def to_html(self) -> str:
        """A ``<div>`` and ``<script>`` that draw the twin with window.Plotly."""
        div = f"warmup-widget-{next(_ids)}"
        fig = json.dumps(self.plotly_json(), separators=(",", ":"))
        names = json.dumps([k.name for k in self.knobs])
        return _HTML.format(div=div, fig=fig, names=names, title=html.escape(
            self.title or "interactive figure"))

    # -- rendering 1: ipywidgets + matplotlib, live
    def live_widget(self):
        """ipywidgets controls driving a matplotlib image."""
        import ipywidgets as w
        controls = {k.name: _control(w, k) for k in self.knobs}
        image = w.Image(format="png")

        def redraw(_change=None) -> None:
            image.value = png_bytes(self.spec(**{n: c.value for n, c
                                                 in controls.items()}))
        for c in controls.values():
            c.observe(redraw, names="value")
        redraw()
        return w.VBox([w.HBox(list(controls.values())), image])

    def summary(self) -> str:
        """Plain-text stand-in, stable across runs (nbval compares it)."""
        name = self.title or "interactive figure"
        if not self.knobs:
            return f"[figure] {name}"
        knobs = ", ".join(f"{k.text}: {_span(k.values)}" for k in self.knobs)
        return f"[widget] {name} ({knobs})"

    def _repr_mimebundle_(self, include=None, exclude=None):
        use_static = static_mode() if self.static is None else self.static
        if use_static:
            return {"text/html": self.to_html(), "text/plain": self.summary()}
        if not self.knobs:             # a plain figure: no controls needed
            return {"image/png": png_bytes(self.spec()),
                    "text/plain": self.summary()}
        bundle = self.live_widget()._repr_mimebundle_()
        bundle["text/plain"] = self.summary()
        return bundle


def _span(values: Sequence[Any]) -> str:
    if len(values) > 4:
        return f"{values[0]} .. {values[-1]} ({len(values)} values)"
    return " | ".join(map(str, values))


def _control(w, k: Knob):
    if all(isinstance(v, str) for v in k.values):
        return w.Dropdown(options=list(k.values), value=k.default,
                          description=k.text)
    return w.SelectionSlider(options=[(str(v), v) for v in k.values],
                             value=k.default, description=k.text,
                             continuous_update=True)


def explore(view: Callable[..., Figure | Panel], knobs: Sequence[Knob], *,
            title: str = "", static: bool | None = None,
            height: int = 430) -> Explorer:
    """One interactive figure: live in a kernel, kernel-free in the book.

    Args:
        view: knob values (keyword arguments) -> :class:`Figure` or
            :class:`Panel`; must return the same panels and trace kinds for
            every combination.
        knobs: the inputs, each a :class:`Knob`.
        title: shown in the static twin and in the plain-text summary.
        static: force a rendering; ``None`` follows ``WARMUP_KIT_STATIC``.
        height: plot height in pixels (static twin), sliders excluded.

    Returns:
        An :class:`Explorer`; display it (last expression of a cell).
    """
    return Explorer(view, list(knobs), title, static, height)


def show(spec: Figure | Panel, *, title: str = "", height: int = 430
         ) -> Explorer:
    """A figure without knobs: a PNG in a kernel, Plotly on the site."""
    return Explorer(lambda: spec, [], title or as_figure(spec).title or
                    as_figure(spec).panels[0].title, None, height)


_HTML = """<div class="warmup-widget" aria-label="{title}">
<div id="{div}" style="width:100%;"></div>
<script>
(function () {{
  var gd = document.getElementById("{div}");
  if (!window.Plotly) {{
    gd.textContent = "This interactive figure needs plotly.js, which the " +
      "book ships in _static/ (warmup_kit.sphinxext).";
    return;
  }}
  var fig = {fig};
  var names = {names};
  var state = fig.layout.sliders.map(function (s) {{ return s.active; }});
  Plotly.newPlot(gd, fig.data, fig.layout,
                 {{responsive: true, displaylogo: false}}).then(function () {{
    return Plotly.addFrames(gd, fig.frames);
  }}).then(function () {{
    gd.on("plotly_sliderchange", function (e) {{
      state[names.indexOf(e.slider.name)] = parseInt(e.step.value, 10);
      Plotly.animate(gd, ["f" + state.join("_")], {{mode: "immediate",
        frame: {{duration: 0, redraw: true}}, transition: {{duration: 0}}}});
    }});
    gd.setAttribute("data-ready", "1");
  }});
}})();
</script>
</div>"""
