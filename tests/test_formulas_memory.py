"""Every term of the memory model, against a hand computation (issue 31).

Each test names the term it pins and writes its arithmetic out, so that a
one-line change to :mod:`warmup_kit.parallelism.memory` fails a test that
says which formula moved (``tools/mutation_pass.py`` checks this).

Sources: activations per layer and micro-batch are Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", section 4
(eq. 1-2 and table 2): ``s b h (34 + 5 a s / h)`` bytes without
parallelism, ``s b h (10 + 24/t + 5 a s / (h t))`` with tensor
parallelism, ``s b h / t (34 + 5 a s / h)`` with sequence parallelism, the
``5 a s / h`` term gone with selective recomputation (section 4.3), and
``2 s b h`` per layer with full recomputation (section 4.4). Model state is
Rajbhandari et al. 2020 (ZeRO), section 3.1: ``2 + 2 + K`` bytes per
parameter with ``K = 12`` (fp32 master weights, momentum, variance) for
mixed-precision Adam; this model keeps fp32 gradients (4 B, Megatron's
``main_grad``), so 2 + 4 + 12 = 18, and ZeRO stage 1 (section 5.1, the
distributed optimizer) divides the 12 by ``N_d``. In-flight micro-batches
under 1F1B and interleaving: Narayanan et al. 2021, section 2.2.
"""
import pytest

from warmup_kit.parallelism.memory import (
    GIB, RESERVED_BYTES, activation_bytes_per_layer, memory_per_gpu)

# s = 4 tokens, b = 2 sequences, h = 8 hidden, a = 2 heads:
#   s b h = 64,  5 a s / h = 5 * 2 * 4 / 8 = 5,  5 a s^2 b = 320
SHAPE = dict(s=4, b=2, h=8, a=2)
SBH = 64


def act(t=1, recompute="none", sp=False, flash=False):
    return activation_bytes_per_layer(
        **SHAPE, t=t, recompute=recompute, sequence_parallel=sp,
        flash_attention=flash)


def mem(**kw):
    base = dict(params_per_gpu=1000, capacity_bytes=80 * GIB, **SHAPE,
                vocab=100, t=1, p=4, m=8, layers_per_stage=3, interleave=1,
                recompute="none", sequence_parallel=False,
                flash_attention=False, dp=4)
    base.update(kw)
    return memory_per_gpu(**base)


# ------------------------------------------- activations per layer (K. 2022)
def test_memory_activation_bytes_per_layer_is_34sbh_plus_5as2b():
    # eq. 1, t = 1: s b h * 34 + 5 a s^2 b = 64 * 34 + 320 = 2176 + 320
    assert act() == 2496


def test_memory_activation_tp_is_sbh_times_10_plus_24_over_t_plus_5as_over_ht():
    # eq. 2: 64 * (10 + 24/2 + 5/2) = 64 * 24.5;  t = 4: 64 * (10 + 6 + 1.25)
    assert act(t=2) == 1568
    assert act(t=4) == 1104


def test_memory_activation_tp_leaves_10sbh_unsplit_layernorms_and_dropouts():
    # the 10 s b h of eq. 2 does not shrink with t: t = 1024 still keeps
    # 64 * (10 + 24/1024 + 5/1024) = 640 + 1.8125
    assert act(t=1024) == pytest.approx(SBH * 10 + SBH * 29 / 1024)


def test_memory_activation_sequence_parallel_is_sbh_over_t_times_34_plus_5as_over_h():
    # table 2, "sequence + tensor parallel": 64/2 * (34 + 5) = 32 * 39
    assert act(t=2, sp=True) == 1248
    assert act(t=4, sp=True) == 16 * 39


def test_memory_activation_flash_attention_drops_the_5as_over_h_scores_term():
    # the a s^2 b score/softmax/dropout tensors are never stored
    assert act(flash=True) == 64 * 34                       # 2176
    assert act(t=2, flash=True) == 64 * (10 + 12)           # 1408
    assert act(t=2, sp=True, flash=True) == 32 * 34         # 1088


def test_memory_activation_selective_recompute_drops_the_5as_over_h_term():
    # section 4.3: recompute only the attention core
    assert act(recompute="selective") == 64 * 34
    assert act(t=2, recompute="selective") == 64 * 22
    assert act(t=2, sp=True, recompute="selective") == 32 * 34


def test_memory_activation_full_recompute_keeps_2sbh_layer_input():
    # section 4.4: only the layer's bf16 input, 2 s b h = 128 (/t with SP)
    assert act(recompute="full") == 128
    assert act(t=2, recompute="full") == 128
    assert act(t=2, sp=True, recompute="full") == 64


def test_memory_activation_unknown_recompute_is_refused():
    with pytest.raises(ValueError, match="recompute"):
        act(recompute="some")


