"""Chapter 8's pictures: the goodput widget's frames agree with the model
they draw, and its kernel-free twin builds."""
from __future__ import annotations

import math

import pytest

from warmup_kit.failures.models.goodput import HOUR, daly, expected_wall, young
from warmup_kit.viz import plots_failures as pf
from warmup_kit.viz.widgets import Knob, Line, Points, explore


@pytest.mark.parametrize("tau,delta,M,R", [(900, 33, 11136, 600),
                                           (60, 5, 300, 60)])
def test_the_budget_adds_up_to_the_expected_run_time(tau, delta, M, R):
    b = pf.budget(tau, delta, M, R)
    per_work = M * math.exp(R / M) * math.expm1((tau + delta) / M) / tau
    assert sum(b.values()) == pytest.approx(HOUR * per_work)
    assert b["checkpoints"] == pytest.approx(HOUR * delta / tau)
    assert pf.goodput_at(tau, delta, M, R) == pytest.approx(1 / per_work)
    # long runs: the same as the exact expectation of whole segments
    work = 1000 * tau
    assert pf.goodput_at(tau, delta, M, R) == pytest.approx(
        work / expected_wall(tau, delta, M, R, work), rel=1e-3)


def test_the_widget_frame_marks_what_the_model_says():
    fig = pf.goodput_view(15, 5.8, 16384)
    left, right = fig.panels
    M = 5.8 * pf.YEAR_H * HOUR / 16384
    young_line, daly_line = left.traces[1], left.traces[2]
    assert isinstance(young_line, Line) and young_line.x[0] == \
        pytest.approx(young(33, M) / 60)
    assert daly_line.x[0] == pytest.approx(daly(33, M) / 60)
    point = left.traces[-1]
    assert isinstance(point, Points) and point.y[0] == pytest.approx(
        100 * pf.goodput_at(900, 33, M, 600))
    assert sum(right.traces[0].y) == pytest.approx(100)
    assert "best" in left.title and "Young" in left.xlabel


def test_the_kernel_free_twin_builds_every_frame():
    ex = explore(pf.goodput_view, [Knob("interval_min", [5, 15, 60]),
                                   Knob("gpu_mtbf_years", [3, 5.8]),
                                   Knob("gpus", [1024, 131072])])
    fig = ex.plotly_json()
    assert len(fig["frames"]) == 12
    assert len(fig["layout"]["sliders"]) == 3
