"""The serving model (Chapter 9) against published shapes and figures.

Shapes are the papers' and released configs' (warmup_kit.serving.models.shapes
names each source). Every published row tried is kept here.
"""
from __future__ import annotations

import math

import pytest

from warmup_kit.model.hardware import SYSTEMS
from warmup_kit.serving.models import decode, disagg, experts
from warmup_kit.serving.models.kv_cache import (
    cached_tokens, kv_bytes_per_request, kv_bytes_per_token,
    kv_heads_per_rank, kv_per_gpu_bytes, kv_split, max_cached_tokens)
from warmup_kit.serving.models.shapes import MODELS, ModelShape, model

KIB, MIB = 1 << 10, 1 << 20

# ----------------------------------------------------- parameter counts
#: (model, published parameters, rounding of the published figure, source)
PARAMS = [
    # Hugging Face model pages (safetensors metadata): "8.03B params" etc.
    ("Llama 3 8B", 8.03e9, 0.005e9, "meta-llama/Meta-Llama-3-8B: 8.03B"),
    ("Llama 3 70B", 70.6e9, 0.05e9, "meta-llama/Meta-Llama-3-70B: 70.6B"),
    ("Llama 3 405B", 405e9, 1e9, "The Llama 3 Herd of Models: 405B"),
    ("Mistral 7B", 7.24e9, 0.005e9, "mistralai/Mistral-7B-v0.1: 7.24B"),
    ("Mixtral 8x7B", 46.7e9, 0.05e9, "mistralai/Mixtral-8x7B-v0.1: 46.7B"),
]


@pytest.mark.parametrize("name,published,rounding,source", PARAMS,
                         ids=[p[0] for p in PARAMS])
def test_shapes_give_the_published_parameter_counts(name, published,
                                                    rounding, source):
    assert abs(model(name).params - published) <= rounding, source


def test_exact_counts_of_the_released_checkpoints():
    # the released safetensors: 8,030,261,248 and 70,553,706,496 parameters
    assert model("Llama 3 8B").params == 8_030_261_248
    assert model("Llama 3 70B").params == 70_553_706_496


def test_mixtral_active_parameters():
    # Jiang et al. 2024, section 2: "13B active parameters" of "47B"
    m = model("Mixtral 8x7B")
    assert m.active_params == pytest.approx(12.9e9, abs=0.05e9)
    assert m.params / m.active_params == pytest.approx(3.6, abs=0.05)


# ------------------------------------------------------- KV per token
#: layers x 2 x kv_heads x head_dim x 2 bytes, from each model's shape
KV_PER_TOKEN = [
    ("Llama 3 8B", 32 * 2 * 8 * 128 * 2, 128 * KIB),
    ("Llama 3 70B", 80 * 2 * 8 * 128 * 2, 320 * KIB),
    ("Llama 3 405B", 126 * 2 * 8 * 128 * 2, 504 * KIB),
    ("Mistral 7B", 32 * 2 * 8 * 128 * 2, 128 * KIB),
    ("Mixtral 8x7B", 32 * 2 * 8 * 128 * 2, 128 * KIB),
    # Kwon et al. 2023 (vLLM), section 3: "the KV cache of a single token
    # demands 800 KB of space, calculated as 2 x 5120 x 40 x 2"
    ("OPT-13B", 2 * 5120 * 40 * 2, 800 * KIB),
]


@pytest.mark.parametrize("name,formula,kib", KV_PER_TOKEN,
                         ids=[k[0] for k in KV_PER_TOKEN])
def test_kv_bytes_per_token_of_published_shapes(name, formula, kib):
    assert kv_bytes_per_token(model(name)) == formula == kib


def test_vllm_one_opt13b_request():
    # Kwon et al. 2023, section 3: up to 2048 tokens, "as much as 1.6 GB"
    assert kv_bytes_per_request(model("OPT-13B"), 2048) == 1600 * MIB


def test_kvdirect_70b_prompt_per_gpu_of_eight():
    # Chen et al. 2025 (KVDirect), section 2: in 70B models a 16K-token
    # prompt leaves "640 MB of KV cache ... for a single GPU out of eight"
    m = model("Llama 3 70B")
    assert kv_per_gpu_bytes(m, 8, batch=1, context=16384) == 640 * MIB


def test_gqa_shrinks_the_cache_by_heads_over_kv_heads():
    m = model("Llama 3 70B")
    mha = ModelShape("70B, MHA", m.layers, m.hidden, m.heads, m.heads,
                     m.head_dim, m.ffn, m.vocab)
    assert kv_bytes_per_token(mha) == 8 * kv_bytes_per_token(m)


