"""Lab 02 runs alone, fast, and its numbers tell the chapter's story."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1] / "labs" / "lab02.py"


def run_lab(*args, timeout=60):
    out = subprocess.run([sys.executable, str(LAB), *args], check=True,
                         capture_output=True, text=True, timeout=timeout)
    return out.stdout


@pytest.fixture(scope="module")
def h100():
    return json.loads(run_lab("--json", "--system", "dgx-h100"))


def test_tp_across_nodes(h100):
    t = h100["tp_placement"]
    # one ring over two nodes is bound by single NICs: ~ the NVLink/NIC ratio
    assert 0.5 * t["nvlink_over_nic"] < t["sim_ring_ratio"] \
        < 1.5 * t["nvlink_over_nic"]
    assert t["nccl_ratio"] > 1.5
    assert t["end_to_end_slowdown"] > 1.1
    assert t["tp_comm_share_across"] > t["tp_comm_share_inside"]


def test_hierarchical_vs_flat_is_fair(h100):
    rows = h100["hierarchical_vs_flat"]
    assert rows and all(r["vs_textbook"] > 4 for r in rows)
    for r in rows:
        if r["nbytes"] <= 2 ** 20:      # network latency steps dominate
            assert r["vs_nccl_ring"] > 1.5
        else:                           # same NICs, nearly the same bytes
            assert 1.0 < r["vs_nccl_ring"] < 1.3
            assert r["leader_ms"] > 3 * r["nccl_ring_ms"]
    one = h100["hierarchical_vs_flat_one_rail"]
    big2 = [r for r in one if r["islands"] == 2 and r["nbytes"] > 2 ** 20]
    assert big2[0]["vs_nccl_ring"] > 1.5   # one rail: fewer bytes per node


def test_bubble_close_to_formula(h100):
    for r in h100["bubble"]:
        assert r["bubble_over_work"] == pytest.approx(r["formula"], rel=0.35)
    tf = [r["tflops_per_gpu"] for r in h100["bubble"]]
    assert tf == sorted(tf)


@pytest.mark.slow
@pytest.mark.parametrize("system", ["dgx-a100", "gb200-nvl72"])
def test_other_systems_and_plot(tmp_path, system):
    png = tmp_path / "lab02.png"
    text = run_lab("--system", system, "--plot", str(png))
    assert f"Lab 02 on {system}" in text
    assert png.stat().st_size > 10_000
