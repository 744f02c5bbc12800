"""Cost curves, crossovers and NCCL's choice, drawn (book, Chapters 4-5).

Each ``*_view`` returns a :mod:`warmup_kit.viz.widgets` spec (data only), drawn
by matplotlib in a kernel and by Plotly on the static site. Every number is
a model output: the closed forms of :mod:`warmup_kit.model.costs` (uniform
network, Thakur, Rabenseifner and Gropp 2005, section 3), the schedule
simulator of :mod:`warmup_kit.model.simulate` on a DGX cluster, the alpha-beta-
gamma fit of :mod:`warmup_kit.measure.fit` to a stored measurement, or the NCCL
cost model of :mod:`warmup_kit.model.nccl`.
"""
from __future__ import annotations

import math
from typing import Sequence


from warmup_kit.model import costs
from warmup_kit.units import human_bytes as human
from warmup_kit.measure import fit as F
from warmup_kit.algorithms import build
from warmup_kit.model.hardware import cluster
from warmup_kit.model.nccl import ALGORITHMS as NCCL_ALGORITHMS
from warmup_kit.model.nccl import PROTOCOLS, best_for_shape, shape_of, time_s
from warmup_kit.model.simulate import simulate
from warmup_kit.viz.widgets import Figure, Grid, Line, Panel

#: the flat all-reduce algorithms of Chapter 4, in the book's order
FLAT = ("ring", "tree", "double_tree", "recursive_doubling", "rabenseifner")
SHORT = {"ring": "ring", "tree": "tree", "double_tree": "2tree",
         "rail_ring": "NCCL ring", "leader": "leader",
         "recursive_doubling": "rec-dbl", "rabenseifner": "Rab",
         "hierarchical": "hier", "nvls": "NVLS", "nvls_tree": "NVLS-tree"}
SIZES = tuple(2 ** k for k in range(3, 33))          # 8 B .. 4 GiB
MAP_SIZES = tuple(2 ** k for k in range(3, 33, 3))   # 8 B, 64 B, .. 2 GiB
MAP_NS = (2, 4, 6, 8, 12, 16, 64, 96, 1000, 1024)
#: the contests of the widget: which algorithms may win
CONTESTS = {"all five": FLAT,
            "ring vs trees": ("ring", "tree", "double_tree")}
#: MPICH's allreduce switch point in Thakur et al. 2005 (section 4.4) and
#: the MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE default: 2 KiB
MPICH_SHORT_MSG_BYTES = 2048


#: closed-form time of one flat algorithm of :data:`FLAT` (double tree included)
allreduce_s = costs.allreduce_s


def fastest(nbytes: float, n: int, alpha_s: float, bw_bytes_per_s: float,
            gamma_s_per_byte: float = 0.0,
            algorithms: Sequence[str] = FLAT) -> str:
    """The algorithm of ``algorithms`` with the lowest closed-form time."""
    return min(algorithms, key=lambda a: allreduce_s(
        a, nbytes, n, alpha_s, bw_bytes_per_s, gamma_s_per_byte))


#: where ``a`` overtakes ``b`` (closed forms): the model layer's bisection
crossover_bytes = costs.crossover_bytes


def winner_grid(alpha_s: float, bw_bytes_per_s: float,
                gamma_s_per_byte: float = 0.0, ns: Sequence[int] = MAP_NS,
                sizes: Sequence[int] = MAP_SIZES,
                algorithms: Sequence[str] = FLAT) -> Grid:
    """Fastest of ``algorithms`` per (N, size): a map of where each wins."""
    names = [[fastest(v, n, alpha_s, bw_bytes_per_s, gamma_s_per_byte,
                      algorithms) for v in sizes] for n in ns]
    z = [[FLAT.index(a) / (len(FLAT) - 1) for a in row] for row in names]
    text = [[SHORT[a] for a in row] for row in names]
    return Grid(z, text, [human(v) for v in sizes], [f"N={n}" for n in ns])


