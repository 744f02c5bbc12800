"""Bytes each GPU sends per training step, per parallelism axis (Chapter 1).

For a GPT model trained with tensor (t), pipeline (p) and data (d)
parallelism, ring algorithms throughout, 2-byte activations:

* **data parallel**: one all-reduce of the gradients of the GPU's
  ``params / (t p)`` parameters per step, ``2 (d-1)/d`` times their size
  (Chapter 3), and it can overlap the backward pass;
* **tensor parallel**: all-reduces of the ``b s h`` activations, 2 per layer
  in the forward and 2 in the backward, 2 more when the forward is
  recomputed (Shoeybi et al. 2019, section 3; Narayanan et al. 2021,
  section 2.3), for every layer of the stage and every micro-batch, each on
  the critical path;
* **pipeline parallel**: point-to-point sends of one micro-batch's
  activations forward and their gradients backward at each stage boundary,
  ``b s h / t`` each with the scatter/gather optimization (Narayanan et al.
  2021, section 4.1).

The step-time model (:mod:`warmup_kit.parallelism.step`) turns these bytes into
seconds on real links; this module only counts them.
"""
from __future__ import annotations

from warmup_kit.model.costs import busbw_factor
from warmup_kit.parallelism.step import Transformer
from warmup_kit.parallelism.compute import BYTES


def per_step(model: Transformer, *, tp: int, pp: int, dp: int,
             global_batch: int, micro_batch: int = 1,
             recompute: str = "full", grad_bytes: int = 4) -> dict[str, dict]:
    """Traffic of one GPU in one step, per axis.

    Args:
        model: the transformer.
        tp, pp, dp: parallel sizes.
        global_batch, micro_batch: sequences per step and per micro-batch.
        recompute: "full" adds the recomputed forward's 2 all-reduces.
        grad_bytes: bytes per gradient value in the DP all-reduce: 4 (fp32,
            as the memory model's 18-byte recipe holds them and the
            step-time model reduces them); 2 where gradients are reduced in
            bf16.

    Returns:
        ``{"dp" | "tp" | "pp": {"bytes": sent per GPU, "messages": collective
        calls or sends per step, "each_bytes": size of one}}``.
    """
    m = global_batch // (dp * micro_batch)
    act = micro_batch * model.seq * model.hidden * BYTES
    layers = model.layers // pp
    n_ar = 6 if recompute == "full" else 4
    grads = model.params / (tp * pp) * grad_bytes
    out = {"dp": (grads, 1, busbw_factor("allreduce", dp) if dp > 1 else 0),
           "tp": (act, n_ar * layers * m,
                  busbw_factor("allreduce", tp) if tp > 1 else 0),
           "pp": (act / tp, 2 * m if pp > 1 else 0, 1.0)}
    return {k: {"bytes": size * calls * factor, "messages": calls,
                "each_bytes": size}
            for k, (size, calls, factor) in out.items()}
