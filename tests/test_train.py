"""warmup_kit.train in one process: the MLP's gradients, the buckets, the
timeline model's limits (tests/test_train_ranks.py runs real ranks)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from warmup_kit.train import MLP, Buckets, assign_buckets, global_batch
from warmup_kit.train.timeline import cpu_share, ready_positions, step_timeline

pytestmark = pytest.mark.timeout(60)


def test_gradients_match_finite_differences():
    m = MLP((5, 7, 6, 3), seed=3)
    x, t = global_batch(0, 4, 5, 3)
    _, grads = m.gradients(x, t)
    rng = np.random.default_rng(0)
    for i, p in enumerate(m.params):
        for _ in range(3):
            idx = tuple(rng.integers(s) for s in p.shape)
            old = p[idx]
            p[idx] = old + 1e-6
            up = m.loss(m.forward(x)[-1], t)[0]
            p[idx] = old - 1e-6
            down = m.loss(m.forward(x)[-1], t)[0]
            p[idx] = old
            assert grads[i][idx] == pytest.approx((up - down) / 2e-6,
                                                  rel=1e-5, abs=1e-8)


def test_training_lowers_the_loss():
    m = MLP((16, 32, 32, 8), seed=0)
    losses = []
    for k in range(30):
        loss, grads = m.gradients(*global_batch(k, 64, 16, 8))
        m.sgd(grads, 0.01)
        losses.append(loss)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


def test_data_is_deterministic_and_shards_cover_the_batch():
    a = global_batch(3, 12, 4, 2)
    b = global_batch(3, 12, 4, 2)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(a[0], global_batch(4, 12, 4, 2)[0])
    from warmup_kit.train import shard
    assert np.array_equal(np.concatenate([shard(a[0], r, 3)
                                          for r in range(3)]), a[0])
    with pytest.raises(ValueError):
        shard(a[0], 0, 5)


@pytest.mark.parametrize("cap", [1, 100, 1200, 4000, 10 ** 9])
def test_every_parameter_in_exactly_one_bucket(cap):
    m = MLP((12, 20, 20, 20, 6), seed=0)
    b = Buckets(m.shapes, cap)
    members = sorted(i for bucket in b.members for i in bucket)
    assert members == list(range(len(m.params)))
    # reverse order of the backward pass: indices only go down
    order = [i for bucket in b.members for i in bucket]
    assert order == sorted(order, reverse=True)
    for bucket, nbytes in zip(b.members, b.nbytes):
        assert nbytes == sum(m.params[i].nbytes for i in bucket)
        # PyTorch's rule: a bucket closes once it reaches the cap, so it is
        # under the cap without its last parameter, and all but the last
        # bucket reach it
        assert nbytes - m.params[bucket[-1]].nbytes < cap
    assert all(nb >= cap for nb in b.nbytes[:-1])
    # views of one flat buffer, one contiguous slice per bucket
    for i, g in enumerate(b.grads):
        assert g.shape == m.shapes[i] and np.shares_memory(g, b.flat)
    assert sum(b.nbytes) == b.flat.nbytes


def test_bucket_cap_rule():
    """PyTorch's Reducer: add the parameter, then close the bucket if it
    holds >= the cap (reducer.cpp, compute_bucket_assignment_by_size)."""
    assert assign_buckets([4, 4, 4, 4], 8) == [[3, 2], [1, 0]]
    # 4 B, then 20 B takes the bucket to 24 B >= 8 B: it closes *after*
    # the big one (the old rule closed before it: [[2], [1], [0]])
    assert assign_buckets([4, 20, 4], 8) == [[2, 1], [0]]
    assert assign_buckets([3, 3, 3, 3], 8) == [[3, 2, 1], [0]]
    assert assign_buckets([1, 2, 3], 100) == [[2, 1, 0]]
    assert assign_buckets([1, 2, 3], 3) == [[2], [1, 0]]
    # the first bucket's own cap, then the cap
    assert assign_buckets([4, 4, 4, 4], 8, first_bucket_bytes=2) == \
        [[3], [2, 1], [0]]
    with pytest.raises(ValueError):
        assign_buckets([1], 0)
    with pytest.raises(ValueError, match="first_bucket_bytes"):
        assign_buckets([1], 8, first_bucket_bytes=0)


MIB = 1 << 20


@pytest.mark.parametrize("cap,first,expected", [
    # Chapter 7's model: 8 layers of a 2 MiB weight W and a 4 KiB bias b
    # (float64); reverse order b7 W7 b6 W6 ... b0 W0 = indices 15, 14, ...
    (256 << 10, None, [[15 - 2 * k, 14 - 2 * k] for k in range(8)]),
    (4 * MIB, None, [list(range(15 - 4 * k, 11 - 4 * k, -1))
                     for k in range(4)]),
    (8 * MIB, None, [list(range(15, 7, -1)), list(range(7, -1, -1))]),
    (32 * MIB, None, [list(range(15, -1, -1))]),
    # PyTorch's defaults: a 1 MiB first bucket, then 25 MiB
    (25 * MIB, MIB, [[15, 14], list(range(13, -1, -1))]),
    (4 * MIB, MIB, [[15, 14], [13, 12, 11, 10], [9, 8, 7, 6], [5, 4, 3, 2],
                    [1, 0]]),
])
def test_chapter_model_bucket_splits(cap, first, expected):
    """Bucket splits of Chapter 7's model, computed by hand: with 2 MiB +
    4 KiB a layer, a 4 MiB cap closes after two whole layers (4 MiB + 8 KiB
    >= 4 MiB), 8 MiB after four, and a 256 KiB cap after each weight."""
    from warmup_kit.train.run import Config
    b = Buckets(MLP(Config().widths).shapes, cap, first_bucket_bytes=first)
    assert b.members == expected
    assert sum(b.nbytes) == 8 * (2 * MIB + 4096)


def test_bucket_readiness():
    b = Buckets([(2, 2), (2,), (2, 2), (2,)], 48)   # 32 B + 16 B a layer
    assert b.members == [[3, 2], [1, 0]]
    assert b.mark_ready(3) is None and b.mark_ready(2) == 0
    assert b.mark_ready(1) is None and b.mark_ready(0) == 1
    with pytest.raises(RuntimeError):
        b.mark_ready(0)
    b.reset()
    assert b.mark_ready(3) is None
    assert ready_positions(b.members, 2, [0, 0, 1, 1]) == [0, 1]


# ------------------------------------------------------------ the model
LAYERS = [2.0, 1.0, 3.0, 1.5]


def test_one_bucket_is_no_overlap():
    for share in (1.0, 0.5):
        one = step_timeline(LAYERS, [3], [2.5], forward_s=1.0,
                            optimizer_s=0.5, share=share)
        off = step_timeline(LAYERS, [3], [2.5], forward_s=1.0,
                            optimizer_s=0.5, overlap=False, share=share)
        assert one.step_s == off.step_s == 1.0 + sum(LAYERS) + 2.5 + 0.5
        assert one.exposed_s == pytest.approx(2.5)


def test_free_communication_is_compute_time():
    tl = step_timeline(LAYERS, [0, 1, 2, 3], [0.0] * 4, forward_s=1.0,
                       optimizer_s=0.5, share=0.5)
    assert tl.step_s == pytest.approx(1.0 + sum(LAYERS) + 0.5)
    assert tl.exposed_s == 0.0


def test_overlap_hides_what_fits_behind_later_layers():
    # bucket 0 ready after layer 0 (t=2) and lasts 1: hidden behind layer 1
    tl = step_timeline(LAYERS, [0, 3], [1.0, 0.25])
    assert tl.exposed_s == pytest.approx(0.25)
    assert tl.step_s == pytest.approx(sum(LAYERS) + 0.25)
    off = step_timeline(LAYERS, [0, 3], [1.0, 0.25], overlap=False)
    assert off.exposed_s == pytest.approx(1.25)
    # one channel: a long first bucket delays the second
    tl = step_timeline(LAYERS, [0, 1], [10.0, 1.0])
    comm = [s for s in tl.spans if s.lane == "comm"]
    assert comm[1].start_s == pytest.approx(comm[0].end_s)
    assert tl.step_s == pytest.approx(2.0 + 11.0)


def test_shared_cores_slow_both_sides():
    # bucket 0 (1 s) beside layer 1 (1 s), both at half speed: both end at 4
    tl = step_timeline([2.0, 1.0, 1.0], [0, 2], [1.0, 0.0], share=0.5)
    bwd1 = next(s for s in tl.spans if s.label == "bwd 1")
    b0 = next(s for s in tl.spans if s.label == "bucket 0")
    assert bwd1.end_s == pytest.approx(4.0) and b0.end_s == pytest.approx(4.0)
    assert tl.step_s == pytest.approx(5.0)


def test_spans_are_consistent():
    tl = step_timeline(LAYERS, [1, 3], [2.0, 1.0], forward_s=0.5,
                       optimizer_s=0.2, share=0.7)
    for lane in ("compute", "comm"):
        spans = [s for s in tl.spans if s.lane == lane]
        assert all(s.end_s >= s.start_s for s in spans)
        assert all(a.end_s <= b.start_s + 1e-12
                   for a, b in zip(spans, spans[1:]))
    assert max(s.end_s for s in tl.spans) == pytest.approx(tl.step_s)


def test_timeline_rejects_bad_input():
    with pytest.raises(ValueError):
        step_timeline(LAYERS, [0], [1.0, 2.0])
    with pytest.raises(ValueError):
        step_timeline(LAYERS, [4], [1.0])
    with pytest.raises(ValueError):
        step_timeline(LAYERS, [3, 1], [1.0, 1.0])
    with pytest.raises(ValueError):
        step_timeline(LAYERS, [3], [1.0], share=0)


@pytest.mark.parametrize("cores,ranks,share", [(2, 1, 1.0), (2, 2, 0.5),
                                               (2, 4, 0.5), (16, 4, 1.0),
                                               (6, 2, 1.0)])
def test_cpu_share(cores, ranks, share):
    assert cpu_share(cores, ranks) == share


def test_a_straggler_holds_every_collective_back():
    # one bucket: the step waits for the slowest rank, then communicates
    tl = step_timeline(LAYERS, [3], [1.0], lag_s=0.5)
    assert tl.step_s == pytest.approx(sum(LAYERS) + 0.5 + 1.0)
    assert tl.exposed_s == pytest.approx(1.5)
    # with overlap, the lag hides behind later layers too
    tl = step_timeline(LAYERS, [0, 3], [0.5, 0.0], lag_s=0.5)
    b0 = next(s for s in tl.spans if s.label == "bucket 0")
    assert b0.start_s == pytest.approx(2.5)
    assert tl.step_s == pytest.approx(sum(LAYERS) + 0.5)


# ------------------------------------------------------------ the stored run
STORED = Path(__file__).resolve().parents[1] \
    / "book" / "data" / "overlap.json"


def _stored():
    import json
    if not STORED.exists():
        pytest.skip("no stored run")
    return json.loads(STORED.read_text())["records"]


def test_stored_run_through_the_model():
    from warmup_kit.train import analysis as A
    for rec in _stored():
        rows = A.table_rows(rec)
        assert len(rows) == 2 * len(rec["config"]["bucket_sizes"])
        assert all(np.isfinite(r["error"]) for r in rows)
        assert len(A.job_collectives(rec)) == sum(
            len(r["bucket_nbytes"]) for r in rec["runs"] if not r["overlap"])
        # made with today's bucket rule (the widget's buckets are today's)
        shapes = MLP(tuple(rec["config"]["widths"])).shapes
        for r in rec["runs"]:
            assert r["bucket_nbytes"] == Buckets(shapes,
                                                 r["bucket_bytes"]).nbytes
        # one bucket: overlap changes nothing; free of shared cores, more
        # buckets never lose to one
        one_on = A.what_if(rec, 64 << 20, overlap=True)
        one_off = A.what_if(rec, 64 << 20, overlap=False)
        assert one_on.step_s == pytest.approx(one_off.step_s)
        gpu = A.what_if(rec, 4 << 20, share=1.0)
        assert gpu.step_s <= one_off.step_s + 1e-12
        assert gpu.exposed_s < one_off.exposed_s
