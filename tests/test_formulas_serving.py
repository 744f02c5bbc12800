"""Every term of the serving models, against hand computations and
published values (issue 31): shapes, KV cache, decode and prefill costs,
the KV hand-off, MoE routing and all-to-all bytes.

Sources: KV cache per token ``2 x layers x kv_heads x head_dim x bytes``
(Kwon et al. 2023, vLLM, section 3: "800 KB" per token for OPT-13B;
grouped-query attention, Ainslie et al. 2023, keeps ``kv_heads < heads``);
model shapes from the Llama 3 paper (Table 3) and model card (8.03B
parameters), Mixtral of Experts (Jiang et al. 2024: 47B parameters, 13B
active), Mistral 7B (window 4096). Tensor-parallel decode: 2 all-reduces
of ``batch x hidden`` per layer (Shoeybi et al. 2019, section 3), ring
bytes ``2 (t-1)/t``. Expert capacity ``ceil(cf T k / E)`` (GShard,
Lepikhin et al. 2021, section 2.2; Switch, Fedus et al. 2022, section 2.2).
"""
import math
from dataclasses import replace

import numpy as np
import pytest

from warmup_kit.model.hardware import SYSTEMS, Link
from warmup_kit.parallelism.compute import layer_times
from warmup_kit.serving.models.decode import (
    allreduce_bytes_per_token, decode_step, group_shape, linear_s, prefill,
    tp_allreduce)
from warmup_kit.serving.models.disagg import (
    handoff, kv_bytes_per_flop, route_link, transfer_s)
from warmup_kit.serving.models.experts import expected_dispatch_bytes, moe_layer_s
from warmup_kit.serving.models.kv_cache import (
    cached_tokens, kv_bytes_per_request, kv_bytes_per_token,
    kv_heads_per_rank, kv_per_gpu_bytes, kv_split, max_cached_tokens)
from warmup_kit.serving.models.routing import capacity, dispatch_bytes, route
from warmup_kit.serving.models.shapes import MODELS

L8, L70 = MODELS["Llama 3 8B"], MODELS["Llama 3 70B"]
MISTRAL, MIXTRAL, OPT = (MODELS["Mistral 7B"], MODELS["Mixtral 8x7B"],
                         MODELS["OPT-13B"])
DGX = SYSTEMS["dgx-h100"]
GPU = DGX.gpu
HBM_BPS = 3.35e12 * 0.85            # H100 SXM HBM3 at 85% (hardware table)


def roof(m, n, k, wb=2):
    """(m x k) @ (k x n): max(2mnk at 75% of 989 TFLOP/s, bytes at HBM)."""
    flops = 2 * m * n * k / (989e12 * 0.75)
    return max(flops, (wb * k * n + 2 * (m * k + m * n)) / HBM_BPS)


# ------------------------------------------------------------------ shapes
def test_shape_attention_params_are_hq_plus_2h_kv_plus_qh():
    # Llama 3 8B: q = 32 * 128 = 4096, kv = 8 * 128 = 1024
    assert L8.attn_params_per_layer == 4096 * 4096 * 2 + 2 * 4096 * 1024
    # OPT-13B with biases: 4 * 5120^2 + (5120 + 2 * 5120 + 5120)
    assert OPT.attn_params_per_layer == 4 * 5120 ** 2 + 4 * 5120


def test_shape_ffn_params_are_3hf_swiglu_or_2hf_plus_biases():
    assert L8.expert_params == 3 * 4096 * 14336                 # 176160768
    assert OPT.expert_params == 2 * 5120 * 20480 + 20480 + 5120


def test_shape_moe_layer_is_e_experts_plus_router_h_times_e():
    assert MIXTRAL.ffn_params_per_layer == 8 * 3 * 4096 * 14336 + 4096 * 8


def test_shape_norm_params_are_2h_per_layer_or_4h_with_bias():
    assert L8.norm_params_per_layer == 2 * 4096
    assert OPT.norm_params_per_layer == 4 * 5120


def test_shape_embeddings_are_2vh_untied_or_vh_tied_plus_positions_and_final_norm():
    assert L8.embedding_params == 2 * 128256 * 4096 + 4096
    assert OPT.embedding_params == 50272 * 5120 + 2050 * 5120 + 2 * 5120


def test_shape_llama3_8b_params_are_8_03b_published():
    # 32 * (41943040 + 176160768 + 8192) + 1050677248 = 8,030,261,248
    assert L8.params == 8_030_261_248
    assert L70.params / 1e9 == pytest.approx(70.6, abs=0.05)


