"""The emulated two-tier cluster's model (warmup_kit.model.emulated) and its
calibration fit (warmup_kit.measure.cluster): limits against the closed
forms of warmup_kit.model.costs, the orderings the book states, and the fit
recovering known parameters."""
import math

import pytest

from warmup_kit.measure.cluster import (exchange_schedule, features,
                                        fit_tiers, pairs, params)
from warmup_kit.model import costs
from warmup_kit.model.emulated import (FRESH_MIN_BYTES, TP_PLACEMENTS,
                                       VARIANTS, Tier,
                                       TwoTier, predict, predict_tp,
                                       predictions, tp_groups, winners)

MIB = 1 << 20


def two_tier(ratio=10.0, nodes=2, g=2, gamma=0.0, call=0.0,
             a_fast=10e-6, a_slow=10e-6, fast=2e9):
    return TwoTier(nodes, g, Tier(a_fast, fast), Tier(a_slow, fast / ratio),
                   gamma, call)


@pytest.mark.parametrize("nodes,g", [(2, 2), (2, 4), (4, 2)])
@pytest.mark.parametrize("nbytes", [64 << 10, 4 * MIB])
def test_flat_ring_with_equal_tiers_is_the_closed_form(nodes, g, nbytes):
    tt = two_tier(ratio=1.0, nodes=nodes, g=g, gamma=0.3e-9, call=5e-6)
    n = nodes * g
    want = costs.ring_allreduce_s(nbytes, n, 10e-6, 2e9, 0.3e-9) + 5e-6
    assert predict(tt, "ring", nbytes) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("nodes,g", [(2, 2), (2, 4), (4, 2)])
def test_hierarchical_is_the_closed_form_with_a_shared_uplink(nodes, g):
    # one uplink per node carries all g cross-node rings: each ring sees
    # uplink / g, the closed form's per-rank NIC
    tt = two_tier(ratio=7.0, nodes=nodes, g=g, gamma=0.2e-9, a_slow=40e-6)
    nbytes = 8 * MIB
    want = costs.hierarchical_allreduce_s(
        nbytes, g, nodes, (10e-6, 2e9), (40e-6, 2e9 / 7.0 / g), 0.2e-9)
    assert predict(tt, "hierarchical", nbytes) == pytest.approx(want,
                                                                rel=1e-9)


def test_a_slow_tier_makes_two_level_schemes_win_at_large_sizes():
    tt = two_tier(ratio=10.0)
    for nbytes in (MIB, 16 * MIB, 64 * MIB):
        flat = predict(tt, "ring", nbytes)
        hier = predict(tt, "hierarchical", nbytes)
        lead = predict(tt, "leader", nbytes)
        assert hier < lead < flat
    # equal tiers: the flat ring moves the fewest bytes per port and wins
    eq = two_tier(ratio=1.0)
    assert predict(eq, "ring", 64 * MIB) < predict(eq, "leader", 64 * MIB)


def test_tp_inside_a_node_beats_split_only_when_the_tiers_differ():
    slow = two_tier(ratio=10.0)
    assert predict_tp(slow, 4 * MIB, spread=False) * 5 < \
        predict_tp(slow, 4 * MIB, spread=True)
    # the split groups share each uplink (two flows); an uplink of twice a
    # rank's fast bandwidth, at equal latency, costs the same as inside
    even = two_tier(ratio=0.5)
    assert predict_tp(even, 4 * MIB, spread=True) == pytest.approx(
        predict_tp(even, 4 * MIB, spread=False), rel=1e-9)


def test_tp_groups_are_inside_or_across_nodes():
    tt = two_tier(nodes=2, g=2)
    assert tp_groups(tt, False) == [(0, 1), (2, 3)]
    assert tp_groups(tt, True) == [(0, 2), (1, 3)]
    with pytest.raises(ValueError, match="split"):
        tp_groups(two_tier(nodes=1, g=2), True)


def test_predictions_rows_and_winners():
    tt = two_tier(ratio=10.0)
    rows = predictions(tt, [MIB, 4 * MIB])
    assert len(rows) == 2 * (len(VARIANTS) + len(TP_PLACEMENTS))
    w = winners(rows, "model_ms")
    assert w[("allreduce", MIB)] == "hierarchical"
    assert w[("tp", 4 * MIB)] == "inside one node"


def test_round_trip_and_bad_input():
    tt = two_tier(gamma=1e-10, call=1e-5)
    assert TwoTier.from_dict(tt.as_dict()) == tt
    assert tt.ratio == pytest.approx(10.0)
    with pytest.raises(ValueError):
        Tier(1e-6, 0.0)
    with pytest.raises(ValueError):
        TwoTier(0, 2, Tier(0, 1), Tier(0, 1))
    with pytest.raises(ValueError):
        TwoTier(2, 2, Tier(0, 1), Tier(0, 1), gamma_s_per_byte=-1)


