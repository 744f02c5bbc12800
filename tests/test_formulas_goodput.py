"""Every term of the goodput, published-record and blast-radius models,
against hand computations and published values (issue 31).

Sources: Young 1974 ("A first order approximation to the optimum
checkpoint interval", CACM 17(9)): ``tau = sqrt(2 delta M)``. Daly 2006
("A higher order estimate of the optimum checkpoint interval for restart
dumps", FGCS 22(3)), eq. 20 for the interval, and his expected run time
per segment ``M e^(R/M) (e^((tau + delta)/M) - 1)`` (eq. 13). The Llama 3
record is "The Llama 3 Herd of Models" (2024), section 3.3.4 and Table 5
(54 days, 419 unexpected interruptions), section 3.3.1 (4 GB per GPU of
checkpoint, 2 TB/s sustained storage, 7 TB/s peak, 16,384 GPUs).
"""
import math

import numpy as np
import pytest

from warmup_kit.failures.models.blast import Blast, Fabric, blast_radius
from warmup_kit.failures.models.goodput import (
    Scenario, daly, exact_optimum, expected_wall, restart_budget, simulate,
    young)
from warmup_kit.failures.models.published import (
    LLAMA3_TABLE5, by_category, llama3_ckpt_s, llama3_mtbf_s)
from warmup_kit.model.hardware import SYSTEMS, Cluster
from warmup_kit.model.topology import Layout


# ---------------------------------------------------------------- intervals
def test_goodput_young_interval_is_sqrt_2_delta_m():
    # delta 60 s, M 3000 s: sqrt(2 * 60 * 3000) = sqrt(360000) = 600
    assert young(60, 3000) == pytest.approx(600)
    assert young(30, 3000) == pytest.approx(math.sqrt(180000))


def test_goodput_daly_interval_is_young_times_1_plus_sqrt_x_over_3_plus_x_over_9_minus_delta():
    # x = delta / 2M = 0.01, sqrt(x) = 0.1:
    #   600 * (1 + 0.1/3 + 0.01/9) - 60 = 620.666... - 60
    assert daly(60, 3000) == pytest.approx(600 * (1 + 1 / 30 + 1 / 900) - 60)
    assert daly(60, 3000) == pytest.approx(560.6667, abs=1e-3)


def test_goodput_daly_interval_is_m_when_delta_ge_2m():
    assert daly(100, 40) == 40
    assert daly(80, 40) == 40          # delta = 2M exactly
    # M <= delta < 2M still uses the series: x = 60/80 = 0.75,
    #   sqrt(4800) (1 + sqrt(0.75)/3 + 0.75/9) - 60 = 35.06
    assert daly(60, 40) == pytest.approx(
        math.sqrt(4800) * (1 + math.sqrt(0.75) / 3 + 0.75 / 9) - 60)


def test_goodput_exact_optimum_minimises_cost_e_tau_plus_delta_over_m_minus_1_over_tau():
    def cost(tau, d=60.0, m=3000.0):   # Daly's wall time per unit of work
        return math.expm1((tau + d) / m) / tau
    t = exact_optimum(60, 3000)
    assert cost(t) < cost(t * 0.99) and cost(t) < cost(t * 1.01)
    # stationary point: e^((t+d)/M) (t/M - 1) + 1 = 0
    assert math.exp((t + 60) / 3000) * (t / 3000 - 1) + 1 == \
        pytest.approx(0, abs=1e-9)
    # Daly's estimate is within 0.1% of it here
    assert t == pytest.approx(daly(60, 3000), rel=1e-3)


# ------------------------------------------------------ expected run time
def test_goodput_expected_wall_is_m_e_r_over_m_times_e_tau_plus_delta_over_m_minus_1_per_segment():
    # M 1000, delta 10, R 0, work 300 in tau = 100: 3 segments, the last
    # one writes no checkpoint:
    #   1000 * (2 (e^0.11 - 1) + (e^0.1 - 1))
    want = 1000 * (2 * math.expm1(0.11) + math.expm1(0.1))
    assert expected_wall(100, 10, 1000, 0, 300) == pytest.approx(want)
    assert want == pytest.approx(337.727, abs=1e-3)
    # a restart R = 50 multiplies everything by e^(R/M) = e^0.05
    assert expected_wall(100, 10, 1000, 50, 300) == pytest.approx(
        want * math.exp(0.05))


