"""Time of one transformer layer's kernels on one GPU (book, Chapter 1).

The work of a GPT layer under tensor parallelism t (Shoeybi et al. 2019,
section 3; Narayanan et al. 2021, appendix "FLOPs"), split into

* GEMMs, each timed by a roofline: ``max(flops / gemm_flops, bytes /
  (hbm * hbm_efficiency))``, where ``GPU.gemm_flops`` is the dense peak x
  the GEMM efficiency of the precision x the power-limited tensor clock.
  Big GEMMs are compute-bound; the attention batched GEMMs (k = head dim)
  and small hidden sizes are not, which is why achieved FLOP/s grows with
  model size;
* memory-bound elementwise kernels (layer norms, bias-GeLU, dropout,
  residual adds, the scale-mask-softmax over the b * a * s * s attention
  scores unless FlashAttention fuses it), timed by bytes / HBM bandwidth;
  with sequence parallelism (Korthikanti et al. 2022, section 4.2.2) the
  norms and dropouts are split over the TP group.

Backward = twice the forward work (input and weight gradients), except a
fused attention kernel's: its backward recomputes the scores from Q and K
and runs five s x s products to the forward's two, 2.5 times the forward
(:data:`FLASH_BWD`).
"""
from __future__ import annotations

from dataclasses import dataclass

from warmup_kit.model.hardware import GPU

BYTES = 2            # bf16 / fp16 activations and weights
FLASH_EFFICIENCY = 0.7   # fused attention vs plain GEMM efficiency (FA2
#                          reaches ~50-73% of A100 peak: Dao 2023, sec. 4)
#: Fused attention kernels, forward + backward, causal, head dim 128, long
#: sequences, as a fraction of the GPU's dense BF16 peak (the FLOPs of the
#: computed causal half), from the kernels' own published benchmarks:
#: FlashAttention-2 on A100 ~190 TFLOP/s (Dao 2023, figure 6); on H100
#: ~335 TFLOP/s (Shah et al. 2024, FlashAttention-3, figure 7, the FA2
#: bars); FlashAttention-3 (and cuDNN's Hopper kernels, which reach the
#: same class) ~550 TFLOP/s on H100 (Shah et al. 2024, figures 5 and 7).
#: "auto" is FLASH_EFFICIENCY x the GPU's GEMM efficiency.
#: Backward over forward work of a fused attention kernel: QK^T again, then
#: dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: five s x s products to
#: the forward's two (QK^T, PV). FlashAttention's own benchmarks count it
#: so (benchmarks/benchmark_flash_attention.py, ``flops``: bwd = 2.5 x fwd,
#: fwd + bwd = 3.5 x fwd), and their TFLOP/s figures divide by that count.
FLASH_BWD = 2.5
ATTENTION_EFFICIENCY = {("fa2", "A100"): 190 / 312, ("fa2", "H100"): 335 / 989,
                        ("fa3", "H100"): 550 / 989}
#: FlashAttention written in Triton (``"triton"``: the kernel MPT's
#: ``attn_impl: triton`` runs, llm-foundry's ``flash_attn_triton.py``, a
#: copy of the flash-attention repository's Triton version) against FA2 on
#: A100: FA2 is 1.3-1.5x faster in the forward and about 2x in the
#: backward (Dao 2023, section 4.1); the midpoints, forward and backward.
#: The same ratios are taken on H100, where neither kernel uses Hopper's
#: instructions (FA2's 335 TFLOP/s there is "the same implementation").
TRITON_SLOWDOWN = (1.4, 2.0)


def attention_efficiency(gpu: GPU, kernel: str = "auto") -> float:
    """Fraction of dense BF16 peak a fused attention ``kernel`` ("auto",
    "fa2", "fa3", "triton") reaches on ``gpu`` in its forward
    (:data:`ATTENTION_EFFICIENCY`; "triton" is FA2's over
    :data:`TRITON_SLOWDOWN`'s forward factor)."""
    if kernel == "auto":
        return FLASH_EFFICIENCY * gpu.gemm_efficiency
    if kernel == "triton":
        return attention_efficiency(gpu, "fa2") / TRITON_SLOWDOWN[0]
    for (k, name), eff in ATTENTION_EFFICIENCY.items():
        if k == kernel and name in gpu.name:
            return eff
    raise ValueError(f"no published {kernel!r} figure for {gpu.name}; "
                     f"choose 'auto' or one of {sorted(ATTENTION_EFFICIENCY)}")