# ----------------------------------------------------------- calibration
def test_exchange_patterns():
    assert pairs("intra", 2, 2) == [(0, 1), (2, 3)]
    assert pairs("inter", 2, 2) == [(0, 2), (1, 3)]
    assert pairs("inter", 2, 4) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    with pytest.raises(ValueError, match="even"):
        pairs("intra", 2, 3)
    with pytest.raises(ValueError, match="pattern"):
        pairs("ring", 2, 2)
    s = exchange_schedule(4, pairs("intra", 2, 2), 3, False)
    assert s.steps == 3 and s.chunks == 6
    assert all(len(r) == 4 for r in s.rounds)


def exact_rows(truth: TwoTier, sizes) -> list[dict]:
    """Calibration rows of both patterns timed exactly as ``truth`` says."""
    p = params(truth)
    rows = []
    for pattern in ("intra", "inter"):
        for m in sizes:
            for r in (1, 3):
                for red, src in ([(False, False), (True, False),
                                  (False, True), (True, True)]
                                 if pattern == "intra" else [(False, False)]):
                    row = {"pattern": pattern, "nbytes": m, "rounds": r,
                           "reduce": red, "src": src}
                    row["time_s"] = float(features(row, 2, truth) @ p)
                    rows.append(row)
    return rows


@pytest.mark.parametrize("burst", [0.0, 64 << 10])
def test_fit_recovers_known_tiers(burst):
    truth = TwoTier(2, 2, Tier(20e-6, 1.5e9), Tier(90e-6, 150e6), 0.4e-9,
                    60e-6, burst, oop_s_per_byte=0.15e-9,
                    copy_s_per_byte=0.2e-9)
    rows = exact_rows(truth, (16 << 10, 256 << 10, 2 * MIB, 8 * MIB))
    rows.append({"pattern": "barrier", "nbytes": 0, "rounds": 0,
                 "reduce": False, "time_s": 0.0})
    tt, rep = fit_tiers(rows, 2, 2, burst)
    assert tt.burst_bytes == burst
    assert rep["max_rel_error"] < 1e-7
    if burst:
        # with a bucket, an uplink's latency and the tokens it regains
        # during it trade off (a link-bound round costs the same either
        # way): the parameters need not come back; the predictions do,
        # to within the trade-off on schedules unlike the calibration's
        for alg in VARIANTS.values():
            for v in (64 << 10, 4 * MIB):
                assert predict(tt, alg, v) == pytest.approx(
                    predict(truth, alg, v), rel=1e-2)
    else:
        for got, want in zip(
                (tt.call_s, tt.intra.alpha_s, tt.inter.alpha_s,
                 tt.intra.bw_bytes_per_s, tt.inter.bw_bytes_per_s,
                 tt.gamma_s_per_byte, tt.oop_s_per_byte, tt.copy_s_per_byte),
                (truth.call_s, truth.intra.alpha_s, truth.inter.alpha_s,
                 truth.intra.bw_bytes_per_s, truth.inter.bw_bytes_per_s,
                 truth.gamma_s_per_byte, truth.oop_s_per_byte,
                 truth.copy_s_per_byte)):
            assert math.isclose(got, want, rel_tol=1e-6)
    with pytest.raises(ValueError, match="both patterns"):
        fit_tiers([r for r in rows if r["pattern"] == "intra"], 2, 2)


# ------------------------------------------------- the simulator's rules
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical", "leader"])
@pytest.mark.parametrize("nbytes", [64 << 10, 3 * MIB + 8 * 5])
def test_without_a_bucket_rounds_cost_what_simulate_says(algorithm, nbytes):
    from warmup_kit.algorithms import build
    from warmup_kit.model.emulated import round_times
    from warmup_kit.model.simulate import simulate
    tt = two_tier(ratio=8.0, gamma=0.3e-9, a_slow=50e-6, nodes=2, g=2)
    s = build("allreduce", algorithm, 4, ranks_per_node=2)
    want = simulate(s, tt.cluster(), nbytes, gamma_s_per_byte=0.3e-9,
                    itemsize=8)
    got, _ = round_times(tt, s, nbytes)
    assert got == pytest.approx(want.round_s, rel=1e-12)


