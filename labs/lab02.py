"""Lab 02: the topology simulator (book, Chapter 6).

Run:  python labs/lab02.py [--system dgx-h100] [--nic 4x200G] [--json]
                            [--plot lab02.png]

Three experiments, all on the model (no GPUs, no MPI, about a second):

1. Tensor parallelism inside one NVLink island (a DGX node, an NVL72
   rack) vs split over two. The per-layer
   all-reduce of the TP group (b s h activations) is timed two ways: the
   ring *schedule* of Lab 01 run through the simulator (one ring, so the
   two island-crossing hops each ride one NIC: the ratio is about the
   NVLink/NIC ratio), and NCCL's model (rings over every NIC rail, NVLS inside a node).
   Then the end-to-end iteration slowdown of a GPT model trained with
   that TP placement.
2. Flat vs hierarchical all-reduce across islands, fairly: the textbook
   lock-step ring, the flat ring as NCCL runs it (a ring per NIC rail,
   network latency only where it crosses nodes), the hierarchical schedule
   and one leader per island, on 2..16 islands, for a small and a large
   buffer, with every NIC and with one NIC per node.
3. The pipeline bubble vs the number of micro-batches, against (p-1)/m.

``--nic`` runs all three on nodes with other scale-out NICs than the
system's own (``"COUNTxSPEED"`` in Gbit/s, or a fabric such as
``efa-p5``: :func:`warmup_kit.model.hardware.with_nic`), as the lab page's
"A cluster that is not a DGX" does for the layout search.

``--emulated`` instead shows the measured-vs-modelled run on an emulated
two-node cluster stored in ``book/data/cluster.json``; ``--emulated live``
measures it again (root: ``benchmarks/cluster.py`` builds the cluster).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from warmup_kit.algorithms import build
from warmup_kit.model.hardware import SYSTEMS, cluster, with_nic, with_nics
from warmup_kit.model.twolevel import compare
from warmup_kit.model.nccl import best
from warmup_kit.parallelism.step import Transformer, iteration_time
from warmup_kit.model.simulate import simulate
from warmup_kit.model.topology import packed

GPT = Transformer(layers=40, hidden=6144, heads=48, seq=2048, vocab=51200)
MICRO_BATCH = 1


def _islands(system: str, k: int, nic: str | None = None):
    """A cluster of ``k`` NVLink islands (a DGX node; an NVL72 rack)."""
    s = SYSTEMS[system]
    per = max(1, s.nvlink_domain // s.gpus_per_node)
    return cluster(system, k * per, nic=nic), per * s.gpus_per_node


def tp_placement(system: str, tp: int = 8, nic: str | None = None) -> dict:
    """Experiment 1: a TP group inside one NVLink island vs split 50/50
    over two islands (two DGX nodes; two NVL72 racks)."""
    c, island = _islands(system, 2, nic)
    nbytes = MICRO_BATCH * GPT.seq * GPT.hidden * 2
    inside = packed(c, tp)
    across = tuple(list(range(tp // 2)) + list(range(island,
                                                     island + tp // 2)))
    ring = build("allreduce", "ring", tp)
    sim_in = simulate(ring, c, nbytes, placement=inside).total_s
    sim_x = simulate(ring, c, nbytes, placement=across).total_s
    nccl_in = best("allreduce", nbytes, c, inside)
    nccl_x = best("allreduce", nbytes, c, across)
    # end to end on both islands: TP innermost (inside an island) vs TP
    # outermost (each TP group split over the two islands)
    dp = c.n_gpus // tp
    kw = dict(tp=tp, pp=1, dp=dp, global_batch=dp * 32,
              micro_batch=MICRO_BATCH)
    e_in = iteration_time(GPT, c, order=("dp", "pp", "tp"), **kw)
    e_x = iteration_time(GPT, c, order=("tp", "pp", "dp"), **kw)
    s = c.system
    return {
        "allreduce_bytes": nbytes, "tp": tp,
        "nvlink_over_nic": (s.nvlink or s.pcie).gbps / s.nic.gbps,
        "sim_ring_inside_us": sim_in * 1e6, "sim_ring_across_us": sim_x * 1e6,
        "sim_ring_ratio": sim_x / sim_in,
        "nccl_inside_us": nccl_in.time_s * 1e6,
        "nccl_inside_algo": f"{nccl_in.algorithm}/{nccl_in.protocol}",
        "nccl_across_us": nccl_x.time_s * 1e6,
        "nccl_across_algo": f"{nccl_x.algorithm}/{nccl_x.protocol}",
        "nccl_ratio": nccl_x.time_s / nccl_in.time_s,
        "iteration_inside_s": e_in.total_s, "iteration_across_s": e_x.total_s,
        "tp_comm_share_inside": e_in.parts["tp_comm"] / e_in.total_s,
        "tp_comm_share_across": e_x.parts["tp_comm"] / e_x.total_s,
        "end_to_end_slowdown": e_x.total_s / e_in.total_s,
    }


def hierarchical_vs_flat(system: str, islands=(2, 4, 8, 16),
                         sizes=(2 ** 20, 2 ** 30), nics: int | None = None,
                         nic: str | None = None) -> list[dict]:
    """Experiment 2: flat vs two-level all-reduce across 2..16 NVLink
    islands, simulated fairly (:mod:`warmup_kit.model.twolevel`): the
    textbook lock-step ring, the flat ring as NCCL runs it (a ring per rail,
    pipelined), the hierarchical schedule and the one-leader-per-island one.
    ``nics`` NICs per node (default: one per GPU; 1 = a single rail), of
    the system's own kind or, with ``nic``, of that one.
    Island counts too large to simulate in about a second are skipped."""
    s = SYSTEMS[system] if nic is None else with_nic(system, nic)
    if nics is not None:
        s = with_nics(s, nics)
    rows = []
    for k in islands:
        c, g = _islands(system, k)
        if c.n_gpus * g > 16384:
            continue
        for nbytes in sizes:
            t = {r["algorithm"]: r for r in compare(s, k, nbytes)}
            nccl = t["nccl_model"]
            rows.append({
                "islands": k, "ranks": c.n_gpus, "nbytes": nbytes,
                "textbook_ring_ms": t["ring"]["time_ms"],
                "nccl_ring_ms": t["rail_ring"]["time_ms"],
                "hierarchical_ms": t["hierarchical"]["time_ms"],
                "leader_ms": t["leader"]["time_ms"],
                "vs_textbook": t["ring"]["time_ms"]
                / t["hierarchical"]["time_ms"],
                "vs_nccl_ring": t["rail_ring"]["time_ms"]
                / t["hierarchical"]["time_ms"],
                "net_v_per_island": {a: t[a]["net_v_per_node"] for a in
                                     ("ring", "rail_ring", "hierarchical",
                                      "leader")},
                "nccl_model": nccl["variant"],
                "nccl_busbw_gbps": nccl["busbw_gbps"]})
    return rows


def bubble(system: str, pp: int = 8,
           micro_batches=(1, 2, 4, 8, 16, 32, 64),
           nic: str | None = None) -> list[dict]:
    """Experiment 3: pipeline bubble vs micro-batches, model vs (p-1)/m."""
    c = cluster(system, pp, nic=nic)
    rows = []
    for m in micro_batches:
        r = iteration_time(GPT, c, tp=c.gpus_per_node, pp=pp, dp=1,
                           global_batch=m, micro_batch=1)
        work = r.total_s - r.parts["pp_bubble"]
        rows.append({"m": m, "pp": pp, "bubble_over_work": r.parts["pp_bubble"] / work,
                     "formula": (pp - 1) / m,
                     "bubble_share": r.parts["pp_bubble"] / r.total_s,
                     "tflops_per_gpu": r.tflops_per_gpu})
    return rows


def run(system: str, nic: str | None = None) -> dict:
    """All three experiments as one JSON-able dict; ``nic`` replaces the
    nodes' scale-out NICs (:func:`~warmup_kit.model.hardware.with_nic`)."""
    return {"system": system, "nic": nic,
            "tp_placement": tp_placement(system, nic=nic),
            "hierarchical_vs_flat": hierarchical_vs_flat(system, nic=nic),
            "hierarchical_vs_flat_one_rail": hierarchical_vs_flat(
                system, islands=(2, 16), nics=1, nic=nic),
            "bubble": bubble(system, nic=nic)}


