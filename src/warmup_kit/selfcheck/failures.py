"""Self-checks: who hangs a job, and how often to checkpoint (Chapter 8)."""
from __future__ import annotations

from collections.abc import Sequence

from warmup_kit.failures.models.goodput import exact_optimum, young
from warmup_kit.exercises.result import (
    Result, close, failed, number, passed, unanswered)


def culprit(entered: Sequence[int], answer) -> Result:
    """Grade the culprit of a hang from a progress board: ``entered[r]``
    is the sequence number of the last collective rank ``r`` entered.

    The answer is a rank, or ``None`` when nobody is behind (every rank is
    in the same collective: the wait is in the network)."""
    if isinstance(entered, (str, bytes)) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0
            for s in entered) or len(entered) < 2:
        raise ValueError("entered must list >= 2 non-negative ints, one "
                         "per rank")
    ex = "who hangs the job"
    if answer is ...:
        return unanswered(ex, "a rank, or None if nobody is behind")
    if answer is not None and (isinstance(answer, bool) or not isinstance(
            answer, int) or not 0 <= answer < len(entered)):
        raise ValueError(f"answer must be a rank in 0..{len(entered) - 1} "
                         f"or None, got {answer!r}")
    low = min(entered)
    behind = [r for r, s in enumerate(entered) if s == low]
    if len(behind) == len(entered):
        right: list = [None]
        why = (f"every rank is inside collective #{low}: nobody is behind, "
               "the wait is in the transport or the network")
    else:
        right = behind
        names = ", ".join(str(r) for r in behind)
        why = (f"rank{'s' if len(behind) > 1 else ''} {names} never "
               f"entered collective #{low + 1}, which the others wait in")
    if answer in right:
        return passed(ex, why)
    if answer is None:
        return failed(ex, "not every rank is in the same collective")
    return failed(ex, f"rank {answer} entered #{entered[answer]}: "
                      "who is behind the others?")


def checkpoint_interval(delta_s: float, mtbf_s: float, answer) -> Result:
    """Grade a checkpoint interval in seconds for a checkpoint that blocks
    ``delta_s`` and a job MTBF ``mtbf_s``: within 15% of the exact
    optimum of the expected run time."""
    d, m = number("delta_s", delta_s), number("mtbf_s", mtbf_s)
    ex = "checkpoint interval"
    if answer is ...:
        return unanswered(ex, "an interval in seconds")
    got = number("answer", answer)
    best, y = exact_optimum(d, m), young(d, m)
    if close(got, best, 0.15):
        return passed(ex, f"the optimum is {best:,.0f} s (Young's "
                          f"sqrt(2 delta M) = {y:,.0f} s)")
    if close(got, m, 0.15) or close(got, d, 0.15):
        return failed(ex, "too long loses more work per failure, too "
                          "short spends the run checkpointing: balance "
                          "the two")
    return failed(ex, f"you are {'above' if got > best else 'below'} "
                      "the optimum: to first order it grows as the "
                      "square root of checkpoint cost times MTBF")
