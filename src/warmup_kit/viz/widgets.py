"""One definition, two renderings: the book's interactive figures.

A widget is a *view*: a function from knob values to a :class:`Figure` spec
(lines, bars, a grid of cells, labelled points; data only, no drawing code).
:func:`explore` draws that one spec two ways, chosen automatically:

* **live** (a Jupyter kernel): ipywidgets sliders and dropdowns driving a
  matplotlib figure, redrawn on every change;
* **static** (the book build, where ``WARMUP_KIT_STATIC=1``): a Plotly figure
  with one frame precomputed per combination of knob values and sliders that
  switch frames in the browser, without a kernel. The page needs
  ``window.Plotly``; :mod:`warmup_kit.viz.sphinxext` ships plotly.js inside the
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
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from warmup_kit.viz.render_mpl import png_bytes, render_mpl
from warmup_kit.viz.render_plotly import (
    TOP_PX, figure_data, frame_key, line_ranges, most_title_lines,
    plotly_layout, shape_data)
from warmup_kit.viz.spec import (
    MAX_FRAMES, SLIDER_PX, STATIC_ENV, Bars, Figure, Grid, Knob, Line, Panel, Points, as_figure, static_mode)

__all__ = ["Bars", "Explorer", "Figure", "Grid", "Knob", "Line", "Panel",
           "Points", "STATIC_ENV", "as_figure", "explore", "png_bytes",
           "render_mpl", "show", "static_mode"]

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
            shapes = {tuple(shape_data(f)) for f in self._frames.values()}
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
        ranges = [(line_ranges(specs, p, pan.logx, "x"),
                   line_ranges(specs, p, pan.logy, "y"))
                  for p, pan in enumerate(specs[0].panels)]
        first = frames[default]
        lines = most_title_lines(specs)
        layout = plotly_layout(first, ranges, lines)
        k = len(self.knobs)
        # (the panel titles' extra lines get their own room: the plot area,
        # which the sliders' positions are measured in, keeps its height)
        extra = layout["margin"]["t"] - TOP_PX
        layout.update(height=self.height + SLIDER_PX * k + extra,
                      sliders=self._sliders(default), autosize=True)
        layout["margin"]["b"] = 90 + SLIDER_PX * k
        return dict(data=figure_data(first), layout=layout, frames=[
            dict(name=frame_key(i), data=figure_data(f),
                 layout=plotly_layout(f, ranges, lines))
            for i, f in frames.items()])

    def _sliders(self, default: tuple[int, ...]) -> list[dict]:
        paper_px = self.height - 160          # plot area: height - margins
        # a label is centred on its tick: the rail's ends sit in from the
        # figure's edges by half the end labels' width (about 3.5 px a
        # character at the sliders' 12 px), so that they are not cut off
        def half(v) -> int:
            return int(3.5 * len(str(v))) + 4
        return [dict(name=k.name, active=default[j],
                     pad=dict(t=0, l=half(k.values[0]), r=half(k.values[-1])),
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
        # never wider than the cell (scaled down, never up: a stretched
        # PNG is blurred)
        image = w.Image(format="png",
                        layout=w.Layout(max_width="100%", height="auto"))

        def redraw(_change=None) -> None:
            png = png_bytes(self.spec(**{n: c.value for n, c
                                         in controls.items()}))
            # shown at the size it was drawn (a flex box would stretch it,
            # blurred, to the notebook's width)
            image.width = str(int.from_bytes(png[16:20], "big"))
            image.value = png
        for c in controls.values():
            c.observe(redraw, names="value")
        redraw()
        knobs = w.HBox(list(controls.values()),
                       layout=w.Layout(flex_flow="row wrap"))
        return w.VBox([knobs, image],
                      layout=w.Layout(align_items="flex-start"))

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
    # the whole description, however long (the default cuts it at ~80 px)
    style = {"description_width": "initial"}
    if all(isinstance(v, str) for v in k.values):
        return w.Dropdown(options=list(k.values), value=k.default,
                          description=k.text, style=style)
    return w.SelectionSlider(options=[(str(v), v) for v in k.values],
                             value=k.default, description=k.text,
                             continuous_update=True, style=style)


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
      "book ships in _static/ (warmup_kit.viz.sphinxext).";
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
    // the figure is drawn while the page is still being laid out; Plotly's
    // "responsive" follows window resizes only, so a column that settles
    // narrower afterwards (the theme's styles, the sidebar) left the figure
    // wider than its column, its right edge cut off: follow the column
    if (window.ResizeObserver) {{
      var width = gd.clientWidth;
      new ResizeObserver(function () {{
        if (gd.clientWidth !== width) {{
          width = gd.clientWidth;
          Plotly.Plots.resize(gd);
        }}
      }}).observe(gd);
    }}
    gd.setAttribute("data-ready", "1");
  }});
}})();
</script>
</div>"""

