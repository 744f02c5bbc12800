"""Closed-form alpha-beta-gamma costs of collective algorithms (Chapter 4).

For a buffer of ``nbytes`` = V per rank on N ranks, with per-message latency
``alpha_s``, per-byte time ``beta = 1 / bw_bytes_per_s`` and per-byte
reduction time ``gamma_s_per_byte`` (Thakur, Rabenseifner and Gropp 2005,
section 3; Patarasuk and Yuan 2009 for the ring):

======================  ============================================
ring                    2(N-1) alpha + 2 (N-1)/N V beta + (N-1)/N V gamma
recursive doubling      log2 N (alpha + V beta + V gamma)
Rabenseifner            2 log2 N alpha + 2 (N-1)/N V beta + (N-1)/N V gamma
binary tree             2 D (alpha + 2 V beta) + 2 D V gamma, D = tree depth
naive                   alpha + (N-1) V beta + (N-1) V gamma
hierarchical            intra ring RS + inter ring AR of V/g + intra AG
======================  ============================================

Each formula is exact for the schedule of the same name in
:mod:`warmup_kit.algorithms` on a uniform network (tests hold it against
:func:`warmup_kit.model.simulate.simulate`), so the two can be used
interchangeably. The bus-bandwidth factors of nccl-tests live here, in
:data:`BUSBW_FACTORS`, and nowhere else.
"""
from __future__ import annotations

import math
from typing import Callable

