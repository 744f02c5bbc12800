"""Self-checks: when the tree beats the ring, and what hierarchy buys
(Chapter 4), graded by the package's own cost model."""
from __future__ import annotations

from warmup_kit.exercises.result import (
    Result, failed, integer, number, passed, spelled, unanswered)
from warmup_kit.model.costs import (
    crossover_bytes, ring_allreduce_s, tree_allreduce_s)
from warmup_kit.model.twolevel import compare

_ALGOS = {"ring": "ring", "tree": "tree"}
_SCHEMES = {"flat": "flat", "flat ring": "flat", "ring": "flat",
            "hierarchical": "hierarchical", "two level": "hierarchical"}


def faster(nbytes: int, n: int, alpha_s: float, bw_bytes_per_s: float,
           answer) -> Result:
    """Grade ``"ring"`` or ``"tree"``: the faster all-reduce of ``nbytes``
    on ``n`` ranks under the alpha-beta model (latency ``alpha_s`` per step,
    ``bw_bytes_per_s`` per link)."""
    v, n = integer("nbytes", nbytes), integer("n", n, minimum=2)
    a, bw = number("alpha_s", alpha_s), number("bw", bw_bytes_per_s)
    ex = f"ring or tree, {v:,} B on N={n}"
    if answer is ...:
        return unanswered(ex, '"ring" or "tree"')
    got = spelled("answer", answer, _ALGOS)
    t = {"ring": ring_allreduce_s(v, n, a, bw),
         "tree": tree_allreduce_s(v, n, a, bw)}
    right = min(t, key=t.get)
    rounds = {"ring": 2 * (n - 1), "tree": 2 * (n.bit_length() - 1)}
    why = (f"ring {t['ring'] * 1e6:,.1f} us ({rounds['ring']} latency "
           f"steps, 2(N-1)/N V per rank), tree {t['tree'] * 1e6:,.1f} us "
           f"({rounds['tree']} steps, 2V through each parent's port per "
           "level)")
    if got == right:
        return passed(ex, why)
    hint = ("at this size the latency steps dominate: count them"
            if right == "tree" else
            "at this size the bytes dominate: which moves fewer per port?")
    return failed(ex, hint)


def crossover(n: int, alpha_s: float, bw_bytes_per_s: float,
              answer) -> Result:
    """Grade an estimate of the ring/tree crossover in bytes (within a
    factor of 2 of :func:`warmup_kit.model.costs.crossover_bytes`, the
    size where the model's ring and tree times meet)."""
    n, a = integer("n", n, minimum=2), number("alpha_s", alpha_s)
    bw = number("bw", bw_bytes_per_s)
    ex = f"ring/tree crossover, N={n}"
    x = crossover_bytes("ring", "tree", n, a, bw, lo=1.0, hi=1e12)
    if x is None:
        raise ValueError(f"for N={n} the ring is at least as fast as the "
                         "tree at every size from 1 B to 1 TB: no crossover")
    if answer is ...:
        return unanswered(ex, "a size in bytes")
    got = number("answer", answer)
    if x / 2 <= got <= 2 * x:
        return passed(ex, f"the model's crossover is {x:,.0f} B")
    return failed(ex, "set the two times equal: 2(N-1)(alpha + V/(N B)) "
                      "against 2 log2 N (alpha + 2V/B), solve for V; "
                      f"you are {'above' if got > x else 'below'} it")


def hierarchical_wins(system: str, nodes: int, nbytes: int,
                      answer) -> Result:
    """Grade ``"flat"`` or ``"hierarchical"``: the faster all-reduce of
    ``nbytes`` per GPU across ``nodes`` full nodes of ``system``, comparing
    NCCL's flat ring (a ring per rail) with the two-level scheme, both
    pipelined (:func:`warmup_kit.model.twolevel.compare`)."""
    nodes, v = integer("nodes", nodes, minimum=2), integer("nbytes", nbytes)
    ex = f"flat or hierarchical, {nodes} x {system}, {v:,} B"
    if answer is ...:
        return unanswered(ex, '"flat" or "hierarchical"')
    got = spelled("answer", answer, _SCHEMES)
    rows = {r["algorithm"]: r for r in compare(system, nodes, v)}
    flat, hier = rows["rail_ring"], rows["hierarchical"]
    right = "hierarchical" if hier["time_ms"] < flat["time_ms"] else "flat"
    ratio = flat["time_ms"] / hier["time_ms"]
    why = (f"flat {flat['time_ms']:.3f} ms, hierarchical "
           f"{hier['time_ms']:.3f} ms ({ratio:.2f}x); per node the network "
           f"carries {flat['net_v_per_node']:.2f} V against "
           f"{hier['net_v_per_node']:.2f} V, and the latency chain is "
           f"{flat['latency_us']:.0f} against {hier['latency_us']:.0f} us")
    if got == right:
        return passed(ex, why)
    return failed(ex, "compare the latency steps that cross the network "
                      "with the bytes that do, at this size")
