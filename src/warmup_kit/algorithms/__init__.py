"""Registry of collective algorithms: name -> schedule builder.

Every builder takes the number of ranks N (any N >= 1) and returns a
:class:`~warmup_kit.schedule.Schedule`. :func:`build` caches them.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable

from warmup_kit.schedule import ROOTED, Schedule
from warmup_kit.algorithms.alltoall import direct_all_to_all
from warmup_kit.algorithms.hierarchical import (
    default_ranks_per_node, hierarchical_allreduce, leader_allreduce)
from warmup_kit.algorithms.naive import naive_allreduce
from warmup_kit.algorithms.recursive import (
    rabenseifner_allreduce, recursive_doubling_allreduce)
from warmup_kit.algorithms.ring import (
    rail_ring_allreduce, ring_all_gather, ring_allreduce, ring_reduce_scatter)
from warmup_kit.algorithms.tree import (
    binomial_broadcast, binomial_gather, binomial_reduce, binomial_scatter,
    double_tree_allreduce, tree_allreduce)

ALLREDUCE: dict[str, Callable[..., Schedule]] = {
    "naive": naive_allreduce,
    "ring": ring_allreduce,
    "tree": tree_allreduce,
    "double_tree": double_tree_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
    "hierarchical": hierarchical_allreduce,
    "leader": leader_allreduce,
    "rail_ring": rail_ring_allreduce,
}

#: algorithms that take ``ranks_per_node`` (the two-level ones)
TWO_LEVEL: tuple[str, ...] = ("hierarchical", "leader", "rail_ring")

REGISTRY: dict[str, dict[str, Callable[..., Schedule]]] = {
    "allreduce": ALLREDUCE,
    "reduce_scatter": {"ring": ring_reduce_scatter},
    "all_gather": {"ring": ring_all_gather},
    "broadcast": {"tree": binomial_broadcast},
    "reduce": {"tree": binomial_reduce},
    "gather": {"tree": binomial_gather},
    "scatter": {"tree": binomial_scatter},
    "all_to_all": {"direct": direct_all_to_all},
}

ALGORITHMS: tuple[str, ...] = tuple(ALLREDUCE)


def algorithms_for(collective: str) -> tuple[str, ...]:
    """Names of the algorithms registered for ``collective``."""
    if collective not in REGISTRY:
        raise ValueError(f"unknown collective {collective!r}; "
                         f"choose from {sorted(REGISTRY)}")
    return tuple(REGISTRY[collective])


def default_algorithm(collective: str) -> str:
    """The algorithm used when none is named."""
    return algorithms_for(collective)[0] if collective != "allreduce" else "ring"


@contextmanager
def _no_gc():
    """Pause the cyclic collector: a large schedule is millions of small
    acyclic tuples, and collecting while they are made costs ~30%."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build(collective: str, algorithm: str, n: int, *, root: int = 0,
          ranks_per_node: int | None = None) -> Schedule:
    """The schedule of ``algorithm`` for ``collective`` on ``n`` ranks."""
    # checked before the cache: 2.0 == 2 and True == 1 hash alike, so a
    # float or bool would otherwise get the cached schedule of an int
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"number of ranks must be an int >= 1, got {n!r}")
    for name, v in (("root", root), ("ranks_per_node", ranks_per_node)):
        if isinstance(v, (bool, float)):
            raise ValueError(f"{name} must be an int, got {v!r}")
    return _build(collective, algorithm, n, root=root,
                  ranks_per_node=ranks_per_node)


@lru_cache(maxsize=512)
def _build(collective: str, algorithm: str, n: int, *, root: int = 0,
           ranks_per_node: int | None = None) -> Schedule:
    table = REGISTRY.get(collective)
    if table is None:
        raise ValueError(f"unknown collective {collective!r}; "
                         f"choose from {sorted(REGISTRY)}")
    if algorithm not in table:
        raise ValueError(f"unknown {collective} algorithm {algorithm!r}; "
                         f"choose from {sorted(table)}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"number of ranks must be an int >= 1, got {n!r}")
    if collective in ROOTED:
        if not 0 <= root < n:
            raise ValueError(f"root {root} out of range for {n} ranks")
        args: tuple = (n, root)
    elif algorithm in TWO_LEVEL:
        args = (n, ranks_per_node)
    else:
        args = (n,)
    with _no_gc():
        return table[algorithm](*args)


__all__ = ["ALGORITHMS", "REGISTRY", "algorithms_for", "build",
           "default_algorithm", "default_ranks_per_node", "TWO_LEVEL"]