# ------------------------------------------------ activations per GPU (1F1B)
def test_memory_first_stage_holds_min_p_m_microbatches_in_flight_1f1b():
    # p = 4 stages, m = 8 micro-batches: 4 in flight; 3 layers per stage
    assert mem().activations_bytes == 2496 * 3 * 4          # 29952
    # m = 2 < p: only 2 exist
    assert mem(m=2).activations_bytes == 2496 * 3 * 2       # 14976


def test_memory_interleaved_in_flight_is_times_1_plus_p_minus_1_over_pv():
    # Narayanan 2021 sec. 2.2.2: 4 * (1 + 3 / (4 * 2)) = 5.5 micro-batches
    assert mem(interleave=2).activations_bytes == pytest.approx(
        2496 * 3 * 5.5)
    # v = 3: 4 * (1 + 3/12) = 5
    assert mem(interleave=3).activations_bytes == pytest.approx(2496 * 3 * 5)


def test_memory_gqa_kv_fraction_removes_4_of_the_34_bytes_k_and_v():
    # K and V are 2 + 2 of the 34 s b h bytes; kv_fraction 1/4 keeps a
    # quarter: 2496 - 4 * 64 * 3/4 = 2304 per layer, * 3 layers * 4
    assert mem(kv_fraction=0.25).activations_bytes == 2304 * 3 * 4
    # with SP over t = 2: 1248 - 4 * 64 / 2 * 3/4 = 1152
    assert mem(kv_fraction=0.25, t=2, sequence_parallel=True
               ).activations_bytes == 1152 * 3 * 4
    # full recomputation keeps only the layer input: no K/V to shrink
    assert mem(kv_fraction=0.25, recompute="full").activations_bytes == \
        mem(recompute="full").activations_bytes


def test_memory_full_recompute_adds_one_layer_rebuilt_in_full():
    # 2 s b h * 3 layers * 4 in flight + one layer's 34 s b h + 5 a s^2 b
    assert mem(recompute="full").activations_bytes == 128 * 3 * 4 + 2496


def test_memory_single_stage_adds_fp32_logits_4sbv_over_t():
    # p = 1: one micro-batch in flight, plus 4 * s b V = 4 * 4 * 2 * 100
    assert mem(p=1).activations_bytes == 2496 * 3 + 3200
    # vocabulary-parallel over t = 2: 3200 / 2
    assert mem(p=1, t=2, sequence_parallel=True).activations_bytes == \
        1248 * 3 + 1600
    # p > 1: the last stage has them, not the first
    assert mem(p=2, m=1).activations_bytes == 2496 * 3


# ------------------------------------------ model state (ZeRO, Rajbhandari)
def test_memory_optimizer_is_12_bytes_per_param_fp32_master_and_2_moments():
    assert mem().optimizer_bytes == 12 * 1000


def test_memory_distributed_optimizer_shards_the_12_bytes_over_dp_zero1():
    # ZeRO P_os: K * Psi / N_d = 12 * 1000 / 4
    assert mem(distributed_optimizer=True).optimizer_bytes == 3000
    assert mem(distributed_optimizer=True, dp=8).optimizer_bytes == 1500
    # ZeRO-1 leaves gradients and weights whole
    z1 = mem(distributed_optimizer=True)
    assert (z1.grads_bytes, z1.weights_bytes) == (4000, 2000)


def test_memory_grads_are_4_bytes_per_param_fp32_sharded_over_dp_zero2():
    assert mem().grads_bytes == 4 * 1000
    assert mem(shard_grads=True).grads_bytes == 4000 / 4


def test_memory_weights_are_2_bytes_per_param_zero3_shards_plus_2_gathered_layers():
    assert mem().weights_bytes == 2 * 1000
    # ZeRO-3: 2 * 1000 / 4 own shard + 2 prefetch buffers of one layer's
    # gathered bf16 weights (2 * 1000 / 3 layers each)
    assert mem(shard_weights=True).weights_bytes == pytest.approx(
        500 + 2 * 2 * 1000 / 3)


def test_memory_model_state_is_18_bytes_per_param_2_plus_4_plus_12():
    m = mem()
    assert m.weights_bytes + m.grads_bytes + m.optimizer_bytes == 18 * 1000
    # ZeRO-1 over N_d = 4: 2 + 4 + 12/4 = 9 bytes per parameter
    z = mem(distributed_optimizer=True)
    assert z.weights_bytes + z.grads_bytes + z.optimizer_bytes == 9 * 1000


def test_memory_total_adds_3gib_reserved_and_fits_is_total_le_capacity():
    assert RESERVED_BYTES == 3 * GIB
    m = mem()
    assert m.total_bytes == 2000 + 4000 + 12000 + 29952 + 3 * GIB
    assert mem(capacity_bytes=m.total_bytes).fits
    assert not mem(capacity_bytes=m.total_bytes - 1).fits
    g = m.as_gib()
    assert g["reserved"] == 3.0
    assert g["total"] == pytest.approx(m.total_bytes / 2 ** 30)
    assert g["optimizer"] == pytest.approx(12000 / 2 ** 30)
