"""warmup_kit.viz.widgets and plots: one definition, two renderings."""
from __future__ import annotations

import json
import re

import pytest

from warmup_kit.viz import plots
from warmup_kit.viz import widgets
from warmup_kit.algorithms import build
from warmup_kit.schedule import traffic
from warmup_kit.viz.widgets import (Explorer, Figure, Grid, Knob, Line, Panel,
                                Points, explore, show)


def view(n: int, scale: str) -> Panel:
    k = {"x1": 1, "x10": 10}[scale]
    return Panel([Line(range(1, n + 1), [k * i for i in range(1, n + 1)], "y")],
                 title=f"n={n} {scale}")


KNOBS = [Knob("n", [2, 3, 4], "N", 3), Knob("scale", ["x1", "x10"])]


def test_mode_follows_environment(monkeypatch):
    monkeypatch.delenv(widgets.STATIC_ENV, raising=False)
    assert not widgets.static_mode()
    monkeypatch.setenv(widgets.STATIC_ENV, "1")
    assert widgets.static_mode()
    monkeypatch.setenv(widgets.STATIC_ENV, "0")
    assert not widgets.static_mode()


def test_static_twin_has_one_frame_per_combination(monkeypatch):
    monkeypatch.setenv(widgets.STATIC_ENV, "1")
    e = explore(view, KNOBS, title="demo")
    bundle = e._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    fig = e.plotly_json()
    names = [f["name"] for f in fig["frames"]]
    assert names == ["f0_0", "f0_1", "f1_0", "f1_1", "f2_0", "f2_1"]
    # defaults: n=3 (index 1), scale="x1" (index 0)
    assert [s["active"] for s in fig["layout"]["sliders"]] == [1, 0]
    assert fig["data"][0]["y"] == [1, 2, 3]
    frame = next(f for f in fig["frames"] if f["name"] == "f2_1")
    assert frame["data"][0]["y"] == [10, 20, 30, 40]
    # slider steps only fire events; the page's script picks the frame
    for s in fig["layout"]["sliders"]:
        assert {st["method"] for st in s["steps"]} == {"skip"}


def test_static_frames_hold_every_combination_of_values():
    """Every frame is the view at its knob values: checked against what
    ``view`` must draw (n points of k * i, titled), not against view."""
    e = explore(view, KNOBS)
    frames = e.frames()
    assert len(frames) == 6
    for (i, j), spec in frames.items():
        n, k = (2, 3, 4)[i], (1, 10)[j]
        (panel,) = spec.panels
        (line,) = panel.traces
        assert list(line.x) == list(range(1, n + 1))
        assert list(line.y) == [k * v for v in range(1, n + 1)]
        assert panel.title == f"n={n} x{k}"


def test_static_html_is_self_contained_and_deterministic():
    html1 = explore(view, KNOBS, static=True).to_html()
    html2 = explore(view, KNOBS, static=True).to_html()
    strip = lambda h: re.sub(r"warmup-widget-\d+", "ID", h)
    assert strip(html1) == strip(html2)
    assert "<script src=" not in html1          # no CDN: plotly.js ships in _static
    assert "window.Plotly" in html1 and "plotly_sliderchange" in html1
    payload = re.search(r"var fig = (\{.*?\});\n", html1, re.S).group(1)
    assert len(json.loads(payload)["frames"]) == 6


def test_live_widget_draws_with_matplotlib(monkeypatch):
    monkeypatch.delenv(widgets.STATIC_ENV, raising=False)
    e = explore(view, KNOBS, title="demo")
    bundle = e._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == "[widget] demo (N: 2 | 3 | 4, scale: x1 | x10)"
    box = e.live_widget()
    slider, dropdown = box.children[0].children
    image = box.children[1]
    first = image.value
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    slider.value = 4
    assert image.value != first                 # the knob redraws the figure
    dropdown.value = "x10"
    assert image.value[:8] == b"\x89PNG\r\n\x1a\n"


def test_live_widget_shows_the_image_at_its_size_and_whole_labels(
        monkeypatch):
    from PIL import Image
    import io
    monkeypatch.delenv(widgets.STATIC_ENV, raising=False)
    box = explore(view, KNOBS, title="demo").live_widget()
    image = box.children[1]
    drawn = Image.open(io.BytesIO(image.value)).size[0]
    assert image.width == str(drawn)           # not stretched to the cell
    assert box.layout.align_items == "flex-start"
    for control in box.children[0].children:   # "TP group ...", no more
        assert control.style.description_width == "initial"


