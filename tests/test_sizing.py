"""Chapter 1 arithmetic: bytes per parameter, minimum GPUs, traffic."""
import pytest

from warmup_kit.parallelism.step import Transformer
from warmup_kit.parallelism.sizing import (RECIPES, bytes_per_param, min_gpus_for_state,
                               min_model_parallel, single_gpu_days,
                               training_memory)
from warmup_kit.parallelism.traffic import per_step

# GPT-3 175B: 96 layers, d_model 12288, 96 heads, context 2048 (Brown et
# al. 2020, Table 2.1); vocabulary padded to 51,200 as in Megatron-LM.
GPT3 = Transformer(96, 12288, 96, 2048, 51200)


@pytest.mark.parametrize("recipe, want", [
    ("inference (bf16 weights)", 2), ("mixed-precision Adam", 16),
    ("mixed-precision Adam, fp32 grads", 18), ("fp32 Adam", 16)])
def test_bytes_per_param(recipe, want):
    assert bytes_per_param(recipe) == want
    assert set(RECIPES[recipe]) <= {"weights", "grads", "optimizer"}


def test_175b_in_fp16_is_350_gb():
    assert GPT3.params == pytest.approx(175e9, rel=0.01)
    mem = training_memory(GPT3)
    assert mem["weights"] == pytest.approx(350e9, rel=0.01)
    assert sum(mem[k] for k in ("weights", "grads", "optimizer")) \
        == pytest.approx(16 * GPT3.params)
    assert min_gpus_for_state(16 * 175e9) == 35
    assert min_gpus_for_state(1.0) == 1


def test_recomputation_shrinks_activations():
    none = training_memory(GPT3, recompute="none")["activations"]
    full = training_memory(GPT3, recompute="full")["activations"]
    # Korthikanti et al. 2022: s b h (34 + 5 a s / h) vs 2 s b h per layer
    s, h, a = 2048, 12288, 96
    assert none == pytest.approx(96 * s * h * (34 + 5 * a * s / h))
    assert full == pytest.approx(96 * 2 * s * h)


def test_min_model_parallel_fits_and_respects_the_bound():
    r = min_model_parallel(GPT3, "dgx-h100")
    assert r["tp"] == 8 and r["gpus"] == r["tp"] * r["pp"]
    assert r["gpus"] >= min_gpus_for_state(18 * GPT3.params, 80)
    assert r["memory_gib"]["total"] <= r["memory_gib"]["capacity"]
    small = min_model_parallel(Transformer(24, 2048, 16, 2048, 51200))
    assert small["gpus"] == 1


def test_single_gpu_time_is_about_6_n_d():
    tokens = 300e9
    days = single_gpu_days(GPT3, tokens, "dgx-h100", mfu=0.5)
    six_nd = 6 * GPT3.params * tokens / (989e12 * 0.5) / 86400
    assert days == pytest.approx(six_nd, rel=0.1)


def test_traffic_per_step():
    t = per_step(GPT3, tp=8, pp=8, dp=16, global_batch=1536)
    m = 1536 // 16
    act = 2048 * 12288 * 2
    grads = 4 * GPT3.params / 64                  # fp32 gradients
    assert t["dp"]["bytes"] == pytest.approx(2 * 15 / 16 * grads)
    bf16 = per_step(GPT3, tp=8, pp=8, dp=16, global_batch=1536, grad_bytes=2)
    assert bf16["dp"]["bytes"] == pytest.approx(t["dp"]["bytes"] / 2)
    assert t["tp"]["messages"] == 6 * 12 * m
    assert t["tp"]["bytes"] == pytest.approx(6 * 12 * m * 2 * 7 / 8 * act)
    assert t["pp"]["bytes"] == pytest.approx(2 * m * act / 8)
    assert t["tp"]["bytes"] > 10 * t["dp"]["bytes"] > 10 * t["pp"]["bytes"]
    alone = per_step(GPT3, tp=1, pp=1, dp=64, global_batch=64,
                     recompute="none")
    assert alone["tp"]["bytes"] == alone["pp"]["bytes"] == 0
