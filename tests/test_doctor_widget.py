"""The book's "what busbw should nccl-tests show?" widget: one frame per
(system, nodes, NICs), drawn from the doctor's own expectation, and the
picture of a diagnosed run."""
import pytest

from doctor_samples import run_lines
from warmup_kit.doctor import examine_text
from warmup_kit.doctor.expect import expected, shape
from warmup_kit.doctor.systems import build_cluster, node_system, parse_nic
from warmup_kit.model import hardware
from warmup_kit.viz.plots_doctor import (NICS, NODES, SIZES, diagnosis_panel,
                                         expected_curves, expected_widget)


def test_widget_has_a_frame_per_combination():
    w = expected_widget()
    assert len(w.frames()) == len(hardware.SYSTEMS) * len(NODES) * len(NICS)


def test_curve_is_the_doctors_expectation():
    c = expected_curves("dgx-a100", 2, "4x100G")
    s = node_system("dgx-a100", parse_nic("4x100G"))
    e = expected("allreduce", SIZES[-1], s, shape(build_cluster(s, 2), 16, 2))
    assert c["best"][-1] == pytest.approx(e.best_gbps)
    # fewer, slower NICs: less bandwidth than the DGX's own 8x HDR
    assert c["best"][-1] < expected_curves("dgx-a100", 2)["best"][-1]


def test_diagnosis_panel_has_measured_expected_and_band():
    d, = examine_text("\n".join(run_lines("dgx-a100", maxb=1 << 24)))
    p = diagnosis_panel(d)
    assert [t.name for t in p.traces][:2] == ["measured",
                                              "expected (model)"]
    assert len(p.traces) == 4 and p.logx