def test_show_without_knobs(monkeypatch):
    monkeypatch.delenv(widgets.STATIC_ENV, raising=False)
    fig = show(plots.factor_curve(range(1, 9)))
    b = fig._repr_mimebundle_()
    assert set(b) == {"image/png", "text/plain"}
    assert b["text/plain"].startswith("[figure] ")
    monkeypatch.setenv(widgets.STATIC_ENV, "1")
    assert "text/html" in fig._repr_mimebundle_()


def test_view_must_keep_its_shape():
    def bad(n: int) -> Panel:
        traces = [Line([0, 1], [0, 1])] * (1 if n == 1 else 2)
        return Panel(traces)
    with pytest.raises(ValueError, match="same panels"):
        explore(bad, [Knob("n", [1, 2])]).frames()


def test_knob_validation():
    with pytest.raises(ValueError):
        Knob("n", [])
    with pytest.raises(ValueError):
        Knob("n", [1, 2], default=3)
    with pytest.raises(ValueError, match="duplicate"):
        Explorer(view, [Knob("n", [1]), Knob("n", [2])])
    with pytest.raises(ValueError, match="at most"):
        explore(view, [Knob("n", range(100)), Knob("scale", range(10))])


@pytest.mark.parametrize("collective,algorithm", [
    ("allreduce", "ring"), ("allreduce", "naive"), ("broadcast", "tree"),
    ("all_gather", "ring"), ("all_to_all", "direct")])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_stepper_shows_the_schedule(collective, algorithm, n):
    s = build(collective, algorithm, n)
    first = plots.stepper(collective, algorithm, n, 0)
    grid, sent = first.traces
    assert isinstance(grid, Grid) and isinstance(sent, Points)
    assert len(grid.text) == n and len(grid.text[0]) == s.chunks
    assert len(sent.x) == sum(len(t.chunks) for t in s.rounds[0])
    done = plots.stepper(collective, algorithm, n, s.steps)
    assert done.traces[1].x == [] and "done" in done.title
    if collective == "allreduce":
        assert all(cell == ("Σ all" if n > 2 else "0+1")
                   for row in done.traces[0].text for cell in row)


def test_ring_stepper_phases():
    assert "reduce-scatter" in plots.stepper("allreduce", "ring", 4, 2).title
    assert "all-gather" in plots.stepper("allreduce", "ring", 4, 3).title


@pytest.mark.parametrize("make", [
    lambda: plots.collective_stepper(4),
    lambda: plots.collective_stepper(3, ("broadcast", "gather", "scatter",
                                         "allreduce")),
    lambda: plots.ring_stepper(range(2, 6), n=4)])
def test_stepper_round_knob_matches_the_schedules(make):
    """No "round 7" on the slider of a 6-round schedule: the numbered
    positions are the rounds of the longest schedule shown, then "done";
    each frame's caption names the slider's round of its own schedule, or
    says the schedule is done."""
    e = make()
    j = next(i for i, k in enumerate(e.knobs) if k.text == "round")
    *numbered, last = e.knobs[j].values
    assert last == "done" and numbered == list(range(1, len(numbered) + 1))
    longest = 0
    for idx, spec in e.frames().items():
        title = spec.panels[0].title
        k = e.knobs[j].values[idx[j]]
        m = re.search(r"round (\d+) of (\d+)", title)
        if m:
            assert int(m[1]) == k <= int(m[2]), title
            longest = max(longest, int(m[2]))
        else:
            steps = int(re.search(r"done after (\d+) round", title)[1])
            assert k == "done" or k > steps, title
            longest = max(longest, steps)
    assert numbered[-1] == longest


def test_bytes_vs_n_uses_schedule_traffic():
    p = plots.bytes_vs_n("ring", range(2, 9), nbytes=840 * 8)
    busiest = p.traces[2]
    for n, y in zip(busiest.x, busiest.y):
        want = max(traffic(build("allreduce", "ring", n), 840 * 8).bytes_sent)
        assert y == want / (840 * 8)
        assert y == pytest.approx(plots.ring_bytes(n, 1))


@pytest.mark.parametrize("maker", [
    lambda: plots.factor_curve(),
    lambda: plots.collective_bytes(4, 2**20),
    lambda: plots.ring_time_split(2**16, 5e-6, 50e9, range(2, 64)),
    lambda: Figure([plots.bytes_vs_n("tree", range(2, 10))]),
    lambda: plots.stepper("allreduce", "ring", 4, 1)])
