"""The bandwidth-hierarchy table: complete, sourced, consistent."""
import dataclasses

import pytest

from warmup_kit.model.hardware import SYSTEMS, Cluster, cluster, hierarchy_gbps
from warmup_kit.model.topology import Layout, group_shape, link_class, spread

REQUIRED = ("dgx-a100", "dgx-h100", "gb200-nvl72")


@pytest.mark.parametrize("name", REQUIRED)
def test_required_systems_present(name):
    assert SYSTEMS[name].name == name


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_every_figure_has_a_source(name):
    s = SYSTEMS[name]
    for f in ("tflops", "hbm_gb", "hbm_tbps", "gemm_efficiency"):
        assert len(s.gpu.source(f)) > 10
    # PCIe-only boxes (h100-pcie, l40s-8x) have no NVLink and say so
    assert s.nvlink is not None or "no NVLink" in s.source("nvlink_domain")
    for link in (s.nvlink, s.nic, s.pcie):
        if link is None:
            continue
        assert link.source and 0 < link.efficiency <= 1
        assert link.latency_s > 0
    for f in ("gpus_per_node", "nvlink_domain", "nvls_efficiency"):
        assert len(s.source(f)) > 5


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_hierarchy_is_ordered(name):
    h = hierarchy_gbps(name)
    assert h["hbm"] > h.get("nvlink", h["hbm"] / 2) > h["pcie"] >= h["nic"]
    assert ("nvlink" in h) == (SYSTEMS[name].nvlink is not None)


def test_like_for_like_ratios():
    """Chapter 6: ~12x on A100 (300 vs 25), ~9x on H100 (450 vs 50)."""
    a, h = hierarchy_gbps("dgx-a100"), hierarchy_gbps("dgx-h100")
    assert a["nvlink"] / a["nic"] == pytest.approx(12)
    assert h["nvlink"] / h["nic"] == pytest.approx(9)


def test_datasheet_figures():
    h = SYSTEMS["dgx-h100"].gpu
    assert h.peak_flops("bf16") == pytest.approx(989e12)
    assert h.hbm_tbps == pytest.approx(3.35)
    assert SYSTEMS["dgx-a100"].gpu.peak_flops("bf16") == pytest.approx(312e12)
    with pytest.raises(ValueError):
        SYSTEMS["dgx-a100"].gpu.peak_flops("fp8")


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SYSTEMS["dgx-h100"].gpu.hbm_gb = 1


def test_cluster():
    c = cluster("dgx-h100", 4)
    assert isinstance(c, Cluster) and c.n_gpus == 32 and c.node_of(9) == 1
    assert cluster("gb200-nvl72", 18).domain_size == 72
    with pytest.raises(ValueError):
        cluster("dgx-z900")
    with pytest.raises(ValueError):
        cluster("dgx-a100", 0)


def test_link_classes():
    c = cluster("dgx-a100", 2)
    assert link_class(c, 0, 7) == "nvlink"
    assert link_class(c, 7, 8) == "net"
    nvl = cluster("gb200-nvl72", 36)
    assert link_class(nvl, 0, 71) == "nvlink"      # 18 trays, one domain
    assert link_class(nvl, 71, 72) == "net"        # next rack
    assert group_shape(c, spread(c, 8, 2)) == (2, 4)


@pytest.mark.parametrize("order", [("dp", "pp", "tp"), ("pp", "dp", "tp"),
                                   ("tp", "pp", "dp")])
def test_layout_groups_partition_the_world(order):
    lay = Layout(tp=4, pp=2, dp=3, order=order)
    for axis, size in (("tp", 4), ("pp", 2), ("dp", 3)):
        groups = lay.groups(axis)
        assert all(len(g) == size for g in groups)
        assert sorted(r for g in groups for r in g) == list(range(24))
    for r in range(24):
        c = lay.coords(r)
        assert lay.grid[c["dp"], c["pp"], c["tp"]] == r
        # a rank's groups meet only in itself
        assert set(lay.group("tp", r)) & set(lay.group("dp", r)) == {r}


def test_tp_innermost_stays_on_nvlink():
    c = cluster("dgx-h100", 4)
    assert Layout(8, 2, 2).group_links(c, "tp") == "nvlink"
    assert Layout(8, 2, 2, order=("tp", "pp", "dp")).group_links(
        c, "tp") == "net"
    assert Layout(8, 2, 2).neighbours(0) == {"prev": None, "next": 8}


def test_gemm_flops_is_peak_times_the_precisions_efficiency_and_clock():
    from warmup_kit.model.hardware import H100, A100
    assert H100.gemm_flops("bf16") == pytest.approx(989e12 * 0.75)
    # Hopper FP8 GEMMs reach 0.67 of their peak (cuBLASLt, Azure ND H100
    # v5), not BF16's 0.75: FP8 is 1.79x BF16, not 2x
    assert H100.gemm_flops("fp8") == pytest.approx(1979e12 * 0.67)
    assert "1,351" in H100.source("precision_efficiency")
    # a GPU with no override uses gemm_efficiency for every precision
    assert A100.gemm_flops("tf32") == pytest.approx(156e12 * 0.80)


def test_power_limited_h100_clock_follows_the_datasheets_operating_points():
    from warmup_kit.model.hardware import (H100, H100_OPERATING_POINTS,
                                           power_exponent, power_limited)
    k = power_exponent()
    assert 0.29 < k < 0.31               # log(989.5/835.5) / log(700/400)
    at400 = power_limited(H100, 400.0)
    # through the NVL's point: its datasheet peak, relative to the SXM's
    assert at400.tensor_clock == pytest.approx(835.5 / 989.5)
    assert power_limited(H100, 700.0).tensor_clock == pytest.approx(1.0)
    at500 = power_limited(H100, 500.0)
    assert 0.89 < at500.tensor_clock < 0.91   # "between SXM and NVL"
    # the datasheet peak stays what MFU divides by; times use the clock
    assert at500.peak_flops() == H100.peak_flops()
    assert at500.gemm_flops() == pytest.approx(
        H100.gemm_flops() * at500.tensor_clock)
    assert at500.hbm_tbps == H100.hbm_tbps
    assert "500 W" in at500.name and at500.source("tensor_clock")
    assert H100_OPERATING_POINTS[0] == (400.0, 835.5)


@pytest.mark.parametrize("watts", [100.0, 701.0])
def test_power_limited_refuses_a_limit_outside_the_points(watts):
    from warmup_kit.model.hardware import H100, power_limited
    with pytest.raises(ValueError, match="power limit"):
        power_limited(H100, watts)


@pytest.mark.parametrize("name", ["A100", "H100_PCIE"])
def test_power_limited_refuses_a_gpu_without_published_points(name):
    # the PCIe H100's datasheet peak is already its 350 W one
    from warmup_kit.model import hardware
    with pytest.raises(ValueError, match="no published power"):
        hardware.power_limited(getattr(hardware, name), 300.0)