def test_shape_mixtral_is_46_7b_total_12_9b_active_top2_of_8():
    # active: total - 32 layers * 6 idle experts * 176160768
    assert MIXTRAL.params == 46_702_792_704
    assert MIXTRAL.active_params == 46_702_792_704 - 32 * 6 * 176_160_768
    assert MIXTRAL.active_params / 1e9 == pytest.approx(12.9, abs=0.05)
    assert L8.active_params == L8.params


def test_shape_flops_per_token_are_2_per_active_weight_plus_output_layer():
    # 2 * (8030261248 - 1050677248 + 128256 * 4096)
    assert L8.flops_per_token() == 2 * (6_979_584_000 + 525_336_576)


def test_shape_experts_touched_is_e_times_1_minus_1_minus_k_over_e_to_t():
    # Mixtral: 8 (1 - 0.75^1) = 2, 8 (1 - 0.75^2) = 3.5; dense: 1
    assert MIXTRAL.experts_touched(1) == pytest.approx(2.0)
    assert MIXTRAL.experts_touched(2) == pytest.approx(3.5)
    assert L8.experts_touched(64) == 1.0


# ---------------------------------------------------------------- KV cache
def test_kv_bytes_per_token_is_2_layers_kv_heads_head_dim_bytes_gqa():
    # Llama 3 70B: 2 * 80 * 8 * 128 * 2 = 327,680 B = 320 KiB a token
    assert kv_bytes_per_token(L70) == 327_680
    assert kv_bytes_per_token(L8) == 2 * 32 * 8 * 128 * 2     # 128 KiB
    assert kv_bytes_per_token(L8, bytes_per=1) == 65_536      # fp8


def test_kv_bytes_per_token_opt13b_is_800kb_kwon2023():
    # vLLM paper, section 3: 2 (K, V) x 5120 x 40 layers x 2 B = 800 KB
    assert kv_bytes_per_token(OPT) == 2 * 5120 * 40 * 2 == 819_200


def test_kv_cached_tokens_are_capped_by_the_sliding_window_mistral_4096():
    assert cached_tokens(MISTRAL, 10_000) == 4096
    assert cached_tokens(MISTRAL, 4095) == 4095
    assert cached_tokens(L8, 10_000) == 10_000
    # one request at 8192 tokens keeps 4096 * 128 KiB = 512 MiB
    assert kv_bytes_per_request(MISTRAL, 8192) == 4096 * 131_072


def test_kv_heads_per_rank_is_kv_heads_over_tp_or_one_replicated():
    assert [kv_heads_per_rank(8, t) for t in (1, 2, 4, 8, 16, 32)] == \
        [8, 4, 2, 1, 1, 1]


def test_kv_split_replication_is_tp_times_heads_per_rank_over_kv_heads():
    s = kv_split(L70, 16)       # 16 GPUs, 8 KV heads: each head twice
    assert s.per_rank_bytes_per_token == 2 * 80 * 1 * 128 * 2 == 40_960
    assert s.group_bytes_per_token == 16 * 40_960 == 2 * 327_680
    assert s.replication == 2.0
    s = kv_split(L70, 4)
    assert (s.per_rank_bytes_per_token, s.replication) == (81_920, 1.0)


def test_kv_per_gpu_bytes_are_batch_times_tokens_times_per_rank_bytes():
    # Llama 3 70B, tp 8: 4 requests * 1000 tokens * 40960 B
    assert kv_per_gpu_bytes(L70, 8, batch=4, context=1000) == 163_840_000


