"""Graders for Chapters 2 and 3: schedules the reader writes, and bytes per
rank checked against a schedule's measured traffic.

The checks are the kit's own: :func:`warmup_kit.schedule.verify` proves a
schedule computes its collective, :func:`warmup_kit.schedule.traffic`
counts the bytes each rank sends.
"""
from __future__ import annotations

from warmup_kit.algorithms import REGISTRY, build
from warmup_kit.exercises.result import (
    Result, choice, failed, integer, number, off_by, passed)
from warmup_kit.schedule import Schedule, ScheduleError, traffic, verify


def _max_sent(s: Schedule, nbytes: int) -> int:
    return max(traffic(s, nbytes).bytes_sent)


def check_reduce_scatter(schedule, n: int | None = None) -> Result:
    """A ring-style reduce-scatter schedule (book, Chapter 3, "The
    ring").

    Passes when ``schedule`` is a reduce-scatter :class:`Schedule` that
    :func:`verify` accepts and whose busiest rank sends no more than
    (N-1)/N of the buffer (the bandwidth optimum).

    Args:
        schedule: the reader's :class:`~warmup_kit.schedule.Schedule`.
        n: the number of ranks asked for (None: any).
    """
    ex = "reduce-scatter schedule"
    if not isinstance(schedule, Schedule):
        raise TypeError("schedule must be a warmup_kit.schedule.Schedule, "
                        f"got {type(schedule).__name__}")
    if n is not None:
        n = integer("n", n, minimum=2)
    if schedule.collective != "reduce_scatter":
        return failed(ex, f"collective is {schedule.collective!r}",
                      "build it with Schedule(..., "
                      "collective='reduce_scatter', ...)")
    N = schedule.ranks
    if n is not None and N != n:
        return failed(ex, f"the schedule has {N} ranks, the exercise asks "
                      f"for {n}", "set ranks=n and chunks=n")
    if N < 2:
        return failed(ex, "one rank has nothing to exchange",
                      "try N >= 2 ranks")
    try:
        verify(schedule)
    except ScheduleError as e:
        return failed(ex, f"verify() rejects it: {e}",
                      "rank r must end with chunk r summed over every rank; "
                      "in round k, rank i passes on the chunk it has just "
                      "added to (Chapter 3, \"The ring\")")
    V = N * N * 64                        # divisible: exact byte counts
    sent = _max_sent(schedule, V)
    optimum = (N - 1) * V // N
    if sent > optimum:
        return failed(ex, f"correct, but the busiest rank sends "
                      f"{sent / V:.3f} V, more than the optimum for N={N}",
                      "each rank should send each chunk once, and only "
                      "partial sums: one chunk per round")
    return passed(ex, f"verify() accepts it; N={N}, {schedule.steps} rounds, "
                  f"busiest rank sends {sent / V:.3f} V = (N-1)/N V")


def check_bytes_per_rank(answer, *, collective: str, n: int, nbytes: int,
                         algorithm: str = "ring") -> Result:
    """Bytes the busiest rank sends in ``collective`` by ``algorithm`` on
    ``n`` ranks for a buffer of ``nbytes`` (book, Chapters 2 and 3).

    Checked against the schedule's measured traffic, to within a byte.
    """
    ex = f"bytes per rank, {algorithm} {collective}"
    a = number("answer", answer, positive=False)
    choice("collective", collective, REGISTRY)
    choice("algorithm", algorithm, REGISTRY[collective])
    n = integer("n", n, minimum=2)
    nbytes = integer("nbytes", nbytes)
    truth = _max_sent(build(collective, algorithm, n), nbytes)
    if abs(a - truth) <= 1:
        return passed(ex, f"{a:,.0f} bytes for N={n}, V={nbytes:,}: the "
                      "schedule's traffic agrees")
    return failed(ex, f"{a:,.0f} bytes is {off_by(a, truth)} for N={n}, "
                  f"V={nbytes:,}", "count the rounds, and the fraction of V "
                  "a rank sends in each (Chapter 2, \"Bytes per rank\")")
