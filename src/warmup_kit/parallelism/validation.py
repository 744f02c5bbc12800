"""The step model against published training runs: every row, its source,
the quantity the source prints, and the model's recorded error on it.

Book, Lab 02 ("how far to trust this model") and ``tests/test_validation*``
read these rows. A row compares the quantity its source prints:

* ``tflops_hfu``: achieved TFLOP/s per GPU with recomputation counted
  (Narayanan et al. 2021, Megatron's 96 B s l h^2 form);
* ``mfu``: model FLOPs utilization, Megatron's formula (Korthikanti et
  al. 2022);
* ``tokens``: tokens per second per GPU (no FLOP formula involved);
* ``tflops_model``: model TFLOP/s per GPU under ``formula`` (a
  :data:`~warmup_kit.parallelism.step.FLOP_FORMULAS` key).

``recorded`` is the model's error in percent (model over published minus
one) when the row was last reviewed; the tests hold the model to it within
a few points, so a change that moves a row shows up. ``why`` says, for the
rows outside their tolerance, which mechanism the model leaves out.

Settings a source does not print follow one rule for every row: sequence
parallelism whenever TP > 1; Megatron's distributed optimizer (ZeRO-1) for
Megatron/NeMo runs; FSDP = ZeRO-3; no recomputation unless printed, or
the least that fits when the published layout does not fit without it
(the Llama 3 rows: full); micro-batch 1 unless printed; Llama 3's
interleave depth, not printed, is 2; its FSDP "without resharding after
the forward" is ZeRO-2; its long-context rows use the all-gather context
parallelism its section 3.3.2 describes. Llama shapes are the Meta model cards';
SwiGLU's three h x f matrices are entered as a two-matrix FFN of width
1.5 f (same FLOPs and parameters).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from warmup_kit.model.hardware import A100, H100, SYSTEMS, Cluster, System
from warmup_kit.parallelism.step import Transformer, iteration_time

# ----------------------------------------------------------------- models
L8 = Transformer(32, 4096, 32, 8192, 128256, ffn=21504, kv_heads=8)
L70 = Transformer(80, 8192, 64, 8192, 128256, ffn=43008, kv_heads=8)
L405 = Transformer(126, 16384, 128, 8192, 128256, ffn=79872, kv_heads=8)
L2_13 = Transformer(40, 5120, 40, 4096, 32000, ffn=20736)
L2_70 = Transformer(80, 8192, 64, 4096, 32000, ffn=43008, kv_heads=8)

# ---------------------------------------------------------------- systems
DGX_A100, DGX_H100 = SYSTEMS["dgx-a100"], SYSTEMS["dgx-h100"]
#: torchtitan's Grand Teton hosts: H100 SXM with 96 GB HBM2e at 2.4 TB/s,
#: 500 W power limit (the model does not know the power limit)
GRAND_TETON = replace(DGX_H100, name="grand-teton-h100",
                      gpu=replace(H100, name="H100-SXM-96GB-HBM2e",
                                  hbm_gb=96.0, hbm_tbps=2.4))
#: Llama 3's 405B cluster: Grand Teton, H100 80 GB HBM3 at 700 W, one
#: 400 Gb/s RoCE NIC per GPU (Llama 3 paper, section 3.3.1): the DGX H100
#: figures
META_ROCE_H100 = replace(DGX_H100, name="grand-teton-h100-roce")

# ---------------------------------------------------------------- sources
NARAYANAN = ("Narayanan et al. 2021 (SC'21), Table 1: A100, seq 2048, "
             "V 51200, full recomputation")
KORTHIKANTI = ("Korthikanti et al. 2022, Tables 3 and 5: A100, seq 2048, "
               "SP + selective recomputation")
MB_2511 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, "
           "25.11 NeMo container, DGX-H100 pre-training table")
MB_2602 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md,"
           " 26.02 NeMo container, DGX-H100 rows")
NEMO_2407 = ("NVIDIA/NeMo docs/source/performance/performance_summary.md, "
             "NeMo 24.07 container, DGX-H100, FP8 pre-training table")
TT = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md "
      "(Dec 2024; seq 8192 from torchtitan's llama3_8b.toml)")
#: torchtitan's context parallelism passes K/V with its default
#: "allgather" rotate method; SDPA's flash backend is FlashAttention-2; the
#: FSDP-only tables (1, 3) and the A100 page ran without torch.compile
TT_A100 = ("pytorch/torchtitan docs/performance.md (2024): FSDP2 on 64 "
           "A100 80GB, local batch x 64 ranks")
LLAMA3 = ("Llama Team 2024, 'The Llama 3 Herd of Models', Table 4 "
          "(16M tokens per batch, BF16, H100 700 W, RoCE 400 Gb/s)")

#: Narayanan et al. 2021 Table 1: billions, heads, hidden, layers, t, p,
#: GPUs, batch, TFLOP/s per GPU (recomputation counted)
NARAYANAN_2021_TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
#: Korthikanti et al. 2022: name, layers, hidden, heads, t, p, GPUs,
#: batch, MFU %
KORTHIKANTI_2022 = [
    ("22B", 48, 6144, 64, 8, 1, 8, 4, 41.5),
    ("175B", 96, 12288, 96, 8, 8, 64, 64, 51.4),
    ("530B", 105, 20480, 128, 8, 35, 280, 280, 56.0),
    ("1T", 128, 25600, 160, 8, 64, 512, 512, 56.3),
]


@dataclass(frozen=True)
class Row:
    """One published run.

    Attributes:
        id: short name.
        model: the transformer (``seq`` is the row's sequence length).
        system: the node design.
        gpus: GPUs in the run.
        layout: :func:`iteration_time` keywords (tp, pp, dp, cp, zero, ...).
        quantity: what the source prints (see the module docstring).
        published: its value (TFLOP/s, tokens/s per GPU, or MFU in %).
        source: where, precisely.
        recorded: the model's error in % at the last review.
        why: for rows outside ``tolerance``, the mechanism left out.
        formula: FLOP formula of ``tflops_model`` rows.
        tolerance: % within which the row counts as reproduced (15; 20
            for FSDP runs on fewer than 512 GPUs).
        axes: the axes the run exercises ("FSDP", "CP", "interleaved").
    """

    id: str
    model: Transformer
    system: System
    gpus: int
    layout: dict
    quantity: str
    published: float
    source: str
    recorded: float
    why: str = ""
    formula: str = "megatron"
    tolerance: float = 15.0
    axes: tuple[str, ...] = field(default=())

    @property
    def misses(self) -> bool:
        """Recorded outside its tolerance."""
        return abs(self.recorded) >= self.tolerance


def result(row: Row):
    """The model's :class:`IterationResult` for ``row``."""
    kw = dict(row.layout)
    kw.setdefault("sequence_parallel", kw.get("tp", 1) > 1)
    nodes = -(-row.gpus // row.system.gpus_per_node)
    return iteration_time(row.model, Cluster(row.system, nodes),
                          flops_formula=row.formula, **kw)


def predict(row: Row) -> float:
    """The model's value of the quantity ``row`` compares."""
    r = result(row)
    return {"tflops_hfu": r.tflops_per_gpu, "mfu": 100 * r.mfu,
            "tokens": r.tokens_per_s_per_gpu,
            "tflops_model": r.model_tflops_per_gpu}[row.quantity]


def error_pct(row: Row) -> float:
    """Model over published minus one, in percent."""
    return 100 * (predict(row) / row.published - 1)


def _narayanan(billions, heads, hidden, layers, t, p, gpus, batch, tflops,
               recorded):
    return Row(f"narayanan21-{billions}B",
               Transformer(layers, hidden, heads, 2048, 51200), DGX_A100,
               gpus, dict(tp=t, pp=p, dp=gpus // (t * p), global_batch=batch,
                          micro_batch=1, recompute="full", overlap_dp=False,
                          sequence_parallel=False),
               "tflops_hfu", tflops, NARAYANAN, recorded)


def _korthikanti(name, layers, hidden, heads, t, p, gpus, batch, mfu,
                 recorded):
    return Row(f"korthikanti22-{name}",
               Transformer(layers, hidden, heads, 2048, 51200), DGX_A100,
               gpus, dict(tp=t, pp=p, dp=1, global_batch=batch, micro_batch=1,
                          recompute="selective", sequence_parallel=True),
               "mfu", mfu, KORTHIKANTI, recorded)


def _seq(model: Transformer, seq: int) -> Transformer:
    return replace(model, seq=seq)


MB = dict(distributed_optimizer=True)
#: torchtitan without torch.compile: the Llama block op by op
EAGER = "eager-llama"
_A100_RECORDED = [6.3, 2.8, -3.1, -3.9, 3.9, 6.2, 5.2, 4.3, 1.9, 4.4]
_K_RECORDED = [4.1, -1.3, -4.5, -4.0]

#: A100 rows of the Megatron papers (their tests: tests/test_parallelism.py)
A100_ROWS = ([_narayanan(*r, rec) for r, rec in
              zip(NARAYANAN_2021_TABLE_1, _A100_RECORDED)]
             + [_korthikanti(*r, rec) for r, rec in
                zip(KORTHIKANTI_2022, _K_RECORDED)])

#: H100 rows of Megatron-Bridge and torchtitan (tests/test_validation_h100.py)
H100_ROWS = [
    Row("mb2511-llama3-70b-fp8", L70, DGX_H100, 64,
        dict(tp=4, pp=8, dp=2, interleave=5, global_batch=128, micro_batch=1,
             recompute="none", precision="fp8", **MB),
        "tokens", 1602, MB_2511, +4.8, axes=("interleaved",)),
    Row("mb2602-llama3-70b-fp8-gbs256", L70, DGX_H100, 64,
        dict(tp=4, pp=8, dp=2, interleave=5, global_batch=256, micro_batch=1,
             recompute="none", precision="fp8", **MB),
        "tokens", 1621, MB_2602, +5.1, axes=("interleaved",)),
    Row("mb2511-llama31-405b-fp8", L405, DGX_H100, 1024,
        dict(tp=8, pp=8, dp=8, cp=2, interleave=8, global_batch=512,
             micro_batch=1, recompute="none", precision="fp8", **MB),
        "tokens", 292, MB_2511, +10.7,
        axes=("CP", "interleaved")),
    Row("mb2602-llama31-405b-fp8-gbs1536", L405, DGX_H100, 1024,
        dict(tp=8, pp=8, dp=8, cp=2, interleave=8, global_batch=1536,
             micro_batch=1, recompute="none", precision="fp8", **MB),
        "tokens", 311, MB_2602, +8.6,
        axes=("CP", "interleaved")),
    Row("mb2511-llama3-8b-fp8-fsdp", L8, DGX_H100, 8,
        dict(tp=1, pp=1, dp=8, zero=3, global_batch=128, micro_batch=1,
             recompute="none", precision="fp8"),
        "tokens", 14451, MB_2511, +19.0,
        "the recipe recomputes 5 layers; not modelled", tolerance=20.0,
        axes=("FSDP",)),
    Row("tt-t1-llama31-8b-fsdp8-bf16", L8, GRAND_TETON, 8,
        dict(tp=1, pp=1, dp=8, zero=3, global_batch=16, micro_batch=2,
             recompute="selective", attention_kernel="fa2", kernels=EAGER),
        "tokens", 5762, TT + ", Table 1 (FSDP, eager)", +44.8,
        "500 W power cap (the model runs the GPU at full clocks) and eager "
        "PyTorch's kernel launch gaps", tolerance=20.0,
        axes=("FSDP",)),
    Row("tt-t3-llama31-8b-fsdp128-bf16", L8, GRAND_TETON, 128,
        dict(tp=1, pp=1, dp=128, zero=3, global_batch=256, micro_batch=2,
             recompute="selective", attention_kernel="fa2", kernels=EAGER),
        "tokens", 5605, TT + ", Table 3 (FSDP, eager)", +49.3,
        "500 W power cap (the model runs the GPU at full clocks) and eager "
        "PyTorch's kernel launch gaps", tolerance=20.0,
        axes=("FSDP",)),
    Row("tt-t4-llama31-70b-2d-fp8", L70, GRAND_TETON, 256,
        dict(tp=8, pp=1, dp=32, zero=3, global_batch=512, micro_batch=16,
             recompute="full", precision="fp8", attention_kernel="fa2"),
        "tokens", 829, TT + ", Table 4 (2D, no AsyncTP)", +36.4,
        "500 W cap; torchao FP8 with dynamic per-tensor scaling, casts not "
        "fused", tolerance=20.0, axes=("FSDP",)),
    Row("tt-t5-llama31-405b-3d-1f1b-fp8", L405, GRAND_TETON, 512,
        dict(tp=8, pp=8, dp=8, zero=3, global_batch=256, micro_batch=1,
             recompute="full", precision="fp8", attention_kernel="fa2"),
        "tokens", 100, TT + ", Table 5 (1F1B)", +11.2,
        axes=("FSDP",)),
    Row("tt-t2-llama31-8b-cp8-256k-fp8", _seq(L8, 262144), GRAND_TETON, 8,
        dict(tp=1, pp=1, dp=1, cp=8, zero=3, global_batch=1, micro_batch=1,
             recompute="full", precision="fp8", attention_kernel="fa2",
             cp_attention="allgather"),
        "tokens", 548, TT + ", Table 2 (FSDP 1, CP 8)", +104.5,
        "500 W cap; SDPA attention at 256k split in CP chunks runs at "
        "about half the FA2 rate the model takes", tolerance=20.0,
        axes=("FSDP", "CP")),
]

#: Published 2024-26 runs with FSDP, CP or interleaving (issue 29 item 7)
NEW_ROWS = [
    Row("tt-a100-llama3-8b-fsdp64", L8, DGX_A100, 64,
        dict(tp=1, pp=1, dp=64, zero=3, global_batch=64, micro_batch=1,
             recompute="selective", flash_attention=True,
             fused_grad_accumulation=True, attention_kernel="fa2", kernels=EAGER),
        "tokens", 2973, TT_A100 + ", Llama 3 8B, selective op AC", +24.6,
        "eager PyTorch's kernel launch gaps (its elementwise traffic is "
        "modelled op by op)",
        tolerance=20.0, axes=("FSDP",)),
    Row("tt-a100-llama3-70b-fsdp64", L70, DGX_A100, 64,
        dict(tp=1, pp=1, dp=64, zero=3, global_batch=64, micro_batch=1,
             recompute="full", flash_attention=True,
             fused_grad_accumulation=True, attention_kernel="fa2", kernels=EAGER),
        "tokens", 331, TT_A100 + ", Llama 3 70B, full AC", +10.5,
        tolerance=20.0, axes=("FSDP",)),
    Row("tt-a100-llama2-13b-fsdp64", L2_13, DGX_A100, 64,
        dict(tp=1, pp=1, dp=64, zero=3, global_batch=128, micro_batch=2,
             recompute="none", flash_attention=True,
             fused_grad_accumulation=True, attention_kernel="fa2", kernels=EAGER),
        "tokens", 2162, TT_A100 + ", Llama 2 13B, no AC", +14.0,
        
        tolerance=20.0, axes=("FSDP",)),
    Row("nemo2407-llama3-8b-cp2-fp8", L8, DGX_H100, 8,
        dict(tp=1, pp=1, dp=4, cp=2, global_batch=128, micro_batch=1,
             recompute="none", precision="fp8", **MB),
        "tokens", 12036, NEMO_2407 + ", LLAMA3-8B", +44.8,
        "NeMo 24.07 software: per-kernel overheads the compute-bound "
        "estimate lacks at 8B", axes=("CP",)),
    Row("nemo2407-llama3-70b-cp2-vp5-fp8", L70, DGX_H100, 64,
        dict(tp=4, pp=4, dp=2, cp=2, interleave=5, global_batch=128,
             micro_batch=1, recompute="none", precision="fp8", **MB),
        "tokens", 1533, NEMO_2407 + ", LLAMA3-70B", +12.9,
        axes=("CP", "interleaved")),
    Row("nemo2407-llama2-70b-vp20-fp8", L2_70, DGX_H100, 64,
        dict(tp=4, pp=4, dp=4, interleave=20, global_batch=128,
             micro_batch=1, recompute="none", precision="fp8", **MB),
        "tokens", 1707, NEMO_2407 + ", LLAMA2-70B", -2.8,
        axes=("interleaved",)),
    Row("llama3-405b-8k-8192gpus", L405, META_ROCE_H100, 8192,
        dict(tp=8, pp=16, dp=64, global_batch=2048, micro_batch=1,
             interleave=2, zero=2, recompute="full"),
        "tflops_model", 430, LLAMA3 + ", 8,192 GPUs", -12.7,
        formula="6N+attn", axes=("interleaved",)),
    Row("llama3-405b-8k-16384gpus", L405, META_ROCE_H100, 16384,
        dict(tp=8, pp=16, dp=128, global_batch=2048, micro_batch=1,
             interleave=2, zero=2, recompute="full"),
        "tflops_model", 400, LLAMA3 + ", 16,384 GPUs", -22.0,
        "interleave depth not printed (v = 2 assumed); Llama 3's tuned "
        "schedule shrinks the bubble of 16 micro-batches",
        formula="6N+attn", axes=("interleaved",)),
    Row("llama3-405b-128k-cp16", _seq(L405, 131072), META_ROCE_H100, 16384,
        dict(tp=8, pp=16, dp=8, cp=16, global_batch=128, micro_batch=1,
             interleave=2, zero=2, recompute="full", cp_attention="allgather"),
        "tflops_model", 380, LLAMA3 + ", 16,384 GPUs, 131,072 tokens", -1.9,
        formula="6N+attn", axes=("CP", "interleaved")),
]

ROWS = A100_ROWS + H100_ROWS + NEW_ROWS


def error_table(rows: list[Row] | None = None) -> list[dict]:
    """One dict per row: id, source, quantity, model, published, error %,
    recorded error %, tolerance, why; worst first."""
    out = []
    for r in ROWS if rows is None else rows:
        got = predict(r)
        out.append(dict(id=r.id, source=r.source, quantity=r.quantity,
                        model=got, published=r.published,
                        error=100 * (got / r.published - 1),
                        recorded=r.recorded, tolerance=r.tolerance,
                        why=r.why, axes=r.axes))
    return sorted(out, key=lambda d: -abs(d["error"]))
