"""Chapter 9's figures: the decode widget's frames follow the model, every
knob changes what the figure says, and the static twin can be built."""
from __future__ import annotations

import pytest

from warmup_kit.serving.models.decode import decode_step
from warmup_kit.serving.models.shapes import model
from warmup_kit.viz import plots_serving as ps
from warmup_kit.viz.widgets import Knob, explore

KNOBS = [Knob("model", ps.WIDGET_MODELS, default="Llama 3 70B"),
         Knob("tp_group", list(ps.TP_GROUPS), default="TP 8, 1 node"),
         Knob("batch", [1, 8, 64, 256], default=8),
         Knob("context", [4096, 32768, 131072], default=4096)]


def _titles(fig):
    return [fig.title] + [p.title for p in fig.panels]


def test_frame_is_the_models_decode_step():
    fig = ps.decode_view("Llama 3 70B", "TP 8, 2 nodes", 64, 4096)
    st = decode_step(model("Llama 3 70B"), "dgx-h100", tp=8, batch=64,
                     context=4096, islands=2)
    bars = fig.panels[0].traces[0]
    assert list(bars.y) == pytest.approx([st.weights_s * 1e3, st.kv_s * 1e3,
                                          st.comm_s * 1e3])
    line = fig.panels[1].traces[0]
    assert line.y[list(line.x).index(64)] == pytest.approx(st.step_s * 1e3)
    assert f"{st.tokens_per_s:,.0f} tokens/s" in fig.panels[1].traces[2].text


@pytest.mark.parametrize("k", range(len(KNOBS)))
def test_every_knob_changes_the_figure(k):
    e = explore(ps.decode_view, KNOBS, static=True)
    default = e.spec()
    for v in KNOBS[k].values:
        if v != KNOBS[k].default:
            assert _titles(e.spec(**{KNOBS[k].name: v})) != _titles(default)


def test_the_static_twin_builds():
    e = explore(ps.decode_view, KNOBS, static=True)
    fig = e.plotly_json()
    assert len(fig["frames"]) == 4 * 5 * 4 * 3 <= 400
    assert len(fig["layout"]["sliders"]) == len(KNOBS)


def test_spreading_tp_8_changes_only_the_all_reduces():
    a = ps.decode_point("Llama 3 70B", "TP 8, 1 node", 8, 4096)
    b = ps.decode_point("Llama 3 70B", "TP 8, 2 nodes", 8, 4096)
    assert a.compute_s == b.compute_s and b.comm_s > a.comm_s


def test_other_panels_render():
    for p in (ps.allreduce_regime_panel(), ps.placement_panel(),
              ps.a2a_panel()):
        assert p.traces and all(len(t.x) == len(t.y) for t in p.traces)
    rows = [dict(transport="shm", ranks=2, algorithm=a, comm_ms=1.0,
                 model_comm_ms=0.9, compute_ms=2.0)
            for a in ("ring", "recursive_doubling")]
    assert [b.x for b in ps.measured_panel(rows, "t").traces][0] == \
        ["shm N=2 ring", "shm N=2 RD"]