def cost_view(n: int, alpha_us: float, bw_gbps: float,
              contest: str = "all five", gamma_gbps: float | None = None,
              sizes: Sequence[int] = SIZES) -> Figure:
    """Chapter 4's widget: alpha-beta-gamma time of each algorithm vs size.

    Left: closed-form time per flat algorithm at ``n`` ranks. Right: the
    fastest algorithm of the ``contest`` (a :data:`CONTESTS` key) for every
    (N, size) at the same alpha and bandwidth. ``gamma_gbps`` is the
    reduction rate (None: free reduction).
    """
    a, bw = alpha_us * 1e-6, bw_gbps * 1e9
    g = 1 / (gamma_gbps * 1e9) if gamma_gbps else 0.0
    lines = [Line(list(sizes), [allreduce_s(alg, v, n, a, bw, g) * 1e6
                                for v in sizes], SHORT[alg], dash=alg != "ring")
             for alg in FLAT]
    x = crossover_bytes("ring", "tree", n, a, bw, g)
    x2 = crossover_bytes("ring", "double_tree", n, a, bw, g)
    where = "never" if x is None else f"above {human(x)}"
    where2 = "never" if x2 is None else f"above {human(x2)}"
    return Figure([
        Panel(lines, title=f"N = {n}: ring beats tree {where}, double "
                           f"tree {where2}",
              xlabel="bytes per rank V", ylabel="µs (model)", logx=True,
              logy=True),
        Panel([winner_grid(a, bw, g, algorithms=CONTESTS[contest])],
              title=f"fastest of {contest} (model)")],
        title=f"all-reduce, α = {alpha_us:g} µs, {bw_gbps:g} GB/s per link")


# ------------------------------------------------- measured vs the model
def measured_vs_fit(doc: dict, n: int,
                    algorithms: Sequence[str] = ("ring", "tree", "mpi"),
                    min_bytes: int = 1 << 10) -> Panel:
    """A stored measurement (:mod:`warmup_kit.measure.crossover`) against the
    alpha-beta-gamma model fitted to it: markers measured, dashes model."""
    rows = [r for r in doc["rows"] if r["ranks"] == n]
    fitted = F.fit(rows, min_bytes=min_bytes)
    traces = []
    for i, alg in enumerate(algorithms):
        mine = sorted((r for r in rows if r["algorithm"] == alg),
                      key=lambda r: r["size"])
        xs = [r["size"] for r in mine]
        col = ("#1f77b4", "#d62728", "#7f7f7f", "#2ca02c", "#9467bd")[i % 5]
        traces.append(Line(xs, [r["time_us"] for r in mine],
                           f"{SHORT.get(alg, alg)}, measured", markers=True,
                           color=col))
        if alg != "mpi":
            traces.append(Line(xs, [F.predict(alg, v, n, fitted) * 1e6
                                    for v in xs], f"{SHORT[alg]}, fitted model",
                               dash=True, color=col))
    return Panel(traces, title=f"N = {n}, measured on this machine",
                 xlabel="bytes per rank", ylabel="µs", logx=True, logy=True)


# ------------------------------------------------ hierarchical vs flat
def island_times(system: str, nodes: int, sizes: Sequence[int]
                 ) -> dict[str, list[float]]:
    """Simulated all-reduce time (s) on ``nodes`` full nodes of ``system``,
    ranks packed, two-level schemes grouped by node: the textbook ring
    (``ring``, lock-step), the flat ring as NCCL runs it (``rail_ring``, a
    ring per rail, pipelined), ``hierarchical`` and ``leader`` (pipelined)
    and the unpipelined ``double_tree`` (lock-step). See
    :mod:`warmup_kit.model.twolevel`."""
    c = cluster(system, nodes)
    n, g = c.n_gpus, c.gpus_per_node
    runs = {"ring": False, "rail_ring": True, "hierarchical": True,
            "leader": True, "double_tree": False}
    out = {}
    for alg, pipelined in runs.items():
        s = build("allreduce", alg, n, ranks_per_node=g)
        out[alg] = [simulate(s, c, v, pipelined=pipelined).total_s
                    for v in sizes]
    return out


