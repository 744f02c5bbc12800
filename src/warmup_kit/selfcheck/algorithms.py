"""Self-checks: when the tree beats the ring, and what hierarchy buys
(Chapter 4), graded by the package's own cost model."""
from __future__ import annotations

from warmup_kit.model.costs import ring_allreduce_s, tree_allreduce_s
from warmup_kit.model.twolevel import compare
from warmup_kit.selfcheck.verdict import Verdict, count, number, \
    unanswered, word

_ALGOS = {"ring": "ring", "tree": "tree"}
_SCHEMES = {"flat": "flat", "flat ring": "flat", "ring": "flat",
            "hierarchical": "hierarchical", "two level": "hierarchical"}


def faster(nbytes: int, n: int, alpha_s: float, bw_bytes_per_s: float,
           answer) -> Verdict:
    """Grade ``"ring"`` or ``"tree"``: the faster all-reduce of ``nbytes``
    on ``n`` ranks under the alpha-beta model (latency ``alpha_s`` per step,
    ``bw_bytes_per_s`` per link)."""
    v, n = count(nbytes, "nbytes"), count(n, "n", least=2)
    a, bw = number(alpha_s, "alpha_s"), number(bw_bytes_per_s, "bw")
    if answer is ...:
        return unanswered('"ring" or "tree"')
    got = word(answer, "answer", _ALGOS)
    t = {"ring": ring_allreduce_s(v, n, a, bw),
         "tree": tree_allreduce_s(v, n, a, bw)}
    right = min(t, key=t.get)
    rounds = {"ring": 2 * (n - 1), "tree": 2 * (n.bit_length() - 1)}
    why = (f"ring {t['ring'] * 1e6:,.1f} us ({rounds['ring']} latency "
           f"steps, 2(N-1)/N V per rank), tree {t['tree'] * 1e6:,.1f} us "
           f"({rounds['tree']} steps, 2V through each parent's port per "
           "level)")
    if got == right:
        return Verdict(True, why)
    hint = ("at this size the latency steps dominate: count them"
            if right == "tree" else
            "at this size the bytes dominate: which moves fewer per port?")
    return Verdict(False, hint)


def crossover_bytes(n: int, alpha_s: float, bw_bytes_per_s: float) -> float:
    """The message size where the model's ring and tree times are equal
    (bisection on a log scale between 1 B and 1 TB)."""
    n, a = count(n, "n", least=2), number(alpha_s, "alpha_s")
    bw = number(bw_bytes_per_s, "bw")

    def ring_ahead(v: float) -> bool:
        return ring_allreduce_s(v, n, a, bw) <= tree_allreduce_s(v, n, a, bw)
    lo, hi = 1.0, 1e12
    if ring_ahead(lo):
        return lo
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if ring_ahead(mid) else (mid, hi)
    return hi


def crossover(n: int, alpha_s: float, bw_bytes_per_s: float,
              answer) -> Verdict:
    """Grade an estimate of the ring/tree crossover in bytes (within a
    factor of 2 of :func:`crossover_bytes`)."""
    x = crossover_bytes(n, alpha_s, bw_bytes_per_s)
    if answer is ...:
        return unanswered("a size in bytes")
    got = number(answer, "answer")
    if x / 2 <= got <= 2 * x:
        return Verdict(True, f"the model's crossover is {x:,.0f} B")
    return Verdict(False, "set the two times equal: 2(N-1)(alpha + V/(N B)) "
                          "against 2 log2 N (alpha + 2V/B), solve for V; "
                          f"you are {'above' if got > x else 'below'} it")


def hierarchical_wins(system: str, nodes: int, nbytes: int,
                      answer) -> Verdict:
    """Grade ``"flat"`` or ``"hierarchical"``: the faster all-reduce of
    ``nbytes`` per GPU across ``nodes`` full nodes of ``system``, comparing
    NCCL's flat ring (a ring per rail) with the two-level scheme, both
    pipelined (:func:`warmup_kit.model.twolevel.compare`)."""
    nodes, v = count(nodes, "nodes", least=2), count(nbytes, "nbytes")
    if answer is ...:
        return unanswered('"flat" or "hierarchical"')
    got = word(answer, "answer", _SCHEMES)
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
        return Verdict(True, why)
    return Verdict(False, "compare the latency steps that cross the network "
                          "with the bytes that do, at this size")