@dataclass(frozen=True)
class LayerTimes:
    """Per micro-batch, per GPU, one layer (seconds)."""

    gemm_fwd_s: float
    attn_core_fwd_s: float     # QK^T, softmax, dropout, AV: what selective
    #                            recomputation recomputes
    elementwise_fwd_s: float
    attn_core_bwd_ratio: float = 2.0   # its backward over its forward
    #                                    (FLASH_BWD for a fused kernel)
    op_recompute_fwd_s: float = 0.0    # what torchtitan's op checkpointing
    #                                    recomputes (:func:`op_recomputed_s`)

    @property
    def fwd_s(self) -> float:
        return self.gemm_fwd_s + self.attn_core_fwd_s + self.elementwise_fwd_s

    @property
    def bwd_s(self) -> float:
        """The layer's backward: twice the forward's GEMMs and elementwise
        kernels, ``attn_core_bwd_ratio`` times its attention core."""
        return (2 * (self.gemm_fwd_s + self.elementwise_fwd_s)
                + self.attn_core_bwd_ratio * self.attn_core_fwd_s)


def gemm_s(gpu: GPU, m: float, n: float, k: float, batch: float = 1,
           precision: str = "bf16") -> float:
    """Roofline time of ``batch`` GEMMs (m x k) @ (k x n)."""
    flops = 2.0 * m * n * k * batch
    nbytes = BYTES * (m * k + k * n + m * n) * batch
    return max(flops / gpu.gemm_flops(precision),
               nbytes / (gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency))


def stream_s(gpu: GPU, nbytes: float) -> float:
    """Time of a memory-bound kernel that moves ``nbytes``."""
    return nbytes / (gpu.hbm_tbps * 1e12 * gpu.hbm_efficiency)


def layer_times(gpu: GPU, *, b: int, s: int, h: int, a: int, ffn: float,
                t: int, sequence_parallel: bool = False,
                flash_attention: bool = False,
                precision: str = "bf16",
                kv_dim: int | None = None,
                attention_kernel: str = "auto",
                kernels: str = "fused") -> LayerTimes:
    """Forward kernel times of one layer for a micro-batch of ``b``.

    Args:
        gpu: the accelerator.
        b, s, h, a, ffn: micro-batch, sequence, hidden, heads, FFN width.
        t: tensor-parallel size (heads and FFN columns split t ways).
        sequence_parallel: norms and dropouts split over the TP group.
        flash_attention: one fused attention kernel, no s x s tensors.
        kv_dim: width of K and V (grouped-query attention); default ``h``.
            The QKV GEMM shrinks; the attention core does not (every query
            head still meets every key).
        attention_kernel: the fused attention's efficiency
            (:func:`attention_efficiency`); "triton" also runs its
            backward :data:`TRITON_SLOWDOWN` slower than FA2's and pads the
            head dimension (:func:`triton_head_dim`).
        kernels: "fused" (Megatron's fused norm, bias-GeLU and dropout-add
            kernels) or "eager-llama" (the Llama block op by op, as eager
            PyTorch runs it: :func:`eager_llama_bytes`).
    """
    kv = h if kv_dim is None else kv_dim
    # FP8 training (Transformer Engine, torchao float8) runs the linear
    # layers' GEMMs in FP8; attention stays in BF16
    attn_prec = "bf16" if precision == "fp8" else precision
    bs = b * s
    d = h // a
    heads = a / t
    qkv = gemm_s(gpu, bs, (h + 2 * kv) / t, h, precision=precision)
    proj = gemm_s(gpu, bs, h, h / t, precision=precision)
    ffn_s = (gemm_s(gpu, bs, ffn / t, h, precision=precision)     # FC1
             + gemm_s(gpu, bs, h, ffn / t, precision=precision))  # FC2
    gemm = qkv + proj + ffn_s
    bwd_ratio = FLASH_BWD if flash_attention else 2.0
    if flash_attention:
        # causal: about half of the s x s tiles are computed
        flops = 0.5 * 4.0 * b * s * s * d * heads
        if attention_kernel == "triton":
            # its tiles span the head dimension rounded up to a power of 2
            # (flash_attn_triton.py: BLOCK_HEADDIM = next_power_of_2(d))
            flops *= triton_head_dim(d) / d
            bwd_ratio = FLASH_BWD * TRITON_SLOWDOWN[1] / TRITON_SLOWDOWN[0]
        attn = flops / (gpu.peak_flops(attn_prec) * gpu.tensor_clock
                        * attention_efficiency(gpu, attention_kernel))
    else:
        scores = b * heads * s * s
        attn = (gemm_s(gpu, s, s, d, b * heads, attn_prec)      # QK^T
                + gemm_s(gpu, s, d, s, b * heads, attn_prec)    # AV
                # fused scale-mask-softmax r+w, dropout r+w and 1-byte mask
                + stream_s(gpu, scores * (4 * BYTES + 1)))
    # per bsh element: 2 layer norms (r+w), 2 bias-dropout-adds (2r+w, mask)
    replicated = bs * h * (2 * 2 * BYTES + 2 * (3 * BYTES + 1))
    if sequence_parallel:
        replicated /= t
    gelu = bs * ffn / t * 2 * BYTES                               # r+w
    if kernels == "eager-llama":
        replicated, gelu = eager_llama_bytes(bs, h, kv, ffn, t,
                                             sequence_parallel), 0.0
    elif kernels != "fused":
        raise ValueError(f"kernels must be 'fused' or 'eager-llama', got "
                         f"{kernels!r}")
    casts = fp8_cast_bytes(bs, h, kv, ffn, t) if precision == "fp8" else 0.0
    elementwise = stream_s(gpu, replicated + gelu + casts)
    return LayerTimes(gemm, attn, elementwise, bwd_ratio,
                      op_recomputed_s(qkv, proj, ffn_s, elementwise, h, kv))