def test_goodput_expected_wall_last_partial_segment_is_work_minus_n_minus_1_tau():
    # work 250 in tau = 100: segments 100 + 10, 100 + 10, then 50 alone
    want = 1000 * (2 * math.expm1(0.11) + math.expm1(0.05))
    assert expected_wall(100, 10, 1000, 0, 250) == pytest.approx(want)


def test_goodput_expected_wall_without_failures_is_work_plus_n_minus_1_checkpoints():
    # M -> infinity: 300 s of work + 2 checkpoints of 10 s
    assert expected_wall(100, 10, 1e12, 0, 300) == pytest.approx(320, rel=1e-6)


def test_goodput_job_mtbf_is_node_mtbf_over_nodes():
    s = Scenario.of_nodes(1000, 1e6, ckpt_s=10, restart_s=0, work_s=1)
    assert s.mtbf_s == 1000


def test_goodput_simulation_without_failures_pays_only_n_minus_1_checkpoints():
    r = simulate(Scenario(1e15, 10.0, 99.0, 300.0), [100.0, 300.0], reps=3)
    # tau 100: 300 / (300 + 2 * 10); tau 300: one segment, no checkpoint
    np.testing.assert_allclose(r.mean, [300 / 320, 1.0])
    np.testing.assert_allclose(r.parts["checkpoint"], [20.0, 0.0])
    np.testing.assert_allclose(r.failures, [0, 0])
    np.testing.assert_allclose(r.parts["restart"], [0, 0])


def test_goodput_simulation_matches_daly_expected_wall():
    # the Monte Carlo and the closed form are the same model
    s = Scenario(1000.0, 10.0, 50.0, 2000.0)
    r = simulate(s, [100.0, 300.0], reps=4000, seed=3)
    want = 2000 / expected_wall(np.array([100.0, 300.0]), 10, 1000, 50, 2000)
    np.testing.assert_allclose(1 / (1 / r.goodput).mean(axis=1), want,
                               rtol=0.03)


def test_goodput_simulation_wall_is_work_plus_checkpoints_lost_restarts_and_waits():
    # every second of a run is booked to exactly one part
    for s in (Scenario(1000.0, 10.0, 50.0, 2000.0),
              Scenario(1000.0, 10.0, 50.0, 2000.0, spares=1, repair_s=800.0),
              Scenario(1000.0, 10.0, 50.0, 2000.0, spares=0, repair_s=30.0)):
        r = simulate(s, [100.0, 300.0], reps=200, seed=5)
        wall = (s.work_s / r.goodput).mean(axis=1)
        parts = sum(r.parts[k] for k in ("work", "checkpoint", "lost",
                                         "restart", "spare wait"))
        np.testing.assert_allclose(wall, parts, rtol=1e-9)
    assert r.parts["spare wait"][0] == pytest.approx(30.0 * r.failures[0])


def test_goodput_restart_budget_inverts_goodput_at_the_exact_optimum():
    # R such that tau* / (M e^(R/M) (e^((tau*+delta)/M) - 1)) = goodput
    r = restart_budget(0.9, 60, 3000)
    t = exact_optimum(60, 3000)
    assert t / (3000 * math.exp(r / 3000) * math.expm1((t + 60) / 3000)) == \
        pytest.approx(0.9)
    # with R = 0 the goodput is tau*/(M (e^..-1)); asking for it gives R = 0
    g0 = t / (3000 * math.expm1((t + 60) / 3000))
    assert restart_budget(g0, 60, 3000) == pytest.approx(0, abs=1e-6)


# -------------------------------------------------------- Llama 3 record
def test_published_llama3_mtbf_is_54_days_over_419_unexpected():
    assert llama3_mtbf_s() == pytest.approx(54 * 86400 / 419)   # 11135 s
    assert llama3_mtbf_s() / 3600 == pytest.approx(3.093, abs=1e-3)
    assert llama3_mtbf_s(unexpected_only=False) == pytest.approx(
        54 * 86400 / 466)