def test_every_plot_renders_both_ways(maker):
    spec = maker()
    assert widgets.png_bytes(spec)[:4] == b"\x89PNG"
    assert "var fig" in show(spec).to_html()


def test_table_text_and_html():
    t = plots.Table(["N", "bytes <V>"], [[2, 1.0], [10, 1.8]])
    assert repr(t).splitlines() == [" N  bytes <V>", " 2          1",
                                    "10        1.8"]
    page = t._repr_html_()
    assert page.startswith('<table class="table wk-table"><thead><tr>')
    assert '<th class="text-right">bytes &lt;V&gt;</th>' in page
    assert page.count("<tr>") == 3 and page.count("<td") == 4
    assert '<td class="text-left">10</td><td class="text-right">1.8</td>' \
        in page
    assert not hasattr(t, "_repr_markdown_")   # the site printed it raw


def test_table_refuses_ragged_rows():
    with pytest.raises(ValueError, match="2 cells"):
        plots.Table(["a", "b"], [[1, 2], [3]])


def test_named_y_ticks_in_both_renderings():
    from warmup_kit.viz.render_mpl import render_mpl
    from warmup_kit.viz.render_plotly import plotly_layout
    panel = Panel([Line([0, 1], [0, 1.5])], ylim=(-0.2, 2.1),
                  yticks=((0.4, "all-reduce"), (1.5, "compute")))
    layout = plotly_layout(Figure([panel]), [([0, 1], [0, 2])])
    assert layout["yaxis"]["tickvals"] == [0.4, 1.5]
    assert layout["yaxis"]["ticktext"] == ["all-reduce", "compute"]
    ax = render_mpl(panel).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == \
        ["all-reduce", "compute"]


def test_panel_titles_wrap_to_their_panel_and_the_plot_keeps_its_height():
    from warmup_kit.viz.render_plotly import (
        PLOT_PX, TITLE_CHAR_PX, TITLE_LINE_PX, TOP_PX, panel_domains,
        plotly_layout, title_lines)
    doms = panel_domains(3)
    widths = [b - a for a, b in doms]
    assert max(widths) - min(widths) < 1e-12          # the middle one too
    assert doms[0][0] == 0 and abs(doms[-1][1] - 1) < 1e-12
    assert all(a[1] < b[0] for a, b in zip(doms, doms[1:]))
    long = "CP: every activation split by tokens; K,V go round"
    assert title_lines(long, 1) == [long]             # a lone panel: no wrap
    lines = title_lines(long, 3)
    assert len(lines) > 1 and " ".join(lines) == long
    assert all(len(t) <= PLOT_PX / 3 / TITLE_CHAR_PX for t in lines)
    panels = [Panel([Line([0, 1], [0, 1])], title=t)
              for t in ("short", long, "x")]
    ranges = [([0, 1], [0, 1])] * 3
    layout = plotly_layout(Figure(panels), ranges)
    assert layout["margin"]["t"] == TOP_PX + TITLE_LINE_PX * (len(lines) - 1)
    assert layout["annotations"][1]["text"] == "<br>".join(lines)
    # a widget whose frames' titles differ in length keeps one margin, and
    # grows by it, so that the sliders stay where the plot area puts them
    def view(n):
        return Figure([Panel([Line([0, 1], [0, n])],
                             title=long if n == 2 else "short"),
                       Panel([Line([0, 1], [1, 0])], title="b"),
                       Panel([Line([0, 1], [1, 1])], title="c")])
    plain = explore(lambda n: Figure([Panel([Line([0, 1], [0, n])])]),
                    [Knob("n", [1, 2], 1)], static=True).plotly_json()
    fig = explore(view, [Knob("n", [1, 2], 1)], static=True).plotly_json()
    extra = TITLE_LINE_PX * (len(lines) - 1)
    assert fig["layout"]["height"] == plain["layout"]["height"] + extra
    assert {f["layout"]["margin"]["t"] for f in fig["frames"]} == \
        {TOP_PX + extra}


def test_slider_end_labels_get_room_at_the_figure_edges():
    fig = explore(lambda m: Figure([Panel([Line([0, 1], [0, 1])])]),
                  [Knob("m", ["a", "a much longer label"], "a")],
                  static=True).plotly_json()
    pad = fig["layout"]["sliders"][0]["pad"]
    assert pad["r"] > pad["l"] > 0