def islands_view(system: str, nodes: int,
                 sizes: Sequence[int] = tuple(2 ** k for k in range(10, 31, 2))
                 ) -> Figure:
    """Textbook ring, NCCL's flat ring, hierarchical, leader and double tree
    across NVLink islands (simulated); right, each one's time over the
    NCCL-style flat ring's (below 1: faster than the fair flat ring)."""
    t = island_times(system, nodes, sizes)
    xs = list(sizes)
    order = ("ring", "rail_ring", "hierarchical", "leader", "double_tree")
    left = [Line(xs, [s * 1e6 for s in t[a]], SHORT[a],
                 dash=a in ("ring", "double_tree")) for a in order]
    right = [Line(xs, [x / f for x, f in zip(t[a], t["rail_ring"])],
                  f"{SHORT[a]} / NCCL ring", dash=a in ("ring", "double_tree"))
             for a in order if a != "rail_ring"]
    g = cluster(system, nodes)
    return Figure([
        Panel(left, title=f"{g.n_gpus} GPUs = {nodes} nodes x "
                          f"{g.gpus_per_node}", xlabel="bytes per rank",
              ylabel="µs (simulated)", logx=True, logy=True),
        Panel(right, title="time / NCCL-style flat ring",
              xlabel="bytes per rank", ylabel="x", logx=True, logy=True)],
        title=f"all-reduce across NVLink islands, {system} (model)")


# --------------------------------------------------------- NCCL's choice
def nccl_times(system: str, nodes: int, sizes: Sequence[int],
               collective: str = "allreduce") -> dict[tuple[str, str], list]:
    """Predicted time (s; inf if not runnable) of every (algorithm,
    protocol) of :mod:`warmup_kit.model.nccl` on ``nodes`` full nodes."""
    c = cluster(system, nodes)
    n, N, k = shape_of(c, None)
    return {(a, p): [time_s(collective, a, p, v, c.system, n, N, k)
                     for v in sizes]
            for a in NCCL_ALGORITHMS for p in PROTOCOLS}


def nccl_choice_grid(system: str, node_counts: Sequence[int],
                     sizes: Sequence[int], collective: str = "allreduce"
                     ) -> Grid:
    """NCCL model's pick, algorithm/protocol, per (node count, size)."""
    combos = [(a, p) for a in NCCL_ALGORITHMS for p in PROTOCOLS]
    z, text = [], []
    for nodes in node_counts:
        c = cluster(system, nodes)
        shape = shape_of(c, None)
        picks = [best_for_shape(collective, float(v), c.system, *shape)
                 for v in sizes]
        z.append([combos.index((b.algorithm, b.protocol)) / (len(combos) - 1)
                  for b in picks])
        text.append([f"{SHORT.get(b.algorithm, b.algorithm)}\n{b.protocol}"
                     for b in picks])
    return Grid(z, text, [human(v) for v in sizes],
                [f"{nodes} node{'s' * (nodes > 1)}" for nodes in node_counts])


def nccl_view(system: str, nodes: int,
              sizes: Sequence[int] = tuple(2 ** k for k in range(3, 33)),
              node_counts: Sequence[int] = (1, 2, 8, 32, 128)) -> Figure:
    """Chapter 5's widget: time = latency + bytes / bandwidth for every
    (algorithm, protocol) at ``nodes`` nodes; right, the pick per scale."""
    t = nccl_times(system, nodes, sizes)
    lines = [Line(list(sizes), [x * 1e6 if math.isfinite(x) else float("nan")
                                for x in ts], f"{SHORT.get(a, a)}/{p}",
                  dash=p != "Simple")
             for (a, p), ts in t.items()]
    c = cluster(system, nodes)
    pick = {v: best_for_shape("allreduce", float(v), c.system,
                              *shape_of(c, None)) for v in sizes}
    small, large = pick[sizes[0]], pick[sizes[-1]]
    return Figure([
        Panel(lines, title=f"{c.n_gpus} GPUs: {SHORT.get(small.algorithm)}/"
                           f"{small.protocol} at {human(sizes[0])}, "
                           f"{SHORT.get(large.algorithm)}/{large.protocol} at "
                           f"{human(sizes[-1])}",
              xlabel="bytes per rank", ylabel="µs (model)", logx=True,
              logy=True),
        Panel([nccl_choice_grid(system, node_counts, sizes[::6])],
              title="the model's pick, by nodes and size")],
        title=f"NCCL's all-reduce choice, modelled: {system}")


def mpich_allreduce_choice(nbytes: int, n: int, predefined_op: bool = True,
                           short_msg_bytes: int = MPICH_SHORT_MSG_BYTES) -> str:
    """MPICH's all-reduce rule of Thakur et al. 2005 (section 4.4):
    recursive doubling for short messages or user-defined operations,
    Rabenseifner's algorithm for long messages with predefined ones."""
    if n < 2:
        return "none"
    if nbytes <= short_msg_bytes or not predefined_op:
        return "recursive_doubling"
    return "rabenseifner"
