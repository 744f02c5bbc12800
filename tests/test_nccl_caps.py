"""NCCL model: protocol ceilings as NCCL's src/graph/tuning.cc has them."""
import pytest

from warmup_kit.model import nccl
from warmup_kit.model.hardware import SYSTEMS, cluster


def test_constants_are_tunings():
    # llMaxBws: single node by GPU architecture, across nodes by CPU vendor
    assert nccl.LL_MAX_GBPS_ONE_NODE == {"volta": 39.0, "ampere": 87.7,
                                         "hopper": 141.0, "blackwell": 282.0}
    assert nccl.LL_MAX_GBPS_MULTI_NODE == {"intel": (39.0, 20.4),
                                           "amd": (22.5, 19.0)}
    assert nccl.RING_LL128_PER_CH_GBPS["hopper"] == (36.7, 36.7, 36.7)
    assert nccl.TREE_LL128_PER_CH_GBPS["hopper"] == (36.7, 36.7, 29.0)
    assert nccl.TREE_PER_CH_GBPS["ampere"] == (24.0, 23.6, 17.8)
    assert nccl.TREE_LL_FACTOR == pytest.approx(1 / 3.8)
    assert nccl.RING_LL_FACTOR == 0.5 and nccl.RING_LL128_FACTOR == 0.92


@pytest.mark.parametrize("system,nodes,cap", [
    ("dgx-h100", 1, 141.0), ("dgx-h100", 2, 39.0), ("dgx-h100", 4, 20.4),
    ("dgx-h100", 16, 20.4), ("dgx-a100", 1, 87.7), ("dgx-a100", 2, 22.5),
    ("dgx-a100", 8, 19.0)])
@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_ll_never_beats_its_ceiling(system, nodes, cap, algorithm):
    s = SYSTEMS[system]
    for bus in (10.0, 100.0, 400.0, 4000.0):
        bw = nccl.protocol_busbw(algorithm, "LL", bus, s, nodes, 8)
        assert bw <= cap + 1e-9
    assert nccl.protocol_busbw(algorithm, "LL", 1e5, s, nodes, 8) == cap


def test_two_h100_nodes_1mib_tree_ll_under_the_ll_ceiling():
    """Was 52.7 GB/s before the ceilings: above NCCL's own 39 GB/s."""
    c = cluster("dgx-h100", 2)
    tree_ll = [ch for ch in nccl.choices("allreduce", 2 ** 20, c)
               if (ch.algorithm, ch.protocol) == ("tree", "LL")][0]
    assert tree_ll.busbw_gbps < 39.0
    # large buffers: LL stays at its ceiling, Simple takes over
    big = {(ch.algorithm, ch.protocol): ch.busbw_gbps
           for ch in nccl.choices("allreduce", 2 ** 30, c)}
    assert big[("ring", "LL")] <= 39.0 and big[("tree", "LL")] <= 39.0
    assert nccl.best("allreduce", 2 ** 30, c).protocol == "Simple"


def test_tree_ll_factor_and_ll128_per_channel_caps():
    s = SYSTEMS["dgx-h100"]
    # a slow bus: the 1/3.8 factor (after .92), not the ceiling, binds
    assert nccl.protocol_busbw("tree", "LL", 40.0, s, 2, 8) == \
        pytest.approx(40.0 * 0.92 / 3.8)
    # LL128 tree on one node: 7/9; across nodes 120/128
    assert nccl.protocol_busbw("tree", "LL128", 100.0, s, 1, 8) == \
        pytest.approx(100 * 0.92 * 7 / 9)
    assert nccl.protocol_busbw("tree", "LL128", 100.0, s, 2, 8) == \
        pytest.approx(100 * 0.92 * 120 / 128)
    # per channel: 16 channels x 29.0 GB/s on 4+ Hopper nodes
    assert nccl.protocol_busbw("tree", "LL128", 1e4, s, 4, 8) == \
        pytest.approx(16 * 29.0)
    assert nccl.protocol_busbw("ring", "LL128", 1e4, s, 4, 8) == \
        pytest.approx(16 * 36.7)
