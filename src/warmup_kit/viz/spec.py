"""The figure spec of the book's widgets: data only, no drawing code.

A view function returns a :class:`Figure` (or a bare :class:`Panel`) built
from :class:`Line`, :class:`Bars`, :class:`Points` and :class:`Grid`;
:mod:`warmup_kit.viz.render_mpl` draws it live with matplotlib and
:mod:`warmup_kit.viz.render_plotly` as a kernel-free Plotly figure.
:class:`Knob` describes one control of :func:`warmup_kit.viz.widgets.explore`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence, Union

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
    #: ((y, label), ...): named ticks in place of numbers (a Gantt's lanes)
    yticks: tuple[tuple[float, str], ...] = ()


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


# shared by both renderings
def cell_color(c: str | None, i: int) -> str:
    return c or PALETTE[i % len(PALETTE)]


def cell_outline(t: Points, h: float = 0.44) -> tuple[list, list]:
    """Closed squares around cells (x, y), separated by NaN gaps."""
    xs: list[float] = []
    ys: list[float] = []
    for x, y in zip(t.x, t.y):
        xs += [x - h, x + h, x + h, x - h, x - h, float("nan")]
        ys += [y - h, y - h, y + h, y + h, y - h, float("nan")]
    return xs, ys
