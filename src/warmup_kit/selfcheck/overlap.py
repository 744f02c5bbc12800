"""Self-check: where a low MFU went (Chapter 7)."""
from __future__ import annotations

from collections.abc import Mapping

from warmup_kit.exercises.result import (
    Result, close, failed, passed, unanswered)

#: the budget entry that is the MFU itself, not a loss
MFU_KEY = "model FLOPs at peak (MFU)"


def largest_loss(budget: Mapping[str, float], answer) -> Result:
    """Grade the name of the largest share of a step that is not model
    FLOPs at peak, in a budget that adds up to 1 (such as
    ``warmup_kit.viz.plots_overlap.mfu_budget``)."""
    if not isinstance(budget, Mapping) or MFU_KEY not in budget:
        raise ValueError(f"budget must be a mapping with {MFU_KEY!r}")
    if not close(sum(budget.values()), 1.0, 0.01):
        raise ValueError(f"budget shares add up to {sum(budget.values())}, "
                         "not 1")
    losses = {k: v for k, v in budget.items() if k != MFU_KEY}
    ex = "largest loss in the step"
    if answer is ...:
        return unanswered(ex, f"one of {sorted(losses)}")
    if answer not in losses:
        raise ValueError(f"answer must be one of {sorted(losses)}, "
                         f"got {answer!r}")
    right = max(losses, key=losses.get)
    order = sorted(losses, key=losses.get, reverse=True)
    if answer == right:
        top = ", ".join(f"{k} {100 * losses[k]:.1f}%" for k in order[:3])
        return passed(ex, f"MFU {100 * budget[MFU_KEY]:.1f}%; the "
                          f"largest losses: {top}")
    return failed(ex, f"{answer} is {100 * losses[answer]:.1f}% of the "
                      f"step, number {order.index(answer) + 1} of "
                      f"{len(order)}: look for a bigger one")
