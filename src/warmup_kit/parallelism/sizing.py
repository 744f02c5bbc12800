"""Back-of-envelope sizing of a training job (book, Chapter 1).

Three questions come before any choice of parallelism:

* how many bytes one parameter costs during training (:data:`RECIPES`:
  weights, gradients, optimizer state; Rajbhandari et al. 2019, section 3.1,
  count 16 bytes for mixed-precision Adam);
* how much memory a whole model needs, activations included
  (:func:`training_memory`; the activation formulas of Korthikanti et al.
  2022 in :mod:`warmup_kit.parallelism.memory`), and so the least number of
  GPUs that can hold it (:func:`min_gpus_for_state`, and
  :func:`min_model_parallel`, which asks the full memory model);
* how long one GPU would take (:func:`single_gpu_days`).
"""
from __future__ import annotations

import math

from warmup_kit.model.hardware import SYSTEMS, cluster
from warmup_kit.parallelism.step import Transformer, iteration_time
from warmup_kit.parallelism.memory import activation_bytes_per_layer

#: Bytes per parameter while training, by part. "mixed-precision Adam"
#: is the ZeRO paper's count (fp16 weights and gradients, fp32 master
#: weights, momentum and variance); Megatron-LM keeps fp32 gradients
#: (``main_grad``), 18 bytes, which is what the step-time model uses.
RECIPES: dict[str, dict[str, int]] = {
    "inference (bf16 weights)": {"weights": 2},
    "mixed-precision Adam": {"weights": 2, "grads": 2, "optimizer": 12},
    "mixed-precision Adam, fp32 grads": {"weights": 2, "grads": 4,
                                         "optimizer": 12},
    "fp32 Adam": {"weights": 4, "grads": 4, "optimizer": 8},
}


def bytes_per_param(recipe: str) -> int:
    """Total training-state bytes per parameter of a :data:`RECIPES` entry."""
    return sum(RECIPES[recipe].values())


def training_memory(model: Transformer, *,
                    recipe: str = "mixed-precision Adam",
                    micro_batch: int = 1, recompute: str = "none"
                    ) -> dict[str, float]:
    """Bytes to train ``model`` on one device, by part (no parallelism).

    Activations are those of one micro-batch through every layer
    (Korthikanti et al. 2022, section 4: ``s b h (34 + 5 a s / h)`` per layer
    without recomputation, ``2 s b h`` with full recomputation).

    Returns:
        {"weights", "grads", "optimizer", "activations"} in bytes.
    """
    parts = {k: v * model.params for k, v in RECIPES[recipe].items()}
    per_layer = activation_bytes_per_layer(
        b=micro_batch, s=model.seq, h=model.hidden, a=model.heads, t=1,
        recompute=recompute, sequence_parallel=False, flash_attention=False)
    out = {k: float(parts.get(k, 0.0)) for k in ("weights", "grads",
                                                 "optimizer")}
    out["activations"] = per_layer * model.layers
    return out


def min_gpus_for_state(total_bytes: float, hbm_gb: float = 80.0) -> int:
    """Least number of ``hbm_gb`` GPUs whose memory adds up to the bytes.

    A lower bound: it assumes the state splits perfectly, with nothing
    replicated and nothing reserved.
    """
    return max(1, math.ceil(total_bytes / (hbm_gb * 1e9)))


def min_model_parallel(model: Transformer, system: str = "dgx-h100", *,
                       recompute: str = "full") -> dict:
    """Smallest ``tp * pp`` (dp = 1, micro-batch 1) that fits, by the model.

    TP grows up to the NVLink island first, then PP (Narayanan et al. 2021,
    section 3.3). Returns the layout and its memory in GiB, or raises if
    nothing up to 4,096 GPUs fits.
    """
    s = SYSTEMS[system]
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64, 72)
           if t <= s.nvlink_domain and model.heads % t == 0]
    for world in sorted({t * p for t in tps for p in range(1, 4097)
                         if model.layers % p == 0 and t * p <= 4096}):
        for t in reversed(tps):
            if world % t or model.layers % (world // t):
                continue
            p = world // t
            c = cluster(system, -(-world // s.gpus_per_node))
            r = iteration_time(model, c, tp=t, pp=p, dp=1, global_batch=p,
                               micro_batch=1, recompute=recompute)
            if r.fits:
                return {"gpus": world, "tp": t, "pp": p,
                        "memory_gib": r.memory_gib}
    raise ValueError(f"{model} does not fit on 4,096 GPUs of {system}")


def single_gpu_days(model: Transformer, tokens: float,
                    system: str = "dgx-h100", *, mfu: float = 0.4,
                    precision: str = "bf16") -> float:
    """Days for one GPU to train ``model`` on ``tokens`` tokens.

    Uses the model FLOPs (no recomputation) of
    :meth:`~warmup_kit.parallelism.step.Transformer.flops_per_sample`, which is
    close to ``6 * params * tokens``, at a model FLOPs utilization ``mfu``
    of the GPU's dense peak.
    """
    flops = model.flops_per_sample("none") * tokens / model.seq
    peak = SYSTEMS[system].gpu.peak_flops(precision)
    return flops / (peak * mfu) / 86400