def test_the_token_bucket_only_forgives_its_burst():
    base = two_tier(ratio=10.0, a_slow=0.0, a_fast=0.0)
    v = 4 * MIB
    burst = 256 << 10
    bucket = TwoTier(2, 2, base.intra, base.inter, burst_bytes=burst)
    saved = predict(base, "leader", v) - predict(bucket, "leader", v)
    # the leaders' ring sends V/2 then V/2 through each uplink: the first
    # `burst` bytes pass free, once per call
    assert saved == pytest.approx(burst / base.inter.bw_bytes_per_s)
    huge = TwoTier(2, 2, base.intra, base.inter, burst_bytes=1e12)
    # a bucket deeper than everything sent: the split TP costs nothing more
    # than its (zero) latencies
    assert predict_tp(huge, v, spread=True) == 0.0
    assert predict_tp(base, v, spread=True) > 0


@pytest.mark.parametrize("pattern,src", [("intra", False), ("intra", True),
                                         ("inter", False)])
@pytest.mark.parametrize("reduce", [False, True])
def test_calibration_features_are_the_models_cost_of_the_exchange(
        pattern, src, reduce):
    # what calibration fits is what the model charges the same schedule
    from warmup_kit.model.emulated import time_schedule
    tt = TwoTier(2, 2, Tier(20e-6, 1.5e9), Tier(90e-6, 150e6), 0.4e-9,
                 60e-6, 64 << 10, oop_s_per_byte=0.15e-9,
                 copy_s_per_byte=0.2e-9, cache_bytes=8 * MIB,
                 cached_factor=0.6)
    # 16 KiB exchanges fit the 8 MiB cache, 2 MiB ones do not
    for m in (16 << 10, 2 * MIB):
        for r in (1, 3):
            row = {"pattern": pattern, "nbytes": m, "rounds": r,
                   "reduce": reduce, "src": src}
            s = exchange_schedule(4, pairs(pattern, 2, 2), r, reduce)
            assert time_schedule(tt, s, 2 * r * m, src=src) == pytest.approx(
                float(features(row, 2, tt) @ params(tt)), rel=1e-9)


def test_out_of_place_reads_are_found_in_the_schedule():
    from warmup_kit.algorithms import build
    from warmup_kit.model.emulated import src_bytes
    v = 4 * MIB
    # a ring all-reduce on 4 ranks: each reduce-scatter round reduces one
    # chunk the rank has not written (its own operand still in the input);
    # the all-gather copies; every chunk ends written
    ring = build("allreduce", "ring", 4)
    oop, tail = src_bytes(ring, v)
    assert oop.shape == (6, 4)
    assert (oop[:3] == v / 4).all() and (oop[3:] == 0).all()
    assert (tail == 0).all()
    # the calibration exchange: one chunk reduced and one never written
    # per rank and round
    s = exchange_schedule(4, pairs("intra", 2, 2), 3, True)
    oop, tail = src_bytes(s, 6 * MIB)
    assert (oop == MIB).all() and (tail == 3 * MIB).all()
    # the TP ring of two ranks pays its out-of-place cost once, on half
    base = two_tier(gamma=0.3e-9)
    oop_tt = TwoTier(2, 2, base.intra, base.inter, 0.3e-9,
                     oop_s_per_byte=0.2e-9, copy_s_per_byte=1e-9)
    assert predict_tp(oop_tt, v, spread=False) == pytest.approx(
        predict_tp(base, v, spread=False) + 0.2e-9 * v / 2, rel=1e-12)
    with pytest.raises(ValueError, match="oop_s_per_byte"):
        TwoTier(2, 2, Tier(0, 1), Tier(0, 1), oop_s_per_byte=-1.0)


def test_rounds_with_fewer_busy_ranks_than_cores_pay_less_latency():
    # 4 ranks on 2 cores: calibration saw every rank busy; the leaders'
    # ring across nodes has only two ranks busy, so half the latency
    import dataclasses
    tt = two_tier(ratio=10.0, a_fast=100e-6, a_slow=300e-6)
    shared = dataclasses.replace(tt, cores=2)
    v = 64 << 10
    assert predict(shared, "ring", v) == pytest.approx(predict(tt, "ring", v))
    assert predict(shared, "hierarchical", v) == pytest.approx(
        predict(tt, "hierarchical", v))
    # two cross-node rounds, each 150 us cheaper
    assert predict(tt, "leader", v) - predict(shared, "leader", v) == \
        pytest.approx(2 * 150e-6)
    assert dataclasses.replace(tt, cores=4) == TwoTier.from_dict(
        dataclasses.replace(tt, cores=4).as_dict())


