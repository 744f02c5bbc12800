"""Blast radius: what one failed GPU, node or switch stalls per placement,
and what recovering costs."""
from __future__ import annotations

import pytest

from warmup_kit.failures.models.blast import (
    ORDERS, Fabric, blast_radius, compare)
from warmup_kit.model.hardware import cluster
from warmup_kit.model.topology import Layout

LLAMA = dict(tp=8, pp=16, dp=128)          # Llama 3, 16,384 GPUs (Table 4)
C = cluster("dgx-h100", 2048)
INSIDE, MEGATRON, SPREAD = ORDERS.values()


def test_a_node_with_tp_inside_takes_one_tp_group_and_one_pipeline():
    b = blast_radius(Layout(**LLAMA, order=INSIDE), C, "node", 5)
    assert b.gpus == tuple(range(40, 48))
    assert (b.tp_groups, b.pipelines, b.world) == (1, 1, 16384)
    assert b.elastic_loss == pytest.approx(1 / 128)


def test_a_node_with_tp_across_nodes_touches_eight_groups():
    b = blast_radius(Layout(**LLAMA, order=SPREAD), C, "node", 5)
    assert (b.tp_groups, b.pipelines) == (8, 8)


def test_one_gpu_is_one_of_everything():
    for order in ORDERS.values():
        b = blast_radius(Layout(**LLAMA, order=order), C, "gpu", 1234)
        assert (len(b.gpus), b.tp_groups, b.pipelines) == (1, 1, 1)


def test_a_rail_leaf_takes_one_gpu_in_each_of_32_nodes():
    fab = Fabric("rail", 32)
    gpus = fab.gpus_behind(C, 3)                 # SU 0, rail 3
    assert gpus == [n * 8 + 3 for n in range(32)]
    inside = blast_radius(Layout(**LLAMA, order=INSIDE), C, "switch", 3, fab)
    megatron = blast_radius(Layout(**LLAMA, order=MEGATRON), C, "switch", 3,
                            fab)
    # a pipeline of 16 stages fills 16 consecutive nodes with TP innermost:
    # 32 nodes hold 2 pipelines; Megatron's order puts 32 replicas there
    assert (inside.tp_groups, inside.pipelines) == (32, 2)
    assert (megatron.tp_groups, megatron.pipelines) == (32, 32)


def test_a_top_of_rack_switch_takes_its_two_servers():
    b = blast_radius(Layout(**LLAMA, order=INSIDE), C, "switch", 7,
                     Fabric("tor", 2))
    assert b.gpus == tuple(range(7 * 16, 8 * 16))
    assert (b.tp_groups, b.pipelines) == (2, 1)


def test_costs():
    b = blast_radius(Layout(**LLAMA, order=INSIDE), C, "node", 0)
    assert b.restart_gpu_h(60, 600, 1800) == pytest.approx(
        16384 * (60 + 600 + 900) / 3600)
    assert b.elastic_gpu_h(60, 60, 4 * 3600) == pytest.approx(
        (16384 * 120 + 128 * 4 * 3600) / 3600)


def test_compare_rows():
    rows = compare(**LLAMA, cluster=C, fabric=Fabric("rail", 32))
    assert len(rows) == 9
    assert all(r["stalled"] == 16384 for r in rows)
    by = {(r["placement"], r["failure"]): r for r in rows}
    # the synchronous restart costs the same whatever failed
    assert len({round(r["restart_gpu_h"], 6) for r in rows}) == 1
    # the elastic cost follows the placement
    assert by[("TP in a node (dp, pp, tp)", "switch")]["elastic_gpu_h"] < \
        by[("Megatron-LM (pp, dp, tp)", "switch")]["elastic_gpu_h"]


def test_ranks_outside_the_job_are_not_lost():
    small = Layout(8, 2, 2)                      # 32 ranks on 2048 nodes
    b = blast_radius(small, C, "node", 100)
    assert b.gpus == () and b.pipelines == 0


@pytest.mark.parametrize("kind,index", [("rack", 0), ("node", 5000),
                                        ("gpu", -1)])
def test_bad_failures_are_refused(kind, index):
    with pytest.raises(ValueError):
        blast_radius(Layout(**LLAMA), C, kind, index)


def test_bad_fabric_is_refused():
    with pytest.raises(ValueError):
        Fabric("mesh", 4)