def test_published_llama3_checkpoint_is_4gb_times_16384_gpus_over_2tbps():
    # 4e9 * 16384 / 2e12 = 32.768 s;  at the 7 TB/s peak: 9.362 s
    assert llama3_ckpt_s() == pytest.approx(32.768)
    assert llama3_ckpt_s(peak=True) == pytest.approx(4e9 * 16384 / 7e12)


def test_published_llama3_young_interval_is_14_minutes():
    # sqrt(2 * 32.768 * 11135.1) = 854.2 s
    assert young(llama3_ckpt_s(), llama3_mtbf_s()) == pytest.approx(
        854.2, abs=0.1)


def test_published_llama3_gpu_category_is_268_interruptions_58_7_printed():
    # 148 + 72 + 19 + 17 + 6 + 6 = 268; 30.1 + 17.2 + 4.5 + 4.1 + 1.4 + 1.4
    assert by_category()["GPU"] == (268, 58.7)
    assert by_category()["Host"] == (7 + 3 + 3 + 2 + 2 + 2 + 2, 5.1)
    assert sum(n for _, _, n, _ in LLAMA3_TABLE5) == 419


# ------------------------------------------------------------ blast radius
DGX8 = Cluster(SYSTEMS["dgx-h100"], 8)          # 64 GPUs


def test_blast_restart_gpu_hours_are_world_times_detect_restart_half_interval():
    b = Blast("gpu", (0,), 1, 1, world=64, replica_gpus=16, dp=4)
    # 64 GPUs * (60 + 600 + 1800/2) s / 3600 = 27.733 GPU-h
    assert b.restart_gpu_h(60, 600, 1800) == pytest.approx(64 * 1560 / 3600)


def test_blast_elastic_gpu_hours_are_world_regroup_plus_touched_replicas_repair():
    b = Blast("node", tuple(range(8)), 1, 2, world=64, replica_gpus=16, dp=4)
    # (64 * (60 + 60) + 2 pipelines * 16 GPUs * 14400 s) / 3600 = 130.13
    assert b.elastic_gpu_h(60, 60, 14400) == pytest.approx(
        (64 * 120 + 2 * 16 * 14400) / 3600)
    # elastic gives up the touched replicas: 2 of 4
    assert b.elastic_loss == 0.5


def test_blast_tor_switch_is_node_over_nodes_per_rack():
    f = Fabric("tor", nodes=2)              # Llama 3: 2 servers per ToR
    assert f.switch_of(DGX8, 17) == 1       # node 2 -> rack 1
    assert f.gpus_behind(DGX8, 0) == list(range(16))


def test_blast_rail_leaf_is_su_times_gpus_per_node_plus_local_rank():
    f = Fabric("rail", nodes=4)             # 4 nodes per scalable unit
    assert f.switch_of(DGX8, 17) == 1       # node 2, NIC 1, unit 0
    assert f.switch_of(DGX8, 8 * 4 + 3) == 8 + 3   # node 4: unit 1, NIC 3
    assert f.gpus_behind(DGX8, 0) == [0, 8, 16, 24]


def test_blast_node_failure_counts_tp_groups_and_pipelines_by_placement():
    # tp 8, pp 2, dp 4. TP innermost: node 0 is one TP group of one pipeline
    b = blast_radius(Layout(8, 2, 4, ("dp", "pp", "tp")), DGX8, "node", 0)
    assert (b.tp_groups, b.pipelines, b.world, b.replica_gpus) == \
        (1, 1, 64, 16)
    # TP outermost: node 0 holds ranks 0-7 = (t 0, p 0..1, d 0..3), one
    # rank of 8 TP groups and of all 4 pipelines
    b = blast_radius(Layout(8, 2, 4, ("tp", "pp", "dp")), DGX8, "node", 0)
    assert (b.tp_groups, b.pipelines) == (8, 4)
    # a rail leaf of 4-node units takes NIC 0 of nodes 0-3: 4 TP groups
    b = blast_radius(Layout(8, 2, 4, ("dp", "pp", "tp")), DGX8, "switch", 0,
                     Fabric("rail", 4))
    assert b.gpus == (0, 8, 16, 24)
    assert (b.tp_groups, b.pipelines) == (4, 2)
