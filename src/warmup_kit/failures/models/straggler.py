"""Find the straggler from per-rank step times (book, Chapter 8).

In a synchronous job every rank's step lasts as long as the slowest
rank's: the collectives make them wait for it. So the step times are all
alike, and what gives the straggler away is how each rank's step splits:
the straggler computes longest and waits least. :func:`find_stragglers`
takes each rank's compute time per step (the time outside collectives),
takes each rank's median over the steps (one slow step, a page fault or a
noisy neighbour, does not move it), and compares the ranks by robust
statistics: the median of the ranks, and their median absolute deviation
(MAD) scaled by 1.4826 to estimate a standard deviation under normal
noise. A mean and a standard deviation would let the straggler hide by
inflating both; the median and the MAD ignore up to half the ranks being
odd.

A rank is a straggler when its robust z-score passes ``threshold``, it is
at least ``min_excess`` slower than the median rank (so that a MAD near
zero, ranks that agree to the microsecond, cannot flag a rank 1% slower),
and it is slower than that at ``persistence`` of the steps (a slow rank is
a fault; a few slow steps are noise). Its cost to the job: per step, the
slowest rank's compute minus the slowest of the others', which is what
every rank waited for it; times the number of ranks, in rank-seconds
(GPU-hours at scale).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAD_TO_SIGMA = 1.4826          # MAD of a normal distribution = 0.6745 sigma


@dataclass(frozen=True)
class Stragglers:
    """The verdict of :func:`find_stragglers`.

    Attributes:
        ranks: the stragglers, slowest first.
        median_s: each rank's median compute time per step.
        z: each rank's robust z-score among the ranks.
        flagged: fraction of steps at which each rank was ``min_excess``
            slower than that step's median.
        excess: each rank's median compute over the steps' medians, minus 1.
        cost_s: seconds per rank the job lost waiting for the stragglers.
        cost_fraction: ``cost_s`` over the job's time.
    """

    ranks: tuple[int, ...]
    median_s: np.ndarray
    z: np.ndarray
    flagged: np.ndarray
    excess: np.ndarray
    cost_s: float
    cost_fraction: float
    world: int

    @property
    def cost_rank_s(self) -> float:
        """Rank-seconds (GPU-seconds) lost: every rank waited."""
        return self.cost_s * self.world

    def describe(self) -> str:
        if not self.ranks:
            return ("no straggler: every rank's compute time is within "
                    "the noise of the others'")
        parts = [f"rank {r} (compute {1e3 * self.median_s[r]:.1f} ms a step"
                 f", {self.excess[r]:+.0%} on the median rank, robust z "
                 f"{self.z[r]:.0f}, slow in {self.flagged[r]:.0%} of steps)"
                 for r in self.ranks]
        return (f"straggler: {'; '.join(parts)}. It cost the job "
                f"{self.cost_s:.2f} s of every rank's time, "
                f"{self.cost_fraction:.0%} of the run ({self.cost_rank_s:.2f}"
                " rank-seconds)")


def robust_z(values: np.ndarray) -> np.ndarray:
    """Each value's (v - median) / (1.4826 MAD), along the first axis.

    A MAD of 0 (values that agree exactly) gets a floor of 1e-9 so that
    the z-scores stay finite."""
    v = np.asarray(values, dtype=float)
    med = np.median(v, axis=0)
    mad = np.median(np.abs(v - med), axis=0) * MAD_TO_SIGMA
    return (v - med) / np.maximum(mad, 1e-9)


def find_stragglers(compute_s, *, step_s=None, threshold: float = 3.5,
                    min_excess: float = 0.10, persistence: float = 0.5
                    ) -> Stragglers:
    """Name the ranks whose compute makes the others wait.

    Args:
        compute_s: array (ranks, steps) of each rank's compute time (time
            outside collectives) at each step; at least 3 ranks.
        step_s: the job's time of each step (wall); default the slowest
            rank's compute (then ``cost_fraction`` ignores communication).
        threshold: robust z-score (among the ranks' medians) above which a
            rank is slow; 3.5 is Iglewicz and Hoaglin's rule for their
            "modified z-score", the same quantity.
        min_excess: and at least this much slower than the median rank.
        persistence: fraction of steps it must be that much slower in.
    """
    t = np.asarray(compute_s, dtype=float)
    if t.ndim != 2 or t.shape[0] < 3 or t.shape[1] < 1:
        raise ValueError(f"need times of shape (ranks >= 3, steps >= 1), "
                         f"got {t.shape}: with 2 ranks the median cannot "
                         "tell which one is slow")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError("times must be finite and >= 0")
    per_rank = np.median(t, axis=1)
    middle = np.median(per_rank)
    z = robust_z(per_rank)
    step_med = np.median(t, axis=0)
    flagged = (t > (1 + min_excess) * step_med).mean(axis=1)
    ranks = tuple(int(r) for r in np.argsort(-per_rank)
                  if z[r] > threshold and per_rank[r] > (1 + min_excess)
                  * middle and flagged[r] >= persistence)
    others = np.delete(t, list(ranks), axis=0) if ranks else t
    lost = t.max(axis=0) - others.max(axis=0)
    run_s = (t.max(axis=0) if step_s is None
             else np.asarray(step_s, dtype=float)).sum()
    return Stragglers(ranks=ranks, median_s=per_rank, z=z, flagged=flagged,
                      excess=per_rank / middle - 1,
                      cost_s=float(lost.sum()),
                      cost_fraction=float(lost.sum() / run_s),
                      world=t.shape[0])
