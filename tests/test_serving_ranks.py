"""Chapter 9's jobs on real ranks: sockets, shared memory, MPI.

One launch per (transport, N) runs tests/mpi/serving_cases.py's jobs; the
tests check what they report:

* tensor-parallel decoding generates exactly the tokens of single-process
  decoding, on every rank, with either all-reduce algorithm;
* each decode step issues two all-reduces per layer and sends exactly the
  schedule's bytes for a ``batch x hidden`` buffer (ring: 2(N-1)/N of it
  per call), and each rank's cache holds the KV bytes per token of
  :func:`warmup_kit.serving.models.kv_cache.kv_split` (replicated heads
  included);
* the routed MoE layer equals the dense single-process layer, over all
  ranks and over sub-communicators, and its dispatch and combine send
  exactly the bytes its routing implies;
* the KV hand-off (prefill ranks -> decode ranks) yields the same tokens
  and moves exactly the cache shard and the first tokens.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import serving_cases as sc
import warmup_kit as wk
from conftest import mpi_script, requires_mpi
from warmup_kit.serving import handoff, moe_layer
from warmup_kit.serving.models import toy
from warmup_kit.serving.models.kv_cache import kv_split
from warmup_kit.serving.run import allreduce_bytes

LAUNCH_TIMEOUT_S = 120
CASES = [("sockets", 2), ("sockets", 4), ("shm", 2), ("shm", 4)]


@functools.lru_cache(maxsize=None)
def job(transport: str, n: int) -> tuple:
    if transport == "mpi":
        return tuple(mpi_script("serving", n, timeout=LAUNCH_TIMEOUT_S)
                     ["per_rank"])
    return tuple(wk.launch(sc.run_all, n, transport=transport,
                           timeout=LAUNCH_TIMEOUT_S))


def _cases():
    marks = [pytest.mark.multiproc, pytest.mark.timeout(LAUNCH_TIMEOUT_S + 60)]
    out = [pytest.param(t, n, id=f"{t}-N{n}", marks=marks) for t, n in CASES]
    out += [pytest.param("mpi", n, id=f"mpi-N{n}", marks=marks + [
        pytest.mark.mpi, requires_mpi]) for n in (2, 4)]
    return out


@functools.lru_cache(maxsize=None)
def reference_tokens() -> np.ndarray:
    return toy.generate(sc.TOY, toy.prompts(sc.TOY, sc.BATCH, sc.PROMPT),
                        sc.NEW)


@pytest.mark.parametrize("alg", ["ring", "recursive_doubling"])
@pytest.mark.parametrize("transport,n", _cases())
def test_tp_decode_equals_single_process(transport, n, alg):
    ref = reference_tokens()
    assert len(set(ref.ravel().tolist())) > 3        # not a constant
    ranks = job(transport, n)
    assert [r["tp"][alg]["rank"] for r in ranks] == list(range(n))
    for r in ranks:
        np.testing.assert_array_equal(np.array(r["tp"][alg]["tokens"]), ref)


@pytest.mark.parametrize("alg", ["ring", "recursive_doubling"])
@pytest.mark.parametrize("transport,n", _cases())
def test_tp_decode_traffic_is_two_allreduces_per_layer(transport, n, alg):
    nbytes = sc.BATCH * sc.TOY.hidden * 8
    for r in job(transport, n):
        rank = r["tp"][alg]["rank"]
        per_call = allreduce_bytes(alg, nbytes, n, rank)
        if alg == "ring":
            assert per_call == 2 * (n - 1) * nbytes // n
        for st in r["tp"][alg]["steps"]:
            assert st["calls"] == 2 * sc.TOY.layers
            assert st["bytes_sent"] == 2 * sc.TOY.layers * per_call
        pre = r["tp"][alg]["prefill"]       # the prompt: s times the bytes
        assert pre["bytes_sent"] == 2 * sc.TOY.layers * allreduce_bytes(
            alg, nbytes * sc.PROMPT, n, rank)


@pytest.mark.parametrize("transport,n", _cases())
def test_tp_ranks_keep_their_share_of_the_kv_cache(transport, n):
    split = kv_split(sc.TOY.shape(), n, bytes_per=8)
    heads = [r["tp"]["ring"]["kv_heads"] for r in job(transport, n)]
    for r in job(transport, n):
        assert r["tp"]["ring"]["kv_bytes_per_token"] == \
            split.per_rank_bytes_per_token
    # every KV head is held, each by tp / kv_heads ranks when tp > kv_heads
    held = [h for hs in heads for h in hs]
    assert sorted(set(held)) == list(range(sc.TOY.kv_heads))
    assert len(held) == split.replication * sc.TOY.kv_heads


@pytest.mark.parametrize("transport,n", _cases())
def test_moe_layer_equals_dense_reference(transport, n):
    ranks = [r["moe"] for r in job(transport, n)]
    assert moe_layer.matches_reference(ranks, sc.MOE)
    ref = moe_layer.reference(sc.MOE, n)
    assert np.abs(ref).max() > 0.1                  # the layer did something
    if n == 4:                                     # EP over sub-communicators
        sub = [r["moe_ep2"] for r in job(transport, n)]
        assert {r["group"] for r in sub} == {0, 1}
        assert moe_layer.matches_reference(sub, sc.MOE)


@pytest.mark.parametrize("transport,n", _cases())
def test_moe_bytes_equal_the_routing(transport, n):
    keys = ["moe", "moe_ep2"] if n == 4 else ["moe"]
    for key in keys:
        rows = moe_layer.byte_rows([r[key] for r in job(transport, n)])
        for row in rows:
            assert row["dispatch_bytes"] == row["dispatch_formula"]
            assert row["combine_bytes"] == row["combine_formula"]
            # the per-expert counts: one even all-to-all of E int64
            assert row["counts_bytes"] == (row["ep"] - 1) * \
                sc.MOE.experts // row["ep"] * 8
        # everything sent comes back
        assert sum(r["dispatch_bytes"] for r in rows) == \
            sum(r["combine_bytes"] for r in rows) > 0


@pytest.mark.parametrize("transport,n", _cases())
def test_kv_handoff_continues_the_same_decode(transport, n):
    ranks = [r["handoff"] for r in job(transport, n)]
    assert [r["role"] for r in ranks] == ["prefill"] * (n // 2) + \
        ["decode"] * (n // 2)
    rows = handoff.rows(ranks, sc.HANDOFF)
    assert len(rows) == n // 2
    split = kv_split(sc.TOY.shape(), n // 2, bytes_per=8)
    for row in rows:
        assert row["tokens_equal"]
        assert row["formula_bytes"] == (sc.BATCH * sc.PROMPT
                                        * split.per_rank_bytes_per_token
                                        + sc.BATCH * 8)
        assert row["bytes"] == [row["formula_bytes"]]
    for r in ranks:                            # the sender sent as much
        if r["role"] == "prefill":
            assert set(r["transfer_bytes"]) == {rows[0]["formula_bytes"]}


@pytest.mark.multiproc
@pytest.mark.timeout(LAUNCH_TIMEOUT_S + 60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_measured_decode_is_well_formed(transport):
    """The benchmark's measurement on a tiny run: every setting, every step
    timed and counted, the model's rows; no timing is asserted."""
    from warmup_kit.serving import run as R
    cfg = R.RunConfig(toy=sc.TOY, batch=2, prompt=4, new_tokens=3,
                      passes=2, warmup=0, sweep_bytes=(256, 1024, 4096),
                      sweep_reps=3)
    rec = wk.launch(R.measure, 2, args=(cfg,), transport=transport,
                    timeout=LAUNCH_TIMEOUT_S)[0]
    assert rec["ranks"] == 2 and len(rec["sweep"]) == 2 * 2 * 3
    for alg in cfg.algorithms:
        assert rec["tokens_equal"][alg]
        assert rec["tokens_same_on_every_rank"][alg]
        assert len(rec["steps"][alg]) == 2 * (cfg.new_tokens - 1)
        for st in rec["steps"][alg]:
            assert 0 <= st["comm_s"] <= st["step_s"] and st["lag_s"] >= 0
    rows = R.compare(rec)
    assert [r["algorithm"] for r in rows] == list(cfg.algorithms)
    for r in rows:
        assert r["bytes_per_step"] == [r["formula_bytes_per_step"]]
        assert 0 < r["latency_share"] <= 1