#: nccl-tests bus bandwidth: busbw = algbw * factor(n) (nccl-tests
#: doc/PERFORMANCE.md). The one table every module imports.
BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests factor from algorithm to bus bandwidth for ``n`` ranks."""
    if collective not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {collective!r}; choose from "
                         f"{sorted(BUSBW_FACTORS)}")
    return BUSBW_FACTORS[collective](n)


def _check(n: int, nbytes: float) -> None:
    if n < 1 or nbytes < 0:
        raise ValueError("need n >= 1 ranks and nbytes >= 0")


def ring_allreduce_s(nbytes: float, n: int, alpha_s: float,
                     bw_bytes_per_s: float, gamma_s_per_byte: float = 0.0
                     ) -> float:
    """Ring all-reduce: 2(N-1) steps of V/N bytes (Patarasuk & Yuan 2009)."""
    _check(n, nbytes)
    if n == 1:
        return 0.0
    chunk = nbytes / n
    return (2 * (n - 1) * (alpha_s + chunk / bw_bytes_per_s)
            + (n - 1) * chunk * gamma_s_per_byte)


def ring_reduce_scatter_s(nbytes: float, n: int, alpha_s: float,
                          bw_bytes_per_s: float,
                          gamma_s_per_byte: float = 0.0) -> float:
    """Ring reduce-scatter (or all-gather with gamma=0): N-1 steps of V/N."""
    _check(n, nbytes)
    chunk = nbytes / n
    return (n - 1) * (alpha_s + chunk / bw_bytes_per_s
                      + chunk * gamma_s_per_byte)


def recursive_doubling_allreduce_s(nbytes: float, n: int, alpha_s: float,
                                   bw_bytes_per_s: float,
                                   gamma_s_per_byte: float = 0.0) -> float:
    """log2 p exchanges of the whole buffer; N - p extra ranks fold in
    first and get the result back last (one round each)."""
    _check(n, nbytes)
    p = 1 << (n.bit_length() - 1)
    step = alpha_s + nbytes / bw_bytes_per_s
    t = int(math.log2(p)) * (step + nbytes * gamma_s_per_byte)
    if n > p:
        t += 2 * step + nbytes * gamma_s_per_byte
    return t


def rabenseifner_allreduce_s(nbytes: float, n: int, alpha_s: float,
                             bw_bytes_per_s: float,
                             gamma_s_per_byte: float = 0.0) -> float:
    """Reduce-scatter by recursive halving, all-gather by recursive doubling
    (Rabenseifner 2004; Thakur et al. 2005, section 4.4)."""
    _check(n, nbytes)
    p = 1 << (n.bit_length() - 1)
    k = int(math.log2(p))
    moved = (p - 1) / p * nbytes
    t = 2 * k * alpha_s + 2 * moved / bw_bytes_per_s + moved * gamma_s_per_byte
    if n > p:
        t += 2 * (alpha_s + nbytes / bw_bytes_per_s) + nbytes * gamma_s_per_byte
    return t


def tree_allreduce_s(nbytes: float, n: int, alpha_s: float,
                     bw_bytes_per_s: float, gamma_s_per_byte: float = 0.0
                     ) -> float:
    """Binary tree (heap layout): reduce up D levels, broadcast down D.

    A parent receives from (sends to) both children in the same round: its
    port carries 2V, so a round costs alpha + 2 V beta, except a level whose
    only node is a single child (then V).
    """
    _check(n, nbytes)
    if n == 1:
        return 0.0
    depth = n.bit_length() - 1          # depth of position n - 1
    t = 0.0
    for d in range(1, depth + 1):
        first, last = (1 << d) - 1, min(n - 1, (1 << (d + 1)) - 2)
        fan = 2 if last > first else 1  # positions 2^d - 1 and 2^d: siblings
        t += 2 * (alpha_s + fan * nbytes / bw_bytes_per_s)
        t += fan * nbytes * gamma_s_per_byte
    return t


def double_tree_allreduce_s(nbytes: float, n: int, alpha_s: float,
                            bw_bytes_per_s: float,
                            gamma_s_per_byte: float = 0.0) -> float:
    """Two mirrored binary trees, each on half the buffer, run side by side
    (Sanders, Speck and Träff 2009).

    Round by round a rank is an interior node of at most one tree, so its
    busiest port carries what one tree's node carries for V/2: the time is
    :func:`tree_allreduce_s` at V/2 (exact for the ``double_tree`` schedule).
    """
    return tree_allreduce_s(nbytes / 2, n, alpha_s, bw_bytes_per_s,
                            gamma_s_per_byte)


def naive_allreduce_s(nbytes: float, n: int, alpha_s: float,
                      bw_bytes_per_s: float, gamma_s_per_byte: float = 0.0
                      ) -> float:
    """Everyone sends everything to everyone: one round, (N-1) V per port."""
    _check(n, nbytes)
    if n == 1:
        return 0.0
    return (alpha_s + (n - 1) * nbytes / bw_bytes_per_s
            + (n - 1) * nbytes * gamma_s_per_byte)


def hierarchical_allreduce_s(nbytes: float, ranks_per_node: int, nodes: int,
                             intra: tuple[float, float],
                             inter: tuple[float, float],
                             gamma_s_per_byte: float = 0.0) -> float:
    """Two-level all-reduce (book, Chapter 4; NCCL's tree/ring hybrid idea).

    Ring reduce-scatter inside each node (g ranks), g concurrent ring
    all-reduces of V/g across the G nodes (one per local rank, one NIC
    each), ring all-gather inside. ``intra`` and ``inter`` are
    ``(alpha_s, bw_bytes_per_s)`` of the two tiers.
    """
    g, G = ranks_per_node, nodes
    _check(g * G, nbytes)
    a1, b1 = intra
    a2, b2 = inter
    piece = nbytes / g
    t = 2 * (g - 1) * (a1 + piece / b1) if g > 1 else 0.0
    if G > 1:
        t += 2 * (G - 1) * (a2 + piece / G / b2)
    t += ((g - 1) * piece + (G - 1) * piece / G) * gamma_s_per_byte
    return t


CLOSED_FORMS: dict[str, Callable[..., float]] = {
    "ring": ring_allreduce_s,
    "tree": tree_allreduce_s,
    "double_tree": double_tree_allreduce_s,
    "recursive_doubling": recursive_doubling_allreduce_s,
    "rabenseifner": rabenseifner_allreduce_s,
    "naive": naive_allreduce_s,
}


def allreduce_s(algorithm: str, nbytes: float, n: int, alpha_s: float,
                bw_bytes_per_s: float, gamma_s_per_byte: float = 0.0) -> float:
    """Closed-form all-reduce time of a flat ``algorithm`` on a uniform
    network (see :data:`CLOSED_FORMS`)."""
    if algorithm not in CLOSED_FORMS:
        raise ValueError(f"no closed form for {algorithm!r}; choose from "
                         f"{sorted(CLOSED_FORMS)}")
    return CLOSED_FORMS[algorithm](nbytes, n, alpha_s, bw_bytes_per_s,
                                   gamma_s_per_byte)



def crossover_bytes(a: str, b: str, n: int, alpha_s: float,
                    bw_bytes_per_s: float, gamma_s_per_byte: float = 0.0,
                    lo: float = 8, hi: float = 2.0 ** 40) -> float | None:
    """The smallest size V in ``[lo, hi]`` above which flat algorithm ``a``
    is faster than ``b`` (closed forms of :func:`allreduce_s`), or None when
    ``a`` is already as fast at ``lo`` or never overtakes ``b`` below ``hi``.

    The first sign change of t_a - t_b on a log grid of 241 sizes, then
    bisected (50 halvings of the log interval) to the size where the two
    times meet; the returned V is on the side where ``a`` is ahead.
    """
    for name in (a, b):
        if name not in CLOSED_FORMS:
            raise ValueError(f"no closed form for {name!r}; choose from "
                             f"{sorted(CLOSED_FORMS)}")
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")

    def gap(v: float) -> float:
        return (allreduce_s(a, v, n, alpha_s, bw_bytes_per_s, gamma_s_per_byte)
                - allreduce_s(b, v, n, alpha_s, bw_bytes_per_s,
                              gamma_s_per_byte))

    if gap(lo) <= 0:
        return None
    step = (hi / lo) ** (1 / 240)
    grid = [lo * step ** k for k in range(240)] + [hi]
    for x0, x1 in zip(grid[:-1], grid[1:]):
        if gap(x1) < 0:
            for _ in range(50):
                mid = math.sqrt(x0 * x1)
                x0, x1 = (x0, mid) if gap(mid) < 0 else (mid, x1)
            return float(x1)
    return None
