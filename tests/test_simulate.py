"""The schedule simulator: link classes, port sharing, gamma, speed-safe."""
import numpy as np
import pytest

from warmup_kit.algorithms import ALGORITHMS, build
from warmup_kit.model.hardware import cluster
from warmup_kit.schedule import Schedule, Transfer, traffic
from warmup_kit.model.simulate import simulate

V = 8 * 9 * 7 * 5 * 2 ** 12       # divisible by every chunk count used


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_bytes_match_schedule_traffic(algorithm, n):
    c = cluster("dgx-h100", 1)
    s = build("allreduce", algorithm, n)
    r = simulate(s, c, V)
    assert sum(r.bytes_by_class.values()) == pytest.approx(
        traffic(s, V).total_bytes)
    assert r.steps == s.steps and len(r.round_s) == s.steps
    assert r.total_s == pytest.approx(r.round_s.sum())


def test_one_transfer_is_alpha_plus_beta():
    c = cluster("dgx-a100", 2)
    s = Schedule("one", "broadcast", 2, 1, [[Transfer(0, 1, (0,))]], root=0)
    nv, nic = c.system.nvlink, c.system.nic
    t_nv = simulate(s, c, V, placement=(0, 1)).total_s
    t_ib = simulate(s, c, V, placement=(0, 8)).total_s
    assert t_nv == pytest.approx(nv.latency_s + V / nv.bytes_per_s)
    assert t_ib == pytest.approx(nic.latency_s + V / nic.bytes_per_s)


def test_transfers_sharing_a_port_share_its_bandwidth():
    c = cluster("dgx-a100", 1)
    bw, a = c.system.nvlink.bytes_per_s, c.system.nvlink.latency_s
    fan_out = Schedule("f", "broadcast", 4, 1,
                       [[Transfer(0, d, (0,)) for d in (1, 2, 3)]], root=0)
    disjoint = Schedule("d", "broadcast", 4, 1,
                        [[Transfer(0, 1, (0,)), Transfer(2, 3, (0,))]],
                        root=0)
    assert simulate(fan_out, c, V).total_s == pytest.approx(a + 3 * V / bw)
    assert simulate(disjoint, c, V).total_s == pytest.approx(a + V / bw)


def test_gamma_charges_the_receiver_per_reduced_byte():
    c = cluster("dgx-h100", 1)
    s = build("allreduce", "ring", 4)
    base = simulate(s, c, V).total_s
    g = 1e-12
    # reduce-scatter rounds reduce V/4 each on every receiver: 3 rounds
    assert simulate(s, c, V, gamma_s_per_byte=g).total_s == pytest.approx(
        base + 3 * V / 4 * g)


def test_flat_ring_across_nodes_is_nic_bound():
    c = cluster("dgx-a100", 2)
    s = build("allreduce", "ring", 16)
    r = simulate(s, c, V)
    chunk = V / 16
    nic = c.system.nic
    assert r.total_s == pytest.approx(30 * (nic.latency_s
                                            + chunk / nic.bytes_per_s))


def test_textbook_ring_vs_hierarchical_across_nodes():
    """Against the lock-step single ring, hierarchy looks 4-8x better..."""
    c = cluster("dgx-h100", 4)
    flat = simulate(build("allreduce", "ring", 32), c, 2 ** 28).total_s
    hier = simulate(build("allreduce", "hierarchical", 32, ranks_per_node=8),
                    c, 2 ** 28).total_s
    assert hier < flat / 3


def test_nccl_flat_ring_is_close_to_hierarchical_at_large_sizes():
    """...but against the flat ring as NCCL runs it (a ring per rail,
    pipelined) the gap at 256 MiB is tens of percent, not 4x."""
    c = cluster("dgx-h100", 4)
    rail = simulate(build("allreduce", "rail_ring", 32, ranks_per_node=8),
                    c, 2 ** 28, pipelined=True).total_s
    hier = simulate(build("allreduce", "hierarchical", 32, ranks_per_node=8),
                    c, 2 ** 28, pipelined=True).total_s
    assert hier < rail < 1.5 * hier


@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_pipelined_ring_latency_is_nccls_step_count(nodes):
    """Network latency only on node-crossing hops: 2 * nodes of the
    2 (N-1) hops cross (NCCL tuning.cc nInterSteps), the rest are NVLink."""
    c = cluster("dgx-h100", nodes)
    n = c.n_gpus
    nv, nic = c.system.nvlink.latency_s, c.system.nic.latency_s
    want = (2 * (n - 1) - 2 * nodes) * nv + 2 * nodes * nic
    for alg in ("ring", "rail_ring"):
        r = simulate(build("allreduce", alg, n, ranks_per_node=8), c, V,
                     pipelined=True)
        assert r.latency_s == pytest.approx(want)
        assert r.total_s == pytest.approx(r.latency_s + r.bandwidth_s)


