"""Graded exercises for the book's chapters.

Each grader checks the reader's answer with the kit's own machinery (a
schedule's :func:`~warmup_kit.schedule.verify` and traffic, the cost and
NCCL models, the parallelism model, the goodput simulation, the step
timeline, the KV-cache model) and returns a
:class:`~warmup_kit.exercises.result.Result`: a verdict, a hint that never
gives the answer away, and ``.passed``. The success-criteria self-checks
(:mod:`warmup_kit.selfcheck`) return the same type and use the same input
validators, all in :mod:`.result`. Bad input (a wrong type, a
negative size) raises ``TypeError`` or ``ValueError`` with the field named.

One module per topic: :mod:`.collectives` (Chapters 2-3), :mod:`.costs`
(3-4), :mod:`.nccl` (5-6), :mod:`.layout` (1, 6), :mod:`.overlap` (7),
:mod:`.goodput` (8), :mod:`.serving` (9).
"""
from warmup_kit.exercises.collectives import (
    check_bytes_per_rank, check_reduce_scatter)
from warmup_kit.exercises.costs import check_crossover
from warmup_kit.exercises.goodput import check_checkpoint_interval
from warmup_kit.exercises.layout import check_layout
from warmup_kit.exercises.nccl import (
    check_busbw, check_nccl_choice, check_spread_slowdown)
from warmup_kit.exercises.overlap import check_bucket_cap
from warmup_kit.exercises.result import Result
from warmup_kit.exercises.serving import check_kv_cache

__all__ = ["Result", "check_bucket_cap", "check_busbw",
           "check_bytes_per_rank", "check_checkpoint_interval",
           "check_crossover", "check_kv_cache", "check_layout",
           "check_nccl_choice", "check_reduce_scatter",
           "check_spread_slowdown"]