def _title(res: dict) -> str:
    nic = f", NICs {res['nic']}" if res.get("nic") else ""
    return f"Lab 02 on {res['system']}{nic}"


def report(res: dict) -> str:
    """The results as text tables."""
    t = res["tp_placement"]
    out = [_title(res),
           f"\n1. TP={t['tp']} per-layer all-reduce of "
           f"{t['allreduce_bytes'] / 2**20:.0f} MiB "
           f"(NVLink/NIC line-rate ratio {t['nvlink_over_nic']:.0f}x)",
           f"   {'':28s}{'1 island':>12s}{'2 islands':>12s}{'ratio':>8s}",
           f"   {'ring schedule, simulated':28s}"
           f"{t['sim_ring_inside_us']:10.0f}us{t['sim_ring_across_us']:10.0f}us"
           f"{t['sim_ring_ratio']:7.1f}x",
           f"   {'NCCL model (all rails)':28s}"
           f"{t['nccl_inside_us']:10.0f}us{t['nccl_across_us']:10.0f}us"
           f"{t['nccl_ratio']:7.1f}x   ({t['nccl_inside_algo']} vs "
           f"{t['nccl_across_algo']})",
           f"   iteration {t['iteration_inside_s']:.2f} s -> "
           f"{t['iteration_across_s']:.2f} s: {t['end_to_end_slowdown']:.2f}x"
           f" slower (TP communication {t['tp_comm_share_inside']:.0%} -> "
           f"{t['tp_comm_share_across']:.0%} of the step)",
           "\n2. all-reduce across NVLink islands (nodes), simulated: the "
           "textbook lock-step ring, NCCL's flat ring (a ring per rail, "
           "pipelined),\n   hierarchical and one leader per island; "
           "speedups are hierarchical's"]
    every = ("the nodes' NICs" if res.get("nic")
             else "every GPU its own NIC")
    for key, label in (("hierarchical_vs_flat", every),
                       ("hierarchical_vs_flat_one_rail", "one NIC per node")):
        out.append(f"   {label}:")
        out.append(f"   {'isl.':>5s}{'ranks':>6s}{'size':>9s}{'textbook':>10s}"
                   f"{'NCCL ring':>10s}{'hier':>9s}{'leader':>9s}"
                   f"{'vs text':>9s}{'vs NCCL':>9s}   (ms)")
        for r in res[key]:
            size = f"{r['nbytes'] / 2**20:.0f} MiB"
            out.append(f"   {r['islands']:5d}{r['ranks']:6d}{size:>9s}"
                       f"{r['textbook_ring_ms']:10.3f}{r['nccl_ring_ms']:10.3f}"
                       f"{r['hierarchical_ms']:9.3f}{r['leader_ms']:9.3f}"
                       f"{r['vs_textbook']:8.1f}x{r['vs_nccl_ring']:8.2f}x")
    out.append(f"\n3. pipeline bubble, p = {res['bubble'][0]['pp']} "
               "(bubble / useful work)")
    out.append(f"   {'m':>4s}{'model':>8s}{'(p-1)/m':>9s}{'TFLOP/s':>9s}")
    for r in res["bubble"]:
        out.append(f"   {r['m']:4d}{r['bubble_over_work']:8.2f}"
                   f"{r['formula']:9.2f}{r['tflops_per_gpu']:9.0f}")
    return "\n".join(out)