@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_cross_node_bytes_per_node(nodes):
    """Per node: flat ring (any number of rails) 2 (N-1)/N V; hierarchical
    and leader 2 (G-1)/G V, G nodes."""
    c = cluster("dgx-h100", nodes)
    n = c.n_gpus
    per_node = {}
    for alg in ("ring", "rail_ring", "hierarchical", "leader"):
        r = simulate(build("allreduce", alg, n, ranks_per_node=8), c, V)
        per_node[alg] = r.bytes_by_class["net"] / nodes / V
    assert per_node["ring"] == pytest.approx(2 * (n - 1) / n)
    assert per_node["rail_ring"] == pytest.approx(2 * (n - 1) / n)
    assert per_node["hierarchical"] == pytest.approx(2 * (nodes - 1) / nodes)
    assert per_node["leader"] == pytest.approx(2 * (nodes - 1) / nodes)


def test_rail_ring_spreads_over_every_nic_leader_uses_one():
    c = cluster("dgx-h100", 2)
    big = 2 ** 30
    rail = simulate(build("allreduce", "rail_ring", 16, ranks_per_node=8),
                    c, big, pipelined=True)
    ring = simulate(build("allreduce", "ring", 16), c, big, pipelined=True)
    lead = simulate(build("allreduce", "leader", 16, ranks_per_node=8),
                    c, big, pipelined=True)
    nic = c.system.nic.bytes_per_s
    # the single ring's crossing NIC carries 2 (N-1)/N V; rails share it 8 ways
    assert ring.bandwidth_s == pytest.approx(2 * 15 / 16 * big / nic)
    assert rail.bandwidth_s < ring.bandwidth_s / 5
    # the leader's one NIC carries 2 (G-1)/G V = V
    assert lead.bandwidth_s == pytest.approx(big / nic)


def test_single_rail_network_shares_one_nic_per_node():
    from warmup_kit.model.hardware import Cluster, with_nics
    one = Cluster(with_nics("dgx-h100", 1), 2)
    full = cluster("dgx-h100", 2)
    s = build("allreduce", "rail_ring", 16, ranks_per_node=8)
    t_one = simulate(s, one, 2 ** 30, pipelined=True).bandwidth_s
    t_full = simulate(s, full, 2 ** 30, pipelined=True).bandwidth_s
    assert t_one == pytest.approx(2 * 15 / 16 * 2 ** 30
                                  / full.system.nic.bytes_per_s)
    assert t_one > 7 * t_full
    with pytest.raises(ValueError):
        with_nics("dgx-h100", 3)


def test_placement_changes_cost_and_is_validated():
    c = cluster("dgx-h100", 2)
    s = build("allreduce", "ring", 8)
    inside = simulate(s, c, V).total_s
    across = simulate(s, c, V, placement=(0, 1, 2, 3, 8, 9, 10, 11)).total_s
    assert across > 5 * inside
    with pytest.raises(ValueError):
        simulate(s, c, V, placement=(0,) * 8)
    with pytest.raises(ValueError):
        simulate(s, c, V, placement=tuple(range(7)))


def test_one_rank_costs_nothing_and_time_is_affine_in_size():
    """A single rank moves nothing; otherwise each round costs alpha plus
    its bytes over the bandwidth, so equal steps in V add equal time (a
    stale cached result, or a size-dependent slip, breaks the line)."""
    c = cluster("dgx-h100", 1)
    assert simulate(build("allreduce", "ring", 1), c, V).total_s == 0.0
    s = build("allreduce", "rabenseifner", 6)
    t1, t2, t3 = (simulate(s, c, k * V).total_s for k in (1, 2, 3))
    assert t2 > t1 > 0
    assert t3 - t2 == pytest.approx(t2 - t1, rel=1e-9)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 33])
def test_lazy_ring_arrays_equal_its_rounds(n):
    """The ring's rounds are built on first use; the simulator reads the
    same transfers as arrays without building them (issue 11, item 5)."""
    import numpy as np
    from warmup_kit.algorithms.ring import (all_gather_rounds,
                                            reduce_scatter_rounds)
    from warmup_kit.model.simulate import compile_schedule
    from warmup_kit.schedule import LazyRounds, verify
    lazy = build("allreduce", "ring", n)
    assert isinstance(lazy.rounds, LazyRounds) and lazy.steps == 2 * (n - 1)
    chunks = [(c,) for c in range(n)]
    eager = Schedule("ring", "allreduce", n, n,
                     reduce_scatter_rounds(range(n), chunks)
                     + all_gather_rounds(range(n), chunks))
    a, b = compile_schedule(lazy), compile_schedule(eager)
    for f in ("round_of", "src", "dst", "reduce", "flat_transfer",
              "flat_chunk"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    c = cluster("dgx-h100", 8)
    assert simulate(lazy, c, V).total_s == simulate(eager, c, V).total_s
    assert lazy.rounds == eager.rounds
    verify(lazy)


def test_first_1024_rank_ring_simulation_moves_the_rings_bytes():
    """The cold 1,024-rank ring (its speed target, < 1 s, is checked by
    ``benchmarks/model_speed.py --check``, not by a timed test): 2(N-1)
    rounds, and every rank sends 2(N-1)/N of the buffer, all of it on
    the links of its class."""
    from warmup_kit.algorithms.ring import ring_allreduce
    n, nbytes = 1024, 2 ** 30
    res = simulate(ring_allreduce(n), cluster("dgx-h100", 128), nbytes)
    assert res.steps == 2 * (n - 1) and res.total_s > 0
    assert sum(res.bytes_by_class.values()) == pytest.approx(
        2 * (n - 1) * nbytes, rel=1e-9)
