"""Sphinx extension for the book build (listed in ``_config.yml``).

* Sets ``WARMUP_KIT_STATIC=1`` before any notebook runs, so every
  :func:`warmup_kit.viz.widgets.explore` renders its kernel-free Plotly twin in
  the site however the build is started (``make book`` sets it as well).
* Drops repeated copies of the same script from each page (sphinx-thebe's
  configuration is added twice and the second copy throws).
* Writes plotly.js, taken from the installed ``plotly`` package, into the
  site's ``_static/`` and loads it on every page: the widgets work offline
  and the JavaScript is downloaded once, not once per figure.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from warmup_kit.viz.widgets import STATIC_ENV

PLOTLY_JS = "plotly.min.js"


def _write_plotly_js(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from plotly.offline import get_plotlyjs
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / PLOTLY_JS).write_text(get_plotlyjs(), encoding="utf-8")


MATHJAX_DIR = "mathjax"


def _mathjax_source() -> Path | None:
    try:
        import jupyter_server_mathjax
    except ImportError:
        return None
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    return static if (static / "MathJax.js").exists() else None


def _use_local_mathjax(app, config) -> None:
    if _mathjax_source() is None:
        return
    config.mathjax_path = (f"{MATHJAX_DIR}/MathJax.js"
                           "?config=TeX-AMS-MML_HTMLorMML-full")
    config.mathjax3_config = None
    # Sphinx marks the page body "mathjax_ignore" and each formula "math"
    config.mathjax2_config = {
        "showMathMenu": False, "messageStyle": "none",
        "tex2jax": {"inlineMath": [["\\(", "\\)"]],
                    "displayMath": [["\\[", "\\]"]],
                    "processClass": "math|output_area",
                    "ignoreClass": "tex2jax_ignore|mathjax_ignore"},
        # the packaged copy carries the STIX web fonts only. MathJax's
        # stand-in font for its font tests is url('about:blank'), a request
        # that fails (a console error from a page opened from disk); local()
        # fails the same way without a request
        "HTML-CSS": {"availableFonts": [], "webFont": "STIX-Web",
                     "preferredFont": None, "imageFont": None,
                     "styles": {"@font-face": {
                         "font-family": "MathJax_Blank",
                         "src": "local('MathJax_Blank')"}}}}


def _copy_mathjax(app, exception) -> None:
    source = _mathjax_source()
    if exception is not None or app.builder.format != "html" or source is None:
        return
    target = Path(app.outdir) / "_static" / MATHJAX_DIR
    if not (target / "MathJax.js").exists():
        shutil.copytree(source, target, dirs_exist_ok=True)


def _one_of_each_script(app, pagename, templatename, context, doctree):
    """sphinx-thebe adds its inline configuration script once per build
    pass, and the second copy throws ("Identifier 'THEBE_JS_URL' has already
    been declared") on every page: keep the first of identical scripts."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        # an inline script's filename is None or "", as it was added
        key = (getattr(js, "filename", js) or "",
               repr(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def setup(app):
    os.environ.setdefault(STATIC_ENV, "1")
    app.add_js_file(PLOTLY_JS, priority=400)
    app.connect("build-finished", _write_plotly_js)
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_mathjax)
    # after the themes' handlers (sphinx-book-theme adds at priority 501)
    app.connect("html-page-context", _one_of_each_script, priority=900)
    return {"version": "1", "parallel_read_safe": True,
            "parallel_write_safe": True}
