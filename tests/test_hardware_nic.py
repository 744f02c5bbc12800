"""cluster(..., nic="COUNTxSPEED" | fabric): NIC count and rate per node,
the rails and NIC-to-GPU ratio that follow, and the NCCL model using them."""
import pytest

from warmup_kit.model import nccl
from warmup_kit.model.hardware import (
    FABRICS, SYSTEMS, cluster, parse_nic, with_nic)

BIG = 8 << 30


def ring(c, collective="allreduce", nbytes=BIG):
    return [ch for ch in nccl.choices(collective, nbytes, c)
            if (ch.algorithm, ch.protocol) == ("ring", "Simple")][0]


@pytest.mark.parametrize("spec,count,gbit", [
    ("4x100G", 4, 100.0), ("8x400G", 8, 400.0), ("32x100", 32, 100.0),
    (" 2 X 200 Gbps ", 2, 200.0), ("1x3.2T", 1, 3200.0),
    ("16x200Gb/s", 16, 200.0)])
def test_parse_nic(spec, count, gbit):
    assert parse_nic(spec) == (count, gbit)


@pytest.mark.parametrize("spec", ["", "4x", "x100G", "4*100G", "4x100M",
                                  "0x100G", "4x0G", "banana", "4x-100G",
                                  4, 4.0])
def test_bad_nic_strings_are_one_line_value_errors(spec):
    with pytest.raises(ValueError) as e:
        cluster("dgx-a100", 2, nic=spec)
    assert "\n" not in str(e.value) and "nic" in str(e.value)


def test_uneven_nic_count_is_refused():
    for spec in ("3x100G", "12x100G"):
        with pytest.raises(ValueError, match="split evenly over 8 GPUs"):
            cluster("dgx-h100", 2, nic=spec)


def test_four_nics_for_eight_gpus_share_one_per_two():
    """p4d-like: 4 x 100 Gb/s for 8 A100s."""
    c = cluster("dgx-a100", 2, nic="4x100G")
    s = c.system
    assert s.rails == 4 and s.gpus_per_nic == 2 and s.nic_count is None
    assert s.nic.gbps == 12.5                     # one NIC, per direction
    assert s.node_nic_gbps == 50.0
    assert s.gpu_nic.gbps == 6.25                 # each GPU's share
    assert s.nic.efficiency == SYSTEMS["dgx-a100"].nic.efficiency
    assert s.nvlink == SYSTEMS["dgx-a100"].nvlink   # NVLink untouched
    # the reference system keeps one 200 Gb/s NIC per GPU
    ref = SYSTEMS["dgx-a100"]
    assert ref.rails == 8 and ref.gpu_nic is ref.nic and ref.nic.gbps == 25.0


def test_more_nics_than_gpus_are_striped_per_gpu():
    """p5: 32 x 100 Gb/s EFA for 8 H100s = 4 per GPU = 400 Gb/s a GPU."""
    s = with_nic("dgx-h100", "32x100G")
    assert s.rails == 8 and s.nic_count == 32
    assert s.nic.gbps == pytest.approx(50.0) and s.gpu_nic.gbps == 50.0
    assert s.node_nic_gbps == pytest.approx(400.0)     # 3,200 Gb/s
    f = with_nic("dgx-h100", "efa-p5")
    assert f.nic_count == 32 and f.node_nic_gbps == pytest.approx(400.0)
    assert f.nic.efficiency == FABRICS["efa-p5"].link.efficiency


def test_fabric_keys_bring_count_rate_and_technology():
    s = with_nic("dgx-a100", "efa-p4d")
    assert (s.rails, s.nic.gbps, s.nic.efficiency) == (4, 12.5, 0.85)
    s = with_nic("dgx-h100", "ib-hdr")            # one HDR NIC per GPU
    assert (s.rails, s.nic.gbps) == (8, 25.0)
    s = with_nic("gb200-nvl72", "roce-400g")      # 4 GPUs a tray
    assert (s.rails, s.nic.gbps) == (4, 50.0)
    assert with_nic("dgx-h100", "GCP-TCPXO").rails == 8
    assert with_nic("dgx-h100", "gcp-tcpx").gpus_per_nic == 2


def test_cross_node_ring_busbw_follows_the_nics():
    """Ring bus bandwidth across nodes = the node's NICs (k NIC shares)
    when they are slower than NVLink: 4 x 100 Gb/s x 0.94 = 47 GB/s, a
    quarter of the reference 8 x 200 Gb/s (188 GB/s)."""
    slow = ring(cluster("dgx-a100", 2, nic="4x100G"))
    ref = ring(cluster("dgx-a100", 2))
    assert slow.busbw_gbps == pytest.approx(4 * 12.5 * 0.94, rel=0.01)
    assert ref.busbw_gbps == pytest.approx(8 * 25.0 * 0.94, rel=0.01)
    # and NCCL's best choice is bounded by it too
    assert nccl.busbw("allreduce", BIG, cluster("dgx-a100", 2,
                                                nic="4x100G")) < 48.0
    # half a node (4 ranks a node) gets half the rails: 2 NICs
    c = cluster("dgx-a100", 2, nic="4x100G")
    half = [ch for ch in nccl.choices("allreduce", BIG, c,
                                      ranks=(0, 1, 2, 3, 8, 9, 10, 11))
            if (ch.algorithm, ch.protocol) == ("ring", "Simple")][0]
    assert half.busbw_gbps == pytest.approx(2 * 12.5 * 0.94, rel=0.01)


def test_faster_nics_lift_the_ring_to_nvlink():
    """8 x 400G on DGX A100: NICs (376 GB/s) outrun NVLink 3 (240): the
    ring is NVLink-bound."""
    c = cluster("dgx-a100", 2, nic="8x400G")
    assert ring(c).busbw_gbps == pytest.approx(300 * 0.8, rel=0.01)


def test_single_node_busbw_ignores_the_nics():
    a = nccl.busbw("allreduce", BIG, cluster("dgx-h100", 1, nic="1x100G"))
    assert a == nccl.busbw("allreduce", BIG, cluster("dgx-h100", 1))


def test_all_to_all_uses_each_gpus_share_of_a_shared_nic():
    """Direct all-to-all across nodes: each GPU sends (n-k)/n of its
    buffer through its half of a 100G NIC (6.25 GB/s x 0.94)."""
    c = cluster("dgx-a100", 2, nic="4x100G")
    t = ring(c, "all_to_all", 1 << 30).time_s
    wire = 8 / 16 * (1 << 30) / (6.25e9 * 0.94)
    assert t == pytest.approx(wire, rel=0.01)


def test_simulator_accepts_a_nic_cluster():
    from warmup_kit.algorithms import build
    from warmup_kit.model.simulate import simulate
    c = cluster("dgx-a100", 2, nic="4x100G")
    ref = cluster("dgx-a100", 2)
    s = build("allreduce", "ring", 16)
    assert simulate(s, c, 1 << 28).total_s > \
        simulate(s, ref, 1 << 28).total_s