def triton_head_dim(d: int) -> int:
    """The head dimension the Triton FlashAttention computes over: ``d``
    rounded up to a power of two, at least 16."""
    return max(16, 1 << (d - 1).bit_length())


def op_recomputed_s(qkv_s: float, proj_s: float, ffn_s: float,
                    elementwise_s: float, h: int, kv: int) -> float:
    """Forward seconds torchtitan's selective op checkpointing recomputes
    in the backward (torchtitan ``apply_ac``, ``selective_ac_option="op"``:
    it saves the output of every second matmul of a block, of the attention
    kernel and of the reduce-scatters, and recomputes everything else). A
    Llama block's matmuls run wq, wk, wv, wo, w1, w3, w2, so wk, wo and w3
    are recomputed: K's share of the fused QKV GEMM, the output
    projection, a third of the FFN's FLOPs (w3 of SwiGLU's three h x f
    matrices); and every elementwise kernel, the norms included."""
    return kv / (h + 2 * kv) * qkv_s + proj_s + ffn_s / 3 + elementwise_s


def eager_llama_bytes(bs: float, h: int, kv: int, ffn: float,
                      t: int, sequence_parallel: bool = False) -> float:
    """HBM bytes of a Llama block's elementwise ops, forward, when eager
    PyTorch runs them one kernel each (torchtitan's Llama 3 model code
    without ``torch.compile``), per TP rank; ``ffn`` is the two-matrix
    width 1.5 f of SwiGLU's f.

    Per element (bf16 = 2 B, the norms and RoPE in fp32 = 4 B):

    * RMSNorm, twice: ``x.float()`` (2 + 4), ``pow`` (4 + 4), ``mean``
      (4), ``x * rsqrt`` (4 + 4), ``type_as`` (4 + 2), ``* weight``
      (2 + 2): 36 B of h, 72 h;
    * RoPE on q and k: to fp32 complex (2 + 4), multiply (4 + 4), back
      (4 + 2): 20 B of ``h + kv`` (over t);
    * grouped K/V expanded to every head (``repeat_kv``): read 2 kv,
      write 2 h, for K and for V; the attention output made contiguous
      (2 + 2) h (over t);
    * two residual adds (2 + 2 + 2) h;
    * SwiGLU: ``silu`` (2 + 2) and the product (2 + 2 + 2) of f.

    The norms and residual adds are split over t with sequence parallelism.
    """
    f = ffn / 1.5
    replicated = (72 + 12) * h / (t if sequence_parallel else 1)
    return bs * (replicated
                 + (20 * (h + kv) + 4 * kv + 4 * h + 4 * h + 10 * f) / t)


#: bytes per element: quantize bf16 -> fp8 (read 2, write 1), transpose an
#: fp8 copy (read 1, write 1)
FP8_CAST, FP8_TRANSPOSE = 3, 2


def fp8_cast_bytes(bs: float, h: int, kv: int, ffn: float, t: int) -> float:
    """Memory traffic of FP8 training's casts in one layer, per forward
    (a third of forward + backward, the unit :class:`LayerTimes` counts).

    Transformer Engine's FP8 recipe (its documentation, "Using FP8 with
    Transformer Engine"; Micikevicius et al. 2022, FP8 formats): every
    linear layer quantizes its input in the forward; in the backward it
    quantizes the output gradient and keeps transposed FP8 copies of that
    gradient and of the input (Hopper's FP8 GEMMs take only one
    layout); the weights are quantized and transposed once per
    micro-batch. Scaling factors (amax) are a few bytes and left out.
    Casts fused into a preceding norm are counted as separate passes.
    """
    inputs = bs * (2 * h + h / t + ffn / t)         # QKV, FC1 | proj | FC2
    outputs = bs * ((h + 2 * kv) / t + h + ffn / t + h)
    weights = (h * (h + 2 * kv) + 2 * h * h + 2 * h * ffn) / t
    total = (FP8_CAST * inputs
             + (FP8_CAST + FP8_TRANSPOSE) * outputs + FP8_TRANSPOSE * inputs
             + (FP8_CAST + FP8_TRANSPOSE) * weights)
    return total / 3


def logits_fwd_s(gpu: GPU, *, b: int, s: int, h: int, vocab: int, t: int,
                 precision: str = "bf16") -> float:
    """Output layer (vocab-parallel GEMM) and cross-entropy, forward."""
    g = gemm_s(gpu, b * s, vocab / t, h, precision=precision)
    # fp32 softmax over the logits: read bf16, write fp32, read again
    return g + stream_s(gpu, b * s * vocab / t * (BYTES + 4 + 4))