def test_mistral_rolling_buffer_saves_8x_at_32k():
    # Jiang et al. 2023, section 2: with a 4096-token window "on a sequence
    # length of 32k tokens, this reduces the cache memory usage by 8x"
    m = model("Mistral 7B")
    assert cached_tokens(m, 32768) == 4096
    full = 32768 * kv_bytes_per_token(m)
    assert full / kv_bytes_per_request(m, 32768) == 8
    assert cached_tokens(m, 1000) == 1000


# --------------------------------------------------------- the TP split
@pytest.mark.parametrize("tp,per,replication", [
    (1, 8, 1), (2, 4, 1), (4, 2, 1), (8, 1, 1), (16, 1, 2), (32, 1, 4)])
def test_kv_split_over_tp_replicates_past_the_kv_heads(tp, per, replication):
    m = model("Llama 3 405B")
    s = kv_split(m, tp)
    assert s.heads_per_rank == per
    assert s.replication == replication
    assert s.per_rank_bytes_per_token == kv_bytes_per_token(m) * per // 8
    assert s.group_bytes_per_token == replication * kv_bytes_per_token(m)


@pytest.mark.parametrize("kv,tp", [(8, 3), (8, 12), (6, 4)])
def test_a_kv_head_is_never_split(kv, tp):
    with pytest.raises(ValueError):
        kv_heads_per_rank(kv, tp)


def test_cache_capacity_beside_the_weights():
    m, hbm = model("Llama 3 70B"), 80e9
    # 141 GB of bf16 weights do not fit one 80 GB GPU; on 8 they leave
    # 72 GB - 17.6 GB for the cache, 8x more tokens than on 4 GPUs minus
    assert max_cached_tokens(m, 1, hbm) == 0
    t8 = max_cached_tokens(m, 8, hbm)
    per = kv_split(m, 8).per_rank_bytes_per_token
    assert t8 == (0.9 * hbm - m.weight_bytes() / 8) // per
    assert max_cached_tokens(m, 4, hbm) < t8 / 2


# ---------------------------------------------------------- TP decode
def test_decode_compute_at_batch_1_reads_the_weights_once():
    m, s = model("Llama 3 70B"), SYSTEMS["dgx-h100"]
    st = decode.decode_step(m, s, tp=8, batch=1, context=1)
    # every weight but the input embedding (a lookup of one row)
    read = (m.params - m.vocab * m.hidden) * 2 / 8
    stream = read / (s.gpu.hbm_tbps * 1e12 * s.gpu.hbm_efficiency)
    assert st.weights_s == pytest.approx(stream, rel=0.002)
    assert st.tokens_per_s == pytest.approx(1 / st.step_s)


def test_decode_comm_is_two_latency_bound_allreduces_per_layer():
    m = model("Llama 3 70B")
    one = decode.decode_step(m, "dgx-h100", tp=8, batch=1, context=4096)
    assert one.comm_s == pytest.approx(2 * m.layers * one.allreduce.time_s)
    assert one.allreduce.nbytes == 8192 * 2
    assert one.allreduce.protocol == "LL"            # NCCL's small-message
    # 8x the batch, 8x the bytes: the all-reduce costs far less than 8x
    eight = decode.decode_step(m, "dgx-h100", tp=8, batch=8, context=4096)
    assert eight.allreduce.time_s < 1.5 * one.allreduce.time_s


def test_tp_across_nodes_costs_more_than_inside_one():
    m = model("Llama 3 70B")
    inside = decode.decode_step(m, "dgx-h100", tp=8, batch=16, context=4096)
    spread = decode.decode_step(m, "dgx-h100", tp=8, batch=16, context=4096,
                                islands=2)
    assert spread.compute_s == inside.compute_s
    assert spread.comm_s > 1.3 * inside.comm_s


def test_kv_reads_grow_with_context_and_batch():
    m = model("Llama 3 8B")
    a = decode.decode_step(m, "dgx-h100", tp=1, batch=8, context=2048)
    b = decode.decode_step(m, "dgx-h100", tp=1, batch=8, context=8192)
    assert b.kv_s == pytest.approx(4 * a.kv_s)
    assert b.kv_bytes_per_gpu == 8 * 8192 * kv_bytes_per_token(m)
    assert b.weights_s == a.weights_s


def test_moe_decode_reads_the_experts_its_tokens_touch():
    m = model("Mixtral 8x7B")
    assert m.experts_touched(1) == pytest.approx(2)
    assert m.experts_touched(64) == pytest.approx(8, rel=1e-3)
    one = decode.decode_step(m, "dgx-h100", tp=1, batch=1, context=1)
    many = decode.decode_step(m, "dgx-h100", tp=1, batch=64, context=1)
    # batch 1 reads ~the active weights, batch 64 ~all of them
    ratio = many.weights_s / one.weights_s
    assert ratio == pytest.approx(m.params / m.active_params, rel=0.1)


