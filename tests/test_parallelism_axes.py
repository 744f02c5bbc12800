"""The newer axes of the step model: uneven pipelines, grouped-query
attention, context parallelism, ZeRO/FSDP, expert parallelism, and the
search over them."""
import pytest

from warmup_kit.model.hardware import cluster
from warmup_kit.parallelism.axes import (a2a_bytes_per_token,
                                         zero_traffic_bytes)
from warmup_kit.parallelism.search import layouts_nd, search
from warmup_kit.parallelism.step import (Transformer, iteration_time,
                                         stage_layers)

LLAMA405 = Transformer(126, 16384, 128, 8192, 128256, ffn=53248, kv_heads=8)
GPT = Transformer(32, 4096, 32, 4096, 51200)


def test_126_layers_over_16_stages():
    assert stage_layers(126, 16) == (7,) + (8,) * 14 + (7,)
    r = iteration_time(LLAMA405, cluster("dgx-h100", 256), tp=8, pp=16,
                       dp=16, global_batch=256, micro_batch=1)
    assert r.config["layer_split"] == stage_layers(126, 16)
    assert r.total_s > 0


def test_any_split_and_the_slowest_stage_paces():
    c = cluster("dgx-h100", 4)
    kw = dict(tp=8, pp=4, dp=1, global_batch=32, micro_batch=1)
    even = iteration_time(GPT, c, **kw)
    skew = iteration_time(GPT, c, layer_split=(5, 9, 9, 9), **kw)
    assert skew.config["layer_split"] == (5, 9, 9, 9)
    assert skew.total_s > even.total_s          # a 9-layer stage paces it
    assert skew.parts["pp_imbalance"] > even.parts["pp_imbalance"]


def test_gqa_shrinks_params_flops_and_kv_memory_not_tp_traffic():
    mha = Transformer(32, 8192, 64, 4096, 128000)
    gqa = Transformer(32, 8192, 64, 4096, 128000, kv_heads=8)
    assert gqa.params < mha.params
    assert gqa.attn_params_per_layer == 2 * 8192 ** 2 + 2 * 8192 * 1024 \
        + 2 * 8192 + 2 * 1024
    assert gqa.flops_per_sample("none") < mha.flops_per_sample("none")
    c = cluster("dgx-h100", 1)
    kw = dict(tp=8, pp=1, dp=1, global_batch=8, micro_batch=1,
              recompute="selective")
    a, b = iteration_time(mha, c, **kw), iteration_time(gqa, c, **kw)
    assert b.memory.activations_bytes < a.memory.activations_bytes
    # the TP all-reduces carry b s h activations either way
    assert b.parts["tp_comm"] == pytest.approx(a.parts["tp_comm"])
    with pytest.raises(ValueError):
        Transformer(32, 8192, 64, 4096, 128000, kv_heads=7)


def test_context_parallel_splits_the_sequence():
    long = Transformer(32, 4096, 32, 32768, 51200, kv_heads=8)
    c = cluster("dgx-h100", 2)
    kw = dict(tp=8, pp=1, global_batch=8, micro_batch=1,
              recompute="selective")
    one = iteration_time(long, c, dp=1, **kw)
    two = iteration_time(long, c, dp=1, cp=2, **kw)
    assert two.config["cp"] == 2 and "cp_comm" in two.parts
    # half the tokens per GPU: less activation memory, faster step
    assert two.memory.activations_bytes < 0.6 * one.memory.activations_bytes
    assert two.total_s < one.total_s
    assert sum(two.parts.values()) == pytest.approx(two.total_s)
    with pytest.raises(ValueError):
        iteration_time(long, c, dp=1, cp=3, **kw)


def test_zero_memory_and_traffic():
    c = cluster("dgx-h100", 8)
    kw = dict(tp=8, pp=1, dp=8, global_batch=64, micro_batch=1)
    mem = [iteration_time(GPT, c, zero=z, **kw).memory for z in range(4)]
    assert mem[1].optimizer_bytes == pytest.approx(mem[0].optimizer_bytes / 8)
    assert mem[2].grads_bytes == pytest.approx(mem[1].grads_bytes / 8)
    assert mem[3].weights_bytes < mem[2].weights_bytes
    totals = [m.total_bytes for m in mem]
    assert totals == sorted(totals, reverse=True)
    # 3 passes over the parameters for ZeRO-3 vs 2 (same dtype)
    assert zero_traffic_bytes(1e9, 3, 8, 2, 2) / \
        zero_traffic_bytes(1e9, 1, 8, 2, 2) == pytest.approx(1.5)
    assert zero_traffic_bytes(1e9, 0, 8, 2, 2) == \
        zero_traffic_bytes(1e9, 1, 8, 2, 2)
    t0 = iteration_time(GPT, c, zero=0, **kw).config["dp_allreduce_s"]
    t3 = iteration_time(GPT, c, zero=3, **kw).config["dp_allreduce_s"]
    assert t3 > t0


