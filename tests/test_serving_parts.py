"""The pure-numpy parts of Chapter 9: routing with a capacity, and the toy
decoder's Megatron split (checked in one process here; on real ranks in
tests/test_serving_ranks.py)."""
from __future__ import annotations

import numpy as np
import pytest

from warmup_kit.serving.models import toy
from warmup_kit.serving.models.kv_cache import kv_split
from warmup_kit.serving.models.routing import capacity, dispatch_bytes, route


# ------------------------------------------------------------- routing
def test_top_k_and_gate_weights():
    scores = np.array([[0.0, 3.0, 1.0, 2.0], [5.0, 4.0, 0.0, 0.0]])
    r = route(scores, 2)
    assert r.expert.tolist() == [[1, 3], [0, 1]]
    np.testing.assert_allclose(r.weight.sum(axis=1), 1.0)
    np.testing.assert_allclose(r.weight[0], np.exp([3, 2]) / np.exp(
        [3, 2]).sum())
    assert r.keep.all() and r.dropped == 0


def test_capacity_drops_first_choices_last():
    # 4 tokens all prefer expert 0, then expert 1; capacity 1.0 of
    # 4 x 2 / 4 = 2 per expert: expert 0 takes tokens 0 and 1 (first
    # choices, in token order), expert 1 then the same two as second
    # choices; tokens 2 and 3 lose both
    scores = np.tile([3.0, 2.0, 1.0, 0.0], (4, 1))
    r = route(scores, 2, capacity_factor=1.0)
    assert r.capacity == capacity(4, 4, 2, 1.0) == 2
    assert r.keep.tolist() == [[True, True], [True, True],
                               [False, False], [False, False]]
    assert r.per_expert().tolist() == [2, 2, 0, 0]
    assert r.per_rank(2).tolist() == [4, 0]
    assert route(scores, 2).dropped == 0                 # no capacity


def test_first_choices_are_served_before_second_choices():
    # token 0's second choice and token 1's first choice both want expert
    # 1, which takes one: token 1 (a first choice) gets it, although
    # token 0 comes first; token 1's second choice, expert 2, is free
    scores = np.array([[2.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    r = route(scores, 2, capacity_factor=0.75)          # cap ceil(1) = 1
    assert r.capacity == 1
    assert r.expert.tolist() == [[0, 1], [1, 2]]
    assert r.keep.tolist() == [[True, False], [True, True]]


def test_dispatch_bytes_from_the_counts():
    c = np.array([[3, 1, 0], [2, 5, 4], [0, 0, 7]])
    assert dispatch_bytes(c, 10, 8).tolist() == [80, 480, 0]
    assert dispatch_bytes(c.T, 10, 8).tolist() == [160, 80, 320]
    with pytest.raises(ValueError):
        dispatch_bytes(np.ones((2, 3)), 1, 1)


@pytest.mark.parametrize("bad", [dict(top_k=0), dict(top_k=5),
                                 dict(top_k=1, capacity_factor=0)])
def test_routing_refuses_bad_input(bad):
    with pytest.raises(ValueError):
        route(np.zeros((3, 4)), **bad)


# ----------------------------------------------------------------- toy
CFG = toy.ToyConfig(layers=2, hidden=64, heads=8, kv_heads=2, ffn=64,
                    vocab=64, max_seq=16)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_shards_cover_every_head_and_column(tp):
    w = toy.Weights(CFG)
    shards = [toy.Shard(w, tp, r) for r in range(tp)]
    assert sorted(h for s in shards for h in s.q_heads) == list(range(8))
    # the FFN's columns and W_o's rows add back up to the whole
    for layer in range(CFG.layers):
        np.testing.assert_array_equal(np.hstack(
            [s.layers[layer]["w_gate"] for s in shards]),
            w.layers[layer]["w_gate"])
        np.testing.assert_array_equal(np.vstack(
            [s.layers[layer]["wo"] for s in shards]), w.layers[layer]["wo"])
    # each rank caches the KV heads its query heads read
    group = CFG.heads // CFG.kv_heads
    for s in shards:
        assert {q // group for q in s.q_heads} == set(s.kv_heads)
        assert toy.KVCache(s, 1).bytes_per_token == kv_split(
            CFG.shape(), tp, bytes_per=8).per_rank_bytes_per_token


def test_partial_sums_add_up_to_the_whole_model():
    """Summing the ranks' partial results by hand (what the all-reduce
    does) gives the single-process logits."""
    w = toy.Weights(CFG)
    p = toy.prompts(CFG, 2, 5)
    whole = toy.forward(toy.Shard(w), toy.KVCache(toy.Shard(w), 2), p)
    tp = 4
    shards = [toy.Shard(w, tp, r) for r in range(tp)]
    caches = [toy.KVCache(s, 2) for s in shards]
    x = shards[0].embed[p] + shards[0].pos[:5]
    for i in range(CFG.layers):
        x = x + sum(toy.attention_block(s, c, i, x, 0)
                    for s, c in zip(shards, caches))
        x = x + sum(toy.ffn_block(s, i, x) for s in shards)
    logits = toy.rmsnorm(x[:, -1], w.norm) @ w.head
    np.testing.assert_allclose(logits, whole, rtol=1e-12, atol=1e-12)


def test_cache_pack_and_unpack_round_trip():
    s = toy.Shard(toy.Weights(CFG), 2, 1)
    a, b = toy.KVCache(s, 3), toy.KVCache(s, 3)
    toy.forward(s, a, toy.prompts(CFG, 3, 6))
    flat = a.pack()
    assert flat.nbytes == 3 * 6 * a.bytes_per_token
    b.unpack(flat, 6)
    for x, y in zip(a.k + a.v, b.k + b.v):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError):
        b.unpack(flat[:-1], 6)


def test_generation_is_deterministic_and_bounded():
    p = toy.prompts(CFG, 2, 4)
    a, b = toy.generate(CFG, p, 5), toy.generate(CFG, p, 5)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 5)
    with pytest.raises(ValueError):
        toy.generate(CFG, p, 20)            # past max_seq


# ------------------------------------------------ one BLAS thread per rank
def test_limit_blas_threads_caps_numpys_openblas():
    from warmup_kit.machine import blas_threads, limit_blas_threads
    before = blas_threads()
    if before is None:
        pytest.skip("numpy is not linked against OpenBLAS here")
    try:
        assert limit_blas_threads(1) is True
        assert blas_threads() == 1
    finally:
        limit_blas_threads(before)
    assert blas_threads() == before