def plot(res: dict, path: str) -> None:
    """Three panels: TP placement, hierarchical vs flat, bubble."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(14, 4))
    t = res["tp_placement"]
    ax[0].bar(["ring sim\n1 island", "ring sim\n2 islands",
               "NCCL\n1 island", "NCCL\n2 islands"],
              [t["sim_ring_inside_us"], t["sim_ring_across_us"],
               t["nccl_inside_us"], t["nccl_across_us"]],
              color=["C0", "C3", "C0", "C3"])
    ax[0].set_ylabel("per-layer all-reduce (us)")
    ax[0].set_title(f"TP={t['tp']}: inside vs across islands")
    big = [r for r in res["hierarchical_vs_flat"]
           if r["nbytes"] == max(x["nbytes"] for x in
                                 res["hierarchical_vs_flat"])]
    for key, label, mark in (("textbook_ring_ms", "textbook ring", "o:"),
                             ("nccl_ring_ms", "NCCL flat ring", "o-"),
                             ("hierarchical_ms", "hierarchical", "s-"),
                             ("leader_ms", "leader", "^--")):
        ax[1].plot([r["ranks"] for r in big], [r[key] for r in big], mark,
                   label=label)
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("ranks")
    ax[1].set_ylabel(f"all-reduce of {big[0]['nbytes'] / 2**20:.0f} MiB (ms)")
    ax[1].legend()
    ax[1].set_title("across NVLink islands")
    b = res["bubble"]
    ax[2].plot([r["m"] for r in b], [r["bubble_over_work"] for r in b], "o-",
               label="model")
    ax[2].plot([r["m"] for r in b], [r["formula"] for r in b], "k--",
               label="(p-1)/m")
    ax[2].set_xscale("log", base=2)
    ax[2].set_yscale("log")
    ax[2].set_xlabel("micro-batches m")
    ax[2].set_ylabel("bubble / work")
    ax[2].legend()
    ax[2].set_title(f"pipeline bubble, p = {res['bubble'][0]['pp']}")
    fig.suptitle(_title(res))
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="dgx-h100", choices=sorted(SYSTEMS))
    ap.add_argument("--nic", metavar="SPEC", default=None,
                    help="the nodes' scale-out NICs instead of the system's: "
                         "COUNTxSPEED in Gbit/s (4x200G) or a fabric (efa-p5)")
    ap.add_argument("--json", action="store_true",
                    help="print the results as JSON instead of tables")
    ap.add_argument("--plot", metavar="PATH", default=None,
                    help="save the figure as a PNG")
    ap.add_argument("--emulated", nargs="?", const="stored",
                    choices=("stored", "live"),
                    help="the emulated cluster's measured vs modelled run: "
                         "the stored one, or live (root)")
    args = ap.parse_args(argv)
    if args.emulated:
        return emulated(args.emulated == "live")
    if args.nic is not None:
        try:
            with_nic(args.system, args.nic)
        except ValueError as e:
            ap.error(f"--nic: {e}")
    res = run(args.system, args.nic)
    print(json.dumps(res, indent=1) if args.json else report(res))
    if args.plot:
        plot(res, args.plot)
    return 0


def emulated(live: bool) -> int:
    """Show (or, live, re-measure) the emulated cluster's run."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bench = os.path.join(root, "benchmarks", "cluster.py")
    stored = os.path.join(root, "book", "data", "cluster.json")
    import subprocess
    cmd = [sys.executable, bench, "--check"] if live else \
        [sys.executable, bench, "--show", stored]
    return subprocess.run(cmd, timeout=1800).returncode


if __name__ == "__main__":
    sys.exit(main())