def test_kv_max_cached_tokens_is_free_hbm_over_per_rank_bytes_per_token():
    # 80 GB * 0.9 - 8030261248 * 2 B of weights, over 131072 B a token
    free = 80e9 * 0.9 - 8_030_261_248 * 2
    assert max_cached_tokens(L8, 1, 80e9) == int(free // 131_072) == 426_784
    # tp 2: half the weights and half the KV heads each
    free2 = 80e9 * 0.9 - 8_030_261_248
    assert max_cached_tokens(L8, 2, 80e9) == int(free2 // 65_536)
    assert max_cached_tokens(L70, 1, 80e9) == 0      # 141 GB of weights


# ------------------------------------------------------------------ decode
def test_decode_linear_is_roofline_max_of_flops_and_weight_plus_act_bytes():
    # batch 1: memory-bound, 2 * 4096 * 1024 + 2 * (4096 + 1024) bytes
    assert linear_s(GPU, 1, 1024, 4096) == pytest.approx(
        (2 * 4096 * 1024 + 2 * 5120) / HBM_BPS)
    # fp8 weights: 1 byte each
    assert linear_s(GPU, 1, 1024, 4096, weight_bytes=1) == pytest.approx(
        (4096 * 1024 + 2 * 5120) / HBM_BPS)
    # 8192 rows: compute-bound, 2 m n k at 75% of 989 TFLOP/s
    assert linear_s(GPU, 8192, 4096, 4096) == pytest.approx(
        2 * 8192 * 4096 * 4096 / (989e12 * 0.75))


def test_decode_weights_read_attn_qkv_o_swiglu_2f_and_f_and_vocab_head_over_tp():
    # Llama 3 8B, tp 2, batch 1: 4 KV heads per GPU
    st = decode_step(L8, DGX, tp=2, batch=1, context=1000)
    attn = roof(1, 2048 + 2 * 4 * 128, 4096) + roof(1, 4096, 2048)
    ffn = roof(1, 2 * 14336 / 2, 4096) + roof(1, 4096, 14336 / 2)
    head = roof(1, 128256 / 2, 4096)
    assert st.weights_s == pytest.approx(32 * (attn + ffn) + head)


def test_decode_attention_reads_2_kv_heads_per_rank_times_head_dim_columns():
    # 8 vs 16 KV heads at tp 2: K and V columns 2 * 4 * 128 vs 2 * 8 * 128
    wide = replace(L8, kv_heads=16)
    d = (decode_step(wide, DGX, tp=2, batch=1, context=1).weights_s
         - decode_step(L8, DGX, tp=2, batch=1, context=1).weights_s)
    assert d == pytest.approx(32 * (roof(1, 2048 + 2048, 4096)
                                    - roof(1, 2048 + 1024, 4096)))


def test_decode_ffn_reads_2f_over_tp_gated_or_f_over_tp_classic():
    classic = replace(L8, gated=False)
    d = (decode_step(L8, DGX, tp=2, batch=1, context=1).weights_s
         - decode_step(classic, DGX, tp=2, batch=1, context=1).weights_s)
    assert d == pytest.approx(32 * (roof(1, 14336, 4096)
                                    - roof(1, 7168, 4096)))


def test_decode_vocab_head_reads_v_over_tp_columns_once():
    small = replace(L8, vocab=1000)
    d = (decode_step(L8, DGX, tp=2, batch=1, context=1).weights_s
         - decode_step(small, DGX, tp=2, batch=1, context=1).weights_s)
    assert d == pytest.approx(roof(1, 64128, 4096) - roof(1, 500, 4096))


def test_decode_moe_reads_touched_experts_with_batch_k_over_touched_rows():
    # Mixtral, tp 1, batch 4: 8 (1 - 0.75^4) = 5.46875 experts touched
    st = decode_step(MIXTRAL, DGX, tp=1, batch=4, context=1)
    e = 8 * (1 - 0.75 ** 4)
    rows = 4 * 2 / e
    ffn = e * (roof(rows, 2 * 14336, 4096) + roof(rows, 4096, 14336)) \
        + roof(4, 8, 4096)                                       # router
    attn = roof(4, 4096 + 2 * 8 * 128, 4096) + roof(4, 4096, 4096)
    assert st.weights_s == pytest.approx(32 * (attn + ffn)
                                         + roof(4, 32000, 4096))


def test_decode_kv_read_is_batch_tokens_per_rank_bytes_over_hbm():
    # Llama 3 70B, tp 8, 4 requests at 1000 tokens: 4 * 1000 * 40960 B
    st = decode_step(L70, DGX, tp=8, batch=4, context=1000)
    assert st.kv_bytes_per_gpu == 163_840_000
    assert st.kv_s == pytest.approx(163_840_000 / HBM_BPS)
    assert st.compute_s == pytest.approx(st.weights_s + st.kv_s)


def test_decode_comm_is_2_allreduces_per_layer_of_batch_hidden_2_bytes():
    st = decode_step(L70, DGX, tp=8, batch=4, context=1000)
    one = tp_allreduce(DGX, 4 * 8192 * 2, 8)
    assert st.allreduce.time_s == pytest.approx(one.time_s)
    assert st.comm_s == pytest.approx(2 * 80 * one.time_s)
    assert st.step_s == pytest.approx(st.compute_s + st.comm_s)
    assert st.tokens_per_s == pytest.approx(4 / st.step_s)


def test_decode_memory_held_is_weights_over_tp_plus_kv_against_hbm():
    st = decode_step(L70, DGX, tp=8, batch=4, context=1000)
    assert st.weight_bytes_per_gpu == pytest.approx(70_553_706_496 * 2 / 8)
    assert st.hbm_bytes == 80e9
    assert st.fits
    assert not decode_step(L70, DGX, tp=1, batch=1, context=1).fits


def test_decode_allreduce_bytes_per_token_are_2_layers_2_t_minus_1_over_t_bh2():
    # Llama 3 70B, tp 8: 2 * 80 * 2 * 7/8 * 8192 * 2 = 4,587,520 B a token
    assert allreduce_bytes_per_token(L70, 8) == pytest.approx(4_587_520)
    assert allreduce_bytes_per_token(L70, 8, batch=3) == \
        pytest.approx(3 * 4_587_520)
    assert allreduce_bytes_per_token(L70, 1) == 0


def test_decode_group_spans_ceil_tp_over_island_nvlink_islands():
    assert group_shape(DGX, 8) == (8, 1, 8)
    assert group_shape(DGX, 16) == (16, 2, 8)
    assert group_shape(DGX, 24) == (24, 3, 8)
    assert group_shape(DGX, 16, islands=4) == (16, 4, 4)


def test_prefill_ffn_width_is_1_5f_swiglu_times_top_k_plus_last_token_head():
    st = prefill(MIXTRAL, DGX, tp=2, batch=1, prompt=512)
    lt = layer_times(GPU, b=1, s=512, h=4096, a=32, ffn=14336 * 1.5 * 2,
                     t=2, flash_attention=True, precision="bf16",
                     kv_dim=1024)
    assert st.compute_s == pytest.approx(32 * lt.fwd_s + roof(1, 16000, 4096))


def test_prefill_comm_is_2_allreduces_per_layer_of_batch_prompt_hidden_2_bytes():
    st = prefill(L8, DGX, tp=4, batch=2, prompt=512)
    one = tp_allreduce(DGX, 2 * 512 * 4096 * 2, 4)
    assert st.comm_s == pytest.approx(2 * 32 * one.time_s)
    assert st.weight_bytes_per_gpu == pytest.approx(8_030_261_248 * 2 / 4)


# ----------------------------------------------------------------- hand-off
def test_disagg_transfer_is_messages_latency_plus_bytes_over_achievable_bw():
    link = Link("x", gbps=100.0, efficiency=0.5, latency_s=1e-5, source="")
    # 1 GB at 50 GB/s + 10 us;  3 messages: 3 latencies
    assert transfer_s(link, 1e9) == pytest.approx(0.02 + 1e-5)
    assert transfer_s(link, 1e9, messages=3) == pytest.approx(0.02 + 3e-5)


def test_disagg_handoff_ships_tokens_times_decode_tp_per_rank_kv_bytes():
    h = handoff(L70, DGX, prompt=1000, route="net", tp=8)
    assert h.kv_bytes == 1000 * 327_680
    assert h.bytes_per_gpu == 1000 * 40_960
    assert h.transfer_s == pytest.approx(14e-6 + 40_960_000 / 48.5e9)
    # decode tp 4: each GPU pulls 2 KV heads; tp 16: 1 (replicated)
    assert handoff(L70, DGX, prompt=1000, route="net", tp=8,
                   decode_tp=4).bytes_per_gpu == 1000 * 81_920
    assert handoff(L70, DGX, prompt=1000, route="net", tp=8,
                   decode_tp=16).bytes_per_gpu == 1000 * 40_960
    # a sliding window keeps 4096 tokens of an 8000-token prompt
    assert handoff(MISTRAL, DGX, prompt=8000, route="pcie", tp=1).kv_bytes \
        == 4096 * 131_072


def test_disagg_exposed_is_pipeline_of_l_layer_sends_behind_prefill():
    h = handoff(L70, DGX, prompt=1000, route="pcie", tp=4)
    per_layer = transfer_s(DGX.pcie, h.bytes_per_gpu / 80)
    pipe = max(h.prefill_s + per_layer, h.prefill_s / 80 + 80 * per_layer)
    assert h.exposed_s == pytest.approx(pipe - h.prefill_s)
    assert h.recompute_s == pytest.approx(
        prefill(L70, DGX, tp=4, batch=1, prompt=1000).step_s)
    assert h.ship_vs_recompute == pytest.approx(h.transfer_s / h.recompute_s)


def test_disagg_recompute_is_the_prefill_on_the_decode_tp_group():
    h = handoff(L70, DGX, prompt=1000, route="net", tp=8, decode_tp=4)
    assert h.recompute_s == pytest.approx(
        prefill(L70, DGX, tp=4, batch=1, prompt=1000).step_s)
    assert h.prefill_s == pytest.approx(
        prefill(L70, DGX, tp=8, batch=1, prompt=1000).step_s)


def test_disagg_route_links_nvlink_nic_pcie():
    assert route_link(DGX, "nvlink") is DGX.nvlink
    assert route_link(DGX, "net") is DGX.nic
    assert route_link(DGX, "pcie") is DGX.pcie
    with pytest.raises(ValueError):
        handoff(L8, DGX, prompt=10, route="nvlink", tp=8)   # 16 > 8 GPUs


def test_disagg_kv_bytes_per_flop_is_kv_per_token_over_flops_per_token():
    assert kv_bytes_per_flop(L8) == pytest.approx(
        131_072 / (2 * (6_979_584_000 + 525_336_576)))


# --------------------------------------------------------------- MoE bytes
def test_moe_dispatch_bytes_are_t_k_ep_minus_1_over_ep_h_2_dropless():
    # 100 tokens * 2 choices * 7/8 remote * 4096 * 2 B = 1,433,600
    assert expected_dispatch_bytes(100, 4096, 2, 8) == pytest.approx(1433600)
    assert expected_dispatch_bytes(100, 4096, 2, 1) == 0
    # dropless sends what is routed: a capacity factor does not pad it
    assert expected_dispatch_bytes(100, 4096, 2, 8, capacity_factor=1.25) \
        == pytest.approx(1433600)


def test_moe_padded_dispatch_bytes_are_times_capacity_factor():
    assert expected_dispatch_bytes(100, 4096, 2, 8, capacity_factor=1.25,
                                   padded=True) == pytest.approx(1792000)
    assert moe_layer_s(DGX, tokens=100, hidden=4096, top_k=2, ep=1) == 0.0


def test_routing_capacity_is_ceil_cf_tokens_k_over_experts():
    # ceil(1.25 * 10 * 2 / 4) = ceil(6.25) = 7;  no factor: every choice
    assert capacity(10, 4, 2, 1.25) == 7
    assert capacity(10, 4, 2, 1.0) == 5
    assert capacity(10, 4, 2, None) == 20


def test_routing_weights_are_softmax_over_the_top_k_scores():
    r = route(np.array([[0.0, math.log(3.0), -5.0]]), top_k=2)
    assert r.expert.tolist() == [[1, 0]]
    # e^ln3 / (e^ln3 + e^0) = 3/4
    np.testing.assert_allclose(r.weight, [[0.75, 0.25]])


def test_routing_first_choices_fill_capacity_before_second_choices():
    # 4 tokens, 2 experts, top 2, cf 0.5: capacity ceil(0.5*4*2/2) = 2.
    # Every token ranks expert 0 first: tokens 0-1 fill it. Then the
    # second choices, in token order: tokens 0-1 fill expert 1, and
    # tokens 2-3 lose both choices
    r = route(np.array([[1.0, 0.0]] * 4), top_k=2, capacity_factor=0.5)
    assert r.capacity == 2
    assert r.keep.tolist() == [[True, True], [True, True],
                               [False, False], [False, False]]
    assert r.dropped == 4
    assert r.per_expert().tolist() == [2, 2]
    assert r.per_rank(2).tolist() == [2, 2]
    # tokens 0-1 rank expert 0 first, tokens 2-3 expert 1: every first
    # choice is served, every second choice dropped (in token order,
    # tokens 0-1 would have taken both experts' slots)
    r = route(np.array([[1.0, 0.0]] * 2 + [[0.0, 1.0]] * 2), top_k=2,
              capacity_factor=0.5)
    assert r.keep.tolist() == [[True, False]] * 4


def test_routing_dispatch_bytes_are_off_diagonal_row_sums_times_h_itemsize():
    # rank 0 sends 2 rows to rank 1, rank 1 sends 3 to rank 0; h 3, 2 B
    np.testing.assert_array_equal(
        dispatch_bytes(np.array([[1, 2], [3, 4]]), 3, 2), [12, 18])