# ------------------------------------------- the public call's new output
def test_a_fresh_output_costs_only_from_the_mmap_threshold_up():
    base = two_tier(gamma=0.3e-9, call=5e-6)
    d = base.as_dict()
    d["touch_s_per_byte"] = 0.25e-9
    tt = TwoTier.from_dict(d)
    assert TwoTier.from_dict(tt.as_dict()) == tt
    small, big = FRESH_MIN_BYTES - 8, FRESH_MIN_BYTES
    for alg in VARIANTS.values():
        assert predict(tt, alg, small) == predict(base, alg, small)
        assert predict(tt, alg, big) == pytest.approx(
            predict(base, alg, big) + 0.25e-9 * big, rel=1e-12)
    for spread in (False, True):
        assert predict_tp(tt, big, spread=spread) - predict_tp(
            base, big, spread=spread) == pytest.approx(0.25e-9 * big)
    with pytest.raises(ValueError, match="touch_s_per_byte"):
        TwoTier(2, 2, Tier(0, 1), Tier(0, 1), touch_s_per_byte=-1.0)


def test_touch_cost_and_the_fit_carry_it():
    from warmup_kit.measure.cluster import touch_cost
    rows = [{"pattern": "touch", "nbytes": 100, "rounds": 0,
             "reduce": False, "time_s": 1.0e-6},
            {"pattern": "touch", "nbytes": 100, "rounds": 0,
             "reduce": True, "time_s": 3.0e-6}]
    assert touch_cost(rows) == pytest.approx(2e-8)
    # a fresh output measured faster than a reused one is noise, not a gain
    assert touch_cost([dict(rows[0], time_s=4e-6), rows[1]]) == 0.0
    assert touch_cost(rows[:1]) == 0.0
    truth = two_tier(gamma=0.4e-9, call=60e-6)
    cal = exact_rows(truth, (16 << 10, 2 * MIB))
    tt, _ = fit_tiers(cal + rows, 2, 2)
    assert tt.touch_s_per_byte == pytest.approx(2e-8)
    assert tt.intra.bw_bytes_per_s == pytest.approx(
        truth.intra.bw_bytes_per_s, rel=1e-6)


def test_a_working_set_that_fits_the_cache_scales_the_fast_tier():
    from warmup_kit.model.emulated import tp_schedule, working_set
    base = TwoTier(2, 2, Tier(20e-6, 2e9), Tier(90e-6, 200e6), 0.3e-9,
                   50e-6, oop_s_per_byte=0.1e-9, copy_s_per_byte=0.2e-9)
    cached = TwoTier(2, 2, base.intra, base.inter, 0.3e-9, 50e-6,
                     oop_s_per_byte=0.1e-9, copy_s_per_byte=0.2e-9,
                     cache_bytes=32 * MIB, cached_factor=0.5)
    # a TP rank holds its input, its output and the half it reduces from
    assert working_set(tp_schedule(base, False), 4 * MIB, src=True) == \
        10 * MIB
    assert working_set(tp_schedule(base, False), 4 * MIB) == 6 * MIB
    # 4 ranks x 10 MiB do not fit 32 MiB: nothing changes
    assert predict_tp(cached, 4 * MIB, spread=False) == pytest.approx(
        predict_tp(base, 4 * MIB, spread=False), rel=1e-12)
    # 4 x 2.5 MiB do: every per-byte cost of the fast tier halves; the
    # call's cost and the latencies do not
    fixed = base.call_s + 2 * base.intra.alpha_s
    assert predict_tp(cached, MIB, spread=False) - fixed == pytest.approx(
        0.5 * (predict_tp(base, MIB, spread=False) - fixed), rel=1e-12)
    # the split TP group's link is not memory: only its reductions scale
    split_gain = predict_tp(base, MIB, spread=True) - predict_tp(
        cached, MIB, spread=True)
    assert 0 < split_gain < predict_tp(base, MIB, spread=True) * 0.05
    assert cached.scale(8 * MIB) == 0.5 and cached.scale(8 * MIB + 1) == 1.0
    with pytest.raises(ValueError, match="cached_factor"):
        TwoTier(2, 2, Tier(0, 1), Tier(0, 1), cached_factor=0.0)


def test_fit_finds_the_cache_factor():
    truth = TwoTier(2, 2, Tier(20e-6, 1.5e9), Tier(90e-6, 150e6), 0.4e-9,
                    60e-6, oop_s_per_byte=0.15e-9, copy_s_per_byte=0.2e-9,
                    cache_bytes=32 * MIB, cached_factor=0.5)
    rows = exact_rows(truth, (16 << 10, 256 << 10, 2 * MIB, 8 * MIB))
    tt, rep = fit_tiers(rows, 2, 2, cache_bytes=32 * MIB)
    assert tt.cached_factor == 0.5 and tt.cache_bytes == 32 * MIB
    assert rep["max_rel_error"] < 1e-7
    assert tt.intra.bw_bytes_per_s == pytest.approx(1.5e9, rel=1e-6)
    # told of no cache, the same rows fit worse
    _, worse = fit_tiers(rows, 2, 2)
    assert worse["rms_rel_error"] > 0.01
