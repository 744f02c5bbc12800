"""Every term of the per-step traffic model, against a hand computation
(issue 31).

Sources: tensor parallelism puts 2 all-reduces of the ``b s h`` activations
in each layer's forward (after attention, after the MLP) and 2 in its
backward (Shoeybi et al. 2019, Megatron-LM, section 3, figure 4), 2 more
when the forward is recomputed (Narayanan et al. 2021, section 2.3);
pipeline parallelism sends one micro-batch's activations forward and its
gradient back at each boundary, ``b s h / t`` each with the scatter/gather
optimization (Narayanan et al. 2021, section 4.1); data parallelism
all-reduces the gradients of the GPU's ``params / (t p)`` parameters once
per step. A ring all-reduce of ``n`` bytes over ``k`` ranks sends
``2 (k-1)/k n`` per rank (Patarasuk & Yuan 2009; nccl-tests
PERFORMANCE.md's bus-bandwidth factor).
"""
import pytest

from warmup_kit.parallelism.step import Transformer
from warmup_kit.parallelism.traffic import per_step

# 8 layers, hidden 16, 4 heads, sequence 32, vocabulary 100
MODEL = Transformer(8, 16, 4, 32, 100)
P = MODEL.params
# tp 2, pp 2, dp 4; global batch 32 in micro-batches of 2:
#   m = 32 / (4 * 2) = 4 micro-batches per step per pipeline
#   one TP all-reduce: b s h * 2 B = 2 * 32 * 16 * 2 = 2048 bytes
#   layers per stage: 8 / 2 = 4
BASE = dict(tp=2, pp=2, dp=4, global_batch=32, micro_batch=2)


def traffic(**kw):
    args = dict(BASE, recompute="none")
    args.update(kw)
    return per_step(MODEL, **args)


def test_traffic_microbatches_per_step_is_global_batch_over_dp_times_micro():
    # pp sends 2 per micro-batch: 2 * 32 / (4 * 2) = 8; micro-batch 1: 16
    assert traffic()["pp"]["messages"] == 8
    assert traffic(micro_batch=1)["pp"]["messages"] == 16
    assert traffic(dp=8)["pp"]["messages"] == 4


def test_traffic_tp_allreduce_is_b_s_h_times_2_bytes_each():
    assert traffic()["tp"]["each_bytes"] == 2 * 32 * 16 * 2       # 2048
    assert traffic(micro_batch=4)["tp"]["each_bytes"] == 4096


def test_traffic_tp_is_4_allreduces_per_layer_fwd_and_bwd():
    # 4 per layer * 4 layers of the stage * 4 micro-batches = 64 calls
    assert traffic()["tp"]["messages"] == 64
    assert traffic(recompute="selective")["tp"]["messages"] == 64


def test_traffic_tp_is_6_allreduces_per_layer_with_full_recompute():
    # the recomputed forward adds its 2: 6 * 4 * 4 = 96
    assert traffic(recompute="full")["tp"]["messages"] == 96


def test_traffic_tp_counts_the_l_over_p_layers_of_one_stage():
    # pp = 4: 2 layers per stage, m = 4: 4 * 2 * 4 = 32 calls
    assert traffic(pp=4)["tp"]["messages"] == 32
    assert traffic(pp=1)["tp"]["messages"] == 4 * 8 * 4


def test_traffic_tp_ring_sends_2_t_minus_1_over_t_per_byte():
    # t = 2: 2048 * 64 calls * 2 * 1/2;  t = 4: * 2 * 3/4
    assert traffic()["tp"]["bytes"] == 2048 * 64
    assert traffic(tp=4)["tp"]["bytes"] == pytest.approx(2048 * 64 * 1.5)
    assert traffic(tp=1)["tp"]["bytes"] == 0


def test_traffic_dp_allreduces_fp32_grads_of_params_over_tp_pp_once():
    # P / (2 * 2) parameters * 4 bytes, one call per step
    d = traffic()["dp"]
    assert d["each_bytes"] == pytest.approx(P / 4 * 4)
    assert d["messages"] == 1
    assert traffic(grad_bytes=2)["dp"]["each_bytes"] == pytest.approx(P / 2)
    assert traffic(pp=4)["dp"]["each_bytes"] == pytest.approx(P / 8 * 4)


def test_traffic_dp_ring_sends_2_d_minus_1_over_d_per_byte():
    # d = 4: P bytes * 2 * 3/4;  d = 2: P * 1;  d = 1: nothing
    assert traffic()["dp"]["bytes"] == pytest.approx(P * 1.5)
    assert traffic(dp=2, global_batch=16)["dp"]["bytes"] == pytest.approx(P)
    assert traffic(dp=1, global_batch=8)["dp"]["bytes"] == 0


def test_traffic_pp_send_is_bsh_over_t_scatter_gather():
    # 2048 / t = 1024 bytes a send; t = 4: 512
    assert traffic()["pp"]["each_bytes"] == 1024
    assert traffic(tp=4)["pp"]["each_bytes"] == 512


def test_traffic_pp_is_2_sends_per_microbatch_fwd_act_and_bwd_grad():
    # 2 * 4 micro-batches of 1024 bytes, point to point (factor 1)
    assert traffic()["pp"]["bytes"] == 8 * 1024
    assert traffic(pp=1)["pp"]["messages"] == 0
    assert traffic(pp=1)["pp"]["bytes"] == 0