def test_expert_parallel_all_to_all():
    moe = Transformer(24, 4096, 32, 4096, 51200, kv_heads=8, experts=8,
                      top_k=2)
    dense = Transformer(24, 4096, 32, 4096, 51200, kv_heads=8)
    assert moe.params > 6 * dense.params / 2
    assert moe.active_ffn == 2 * moe.ffn
    # per token per MoE layer: 2 all-to-alls forward + 2 backward,
    # top_k * capacity copies of h bf16 values, (ep-1)/ep of them leave
    assert a2a_bytes_per_token(4096, 2, 1.25, 8) == \
        pytest.approx(4 * 2 * 1.25 * 4096 * 2 * 7 / 8)
    c = cluster("dgx-h100", 8)
    kw = dict(tp=1, pp=1, dp=64, global_batch=64, micro_batch=1,
              recompute="selective")
    e1 = iteration_time(moe, c, ep=1, **kw)
    e8 = iteration_time(moe, c, ep=8, **kw)
    assert "ep_comm" in e8.parts and e8.parts["ep_comm"] > 0
    assert e8.memory.weights_bytes < e1.memory.weights_bytes / 3
    cf = iteration_time(moe, c, ep=8, capacity_factor=2.0, **kw)
    assert cf.total_s > e8.total_s
    with pytest.raises(ValueError):
        iteration_time(dense, c, ep=8, **kw)


def test_search_covers_the_new_axes():
    seen = {(d["cp"], d["zero"]) for d in layouts_nd(
        LLAMA405, 16384, 2048, max_tp=8, micro_batches=(1,),
        cps=(1, 2, 4), zeros=(0, 1, 3))}
    assert {(1, 0), (2, 1), (4, 3)} <= seen
    best = search(LLAMA405, cluster("dgx-h100", 2048), 2048,
                  micro_batches=(1,), cps=(1, 2, 4), zeros=(0, 1, 3))
    assert best and all(r.fits for r in best)
    # pp need not divide 126: 16 stages is a candidate
    assert any(d["pp"] == 16 for d in layouts_nd(
        LLAMA405, 16384, 2048, max_tp=8, micro_batches=(1,)))


def test_comm_bound_rule_of_thumb():
    from warmup_kit.parallelism.axes import comm_bound_tokens
    # 1e15 FLOP/s against 50 GB/s, bf16 gradients, all-reduce: 13,333
    assert comm_bound_tokens(1e15, 50e9) == pytest.approx(2 * 2 * 1e15
                                                          / (6 * 50e9))
    assert comm_bound_tokens(1e15, 50e9, passes=3) == \
        pytest.approx(1.5 * comm_bound_tokens(1e15, 50e9))


def test_splits_figure_renders():
    from warmup_kit.viz.plots_parallelism import splits_figure
    from warmup_kit.viz.widgets import show
    fig = splits_figure(4)
    assert len(fig.panels) == 3
    assert fig.panels[0].traces[0].text[0] == ["GPU 0", "GPU 1", "GPU 2",
                                               "GPU 3"]


def test_cp_rule_of_thumb():
    from warmup_kit.parallelism.axes import cp_hidden_tokens
    assert cp_hidden_tokens(1e15, 50e9, hidden=8192, kv_dim=1024) == \
        pytest.approx(2500.0)


def test_fsdp_traffic_repeats_every_micro_batch():
    one = zero_traffic_bytes(1e9, 3, 8, 2, 2)
    assert zero_traffic_bytes(1e9, 3, 8, 2, 2, micro_batches=4) == \
        pytest.approx(4 * one)
    # stages 0-2 synchronise once per step however many micro-batches
    assert zero_traffic_bytes(1e9, 1, 8, 2, 2, micro_batches=4) == \
        zero_traffic_bytes(1e9, 1, 8, 2, 2)