def test_allreduce_bytes_per_token_formula():
    m = model("Llama 3 70B")
    # ring: 2 layers x 2 (t-1)/t x batch x hidden x 2 bytes
    assert decode.allreduce_bytes_per_token(m, 8) == \
        2 * 80 * 2 * 7 / 8 * 8192 * 2
    assert decode.allreduce_bytes_per_token(m, 1) == 0


def test_prefill_is_compute_bound_and_scales_with_the_prompt():
    m = model("Llama 3 70B")
    a = decode.prefill(m, "dgx-h100", tp=8, batch=1, prompt=2048)
    b = decode.prefill(m, "dgx-h100", tp=8, batch=1, prompt=4096)
    flops = 2 * m.params * 2048 / 8
    gpu = SYSTEMS["dgx-h100"].gpu
    assert a.compute_s > flops / gpu.peak_flops()      # below peak
    assert 2 <= b.compute_s / a.compute_s < 2.4        # + attention


@pytest.mark.parametrize("bad", [dict(tp=3), dict(tp=8, islands=3),
                                 dict(tp=16, islands=1)])
def test_bad_layouts_are_refused(bad):
    with pytest.raises(ValueError):
        decode.decode_step(model("Llama 3 70B"), "dgx-h100", batch=1,
                           context=1, **bad)


# ----------------------------------------------------- disaggregation
def test_shipping_the_cache_beats_recomputing_it():
    m = model("Llama 3 70B")
    h = {r: disagg.handoff(m, "dgx-h100", prompt=4096, route=r, tp=4)
         for r in disagg.ROUTES}
    assert h["nvlink"].kv_bytes == 4096 * 320 * KIB
    assert h["nvlink"].bytes_per_gpu == h["nvlink"].kv_bytes / 4
    assert h["nvlink"].transfer_s < h["net"].transfer_s
    for x in h.values():
        assert x.ship_vs_recompute < 0.05
        assert 0 <= x.exposed_s < x.transfer_s


def test_handoff_between_tp_sizes_carries_the_decode_share():
    m = model("Llama 3 70B")
    h = disagg.handoff(m, "dgx-h100", prompt=1000, route="net", tp=8,
                       decode_tp=16)
    # 16 decode GPUs for 8 KV heads: each needs one whole head
    assert h.bytes_per_gpu == 1000 * kv_split(m, 16).per_rank_bytes_per_token
    with pytest.raises(ValueError):
        disagg.handoff(m, "dgx-h100", prompt=10, route="nvlink", tp=8)


def test_kv_bytes_per_flop():
    m = model("Llama 3 70B")
    assert disagg.kv_bytes_per_flop(m) == pytest.approx(
        327680 / m.flops_per_token())
    assert disagg.kv_bytes_per_flop(m) < 1e-5


# -------------------------------------------------------- MoE all-to-all
def test_a2a_bytes_formulas():
    # dropless: T k (ep-1)/ep vectors; padded: cf times as many
    d = experts.expected_dispatch_bytes(64, 4096, 2, 8)
    assert d == 64 * 2 * 7 / 8 * 4096 * 2
    p = experts.expected_dispatch_bytes(64, 4096, 2, 8, capacity_factor=1.25,
                                        padded=True)
    assert p == pytest.approx(1.25 * d)
    assert experts.expected_dispatch_bytes(64, 4096, 2, 1) == 0


def test_ep_inside_an_island_is_cheaper():
    kw = dict(tokens=256, hidden=4096, top_k=2, ep=8)
    inside = experts.moe_layer_s("dgx-h100", **kw)
    across = experts.moe_layer_s("dgx-h100", islands=2, **kw)
    rack = experts.moe_layer_s("gb200-nvl72", **dict(kw, ep=16))
    assert inside < across
    assert rack < experts.moe_layer_s("dgx-h100", islands=2,
                                      **dict(kw, ep=16))
    assert experts.moe_layer_s("dgx-h100", **dict(kw, ep=1)) == 0


def test_every_model_is_well_formed():
    for m in MODELS.values():
        assert m.params > m.layers * m.params_per_layer * 0.9
        assert math.isclose(m.flops_per_token(), 2 * (
            m.active_params - m.embedding_params + m.vocab * m.hidden))
    with pytest.raises(ValueError):
        model("GPT-5")
    with pytest.raises(ValueError):
        ModelShape("bad", 2, 64, 6, 4, 8, 128, 100)
