"""Self-check: which parallelism must stay on NVLink (Chapter 1, 6)."""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, failed, passed, spelled, unanswered)

_NAMES = {"dp": "dp", "data": "dp", "data parallel": "dp",
          "tp": "tp", "tensor": "tp", "tensor parallel": "tp",
          "pp": "pp", "pipeline": "pp", "pipeline parallel": "pp"}

_WHY = {
    "dp": "data parallelism all-reduces the gradients once a step, and the "
          "all-reduce overlaps the backward pass: it crosses nodes well",
    "pp": "pipeline parallelism sends one activation tensor point to point "
          "per micro-batch and stage boundary: little traffic, off the "
          "critical path of the matrix multiplies",
    "tp": "tensor parallelism all-reduces activations inside every layer, "
          "forward and backward, between two matrix multiplies: nothing "
          "hides it, so it needs the fastest link",
}


def nvlink_bound(answer) -> Result:
    """Grade the name of the parallelism that must stay inside an NVLink
    island (``"dp"``, ``"tp"`` or ``"pp"``, or spelled out)."""
    ex = "the parallelism that stays on NVLink"
    if answer is ...:
        return unanswered(ex, '"dp", "tp" or "pp"')
    got = spelled("answer", answer, _NAMES)
    if got == "tp":
        return passed(ex, _WHY["tp"])
    return failed(ex, f"{_WHY[got]}. Which one communicates inside "
                      "every layer?")
