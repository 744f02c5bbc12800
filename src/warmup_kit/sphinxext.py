"""Sphinx extension for the book build (listed in ``_config.yml``).

* Sets ``WARMUP_KIT_STATIC=1`` before any notebook runs, so every
  :func:`warmup_kit.widgets.explore` renders its kernel-free Plotly twin in
  the site however the build is started (``make book`` sets it as well).
* Writes plotly.js, taken from the installed ``plotly`` package, into the
  site's ``_static/`` and loads it on every page: the widgets work offline
  and the JavaScript is downloaded once, not once per figure.
"""
from __future__ import annotations

import os
from pathlib import Path

from .widgets import STATIC_ENV

PLOTLY_JS = "plotly.min.js"


def _write_plotly_js(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from plotly.offline import get_plotlyjs
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / PLOTLY_JS).write_text(get_plotlyjs(), encoding="utf-8")


def setup(app):
    os.environ.setdefault(STATIC_ENV, "1")
    app.add_js_file(PLOTLY_JS, priority=400)
    app.connect("build-finished", _write_plotly_js)
    return {"version": "1", "parallel_read_safe": True,
            "parallel_write_safe": True}
