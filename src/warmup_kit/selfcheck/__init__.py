"""Self-checks for the book's success criteria: graders a reader calls.

Each grader takes the question's inputs and the reader's answer (``...``
while unanswered) and returns a :class:`~warmup_kit.exercises.result.Result`,
the same type the chapters' exercises return: ``.passed``, and what was
checked or a hint. The right answer is computed by the package's own model
or measurement, never stored. Bad input raises ``ValueError`` /
``TypeError`` naming the field.
"""
from warmup_kit.exercises.result import Result
from warmup_kit.selfcheck.algorithms import (
    crossover, faster, hierarchical_wins)
from warmup_kit.selfcheck.collectives import byte_count, ring_bytes
from warmup_kit.selfcheck.failures import checkpoint_interval, culprit
from warmup_kit.selfcheck.faults import emulated_fault, fault_evidence
from warmup_kit.selfcheck.nccl import slow_collective_knobs
from warmup_kit.selfcheck.overlap import largest_loss
from warmup_kit.selfcheck.parallelism import nvlink_bound
from warmup_kit.selfcheck.serving import kv_cache_bytes
from warmup_kit.selfcheck.topology import nvlink_nic_ratio, tp_slowdown

__all__ = ["Result", "byte_count", "checkpoint_interval", "crossover",
           "culprit", "emulated_fault", "fault_evidence", "faster",
           "hierarchical_wins", "kv_cache_bytes", "largest_loss",
           "nvlink_bound", "nvlink_nic_ratio", "ring_bytes",
           "slow_collective_knobs", "tp_slowdown"]
