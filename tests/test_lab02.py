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


@pytest.mark.multiproc
def test_other_nics(h100):
    # --nic: the same three experiments on nodes with one 100G NIC instead
    # of eight 400G ones; TP across nodes and the flat ring get slower,
    # nothing inside a node changes
    one = json.loads(run_lab("--json", "--system", "dgx-h100",
                             "--nic", "1x100G"))
    assert one["nic"] == "1x100G" and h100["nic"] is None
    t, t0 = one["tp_placement"], h100["tp_placement"]
    assert t["nccl_inside_us"] == pytest.approx(t0["nccl_inside_us"])
    assert t["nccl_across_us"] > 4 * t0["nccl_across_us"]
    assert t["nvlink_over_nic"] == pytest.approx(4 * t0["nvlink_over_nic"])
    big = [(a, b) for a, b in zip(one["hierarchical_vs_flat"],
                                  h100["hierarchical_vs_flat"])
           if a["nbytes"] > 2 ** 20]
    assert big and all(a["nccl_ring_ms"] > 10 * b["nccl_ring_ms"]
                       for a, b in big)
