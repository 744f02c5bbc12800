"""Measured vs modelled on an emulated two-tier cluster (issue 12, items 4-5;
book, Chapter 6 and Lab 02).

Usage (root: the cluster is made of network namespaces)::

    python benchmarks/cluster.py --check --json book/data/cluster.json
    python benchmarks/cluster.py --link 600mbit --sizes 64K,1M,16M
    python benchmarks/cluster.py --show book/data/cluster.json   # no root

Builds ``--nodes`` x ``--ranks-per-node`` ranks (:class:`warmup_kit.cluster.
Cluster`: shared memory inside a node, sockets through a ``tc tbf`` link
across), then

1. calibrates the fast tier (:mod:`warmup_kit.measure.cluster`) and, with
   ``--link auto``, sets the link to fast / ``--ratio`` (a real cluster's
   NVLink : NIC is 9-12x per direction);
2. calibrates both tiers, gamma, the out-of-place and closing-copy costs,
   the last-level cache's speed-up of the fast tier and a fresh output's
   first-touch cost on every rank at once, before step 3 and after each of
   its ``--rounds`` runs (the fit takes each calibration point's median);
3. runs, ``--rounds`` times, flat ring, hierarchical and two-level leader
   all-reduce over all ranks, and the TP all-reduce inside a node vs
   split across two, through ``warmup_kit.allreduce`` (each checked
   against numpy and against the schedule's bytes), and prints each
   point's median beside the model (:mod:`warmup_kit.model.emulated`).

``--fault NAME`` (:data:`warmup_kit.cluster.faults.FAULTS`) puts the last
node wrong during the experiments only: the calibrations around them see
the healthy cluster, so every row's model is what the cluster should do
and its measured time what it did (the report's ``fault`` says what was
done; the doctor, ``python -m warmup_kit.doctor REPORT``, is not told).
A fault run makes ``--rounds`` 1 by default (a flapping link's stalls
would fall out of a median over rounds). Every experiments run also times
:func:`~warmup_kit.measure.cluster_bench.node_probe` (each node's local
speed), stored as ``nodes``.

``--check`` prints its rules, each with its reason
(:data:`warmup_kit.measure.cluster_report.RULES`), and exits 1 unless every
result is right and, for messages of 1 MiB and up, within 25% of the
model, with the same winner at every size (variants within 10% of each
other tied: :func:`~warmup_kit.measure.cluster_report.same_winner`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from warmup_kit.cluster import faults
from warmup_kit.machine import cores, cpu_jiffies, llc_bytes, steal_share
from warmup_kit.measure.cluster import (MIN_POINT_S, PATTERNS, SIZES,
                                       calibrate, fit_tiers)
from warmup_kit.measure import cluster_report as R
from warmup_kit.model.emulated import Tier, TwoTier
from warmup_kit.units import human_bytes, parse_size
from warmup_kit.viz.plots import Table

DEFAULT_SIZES = "64K,256K,1M,4M,16M,64M"
#: TCP payload per byte tbf counts: 1448 of each 1514-byte Ethernet frame
#: (MTU 1500 less 20 B of IP and 32 B of TCP header with timestamps, plus
#: the 14-byte Ethernet header tbf sees)
PAYLOAD_PER_WIRE_BYTE = 1448 / 1514
HERE = Path(__file__).resolve()


# ------------------------------------------------------------- rank side
def job_comm():
    """This rank's communicator under ``python -m warmup_kit.run``."""
    from warmup_kit.comm.rendezvous import comm_from_env
    return comm_from_env()


def rank_main(args) -> None:
    comm = job_comm()
    try:
        if args.rank == "calibrate":
            pats = tuple(args.patterns.split(","))
            rows = calibrate(comm, args.nodes, args.ranks_per_node,
                             patterns=pats, reps=args.reps,
                             point_s=args.point_s,
                             sizes=calibration_sizes(args.calibrate_to))
        else:
            from warmup_kit.measure.cluster_bench import (node_probe,
                                                          run_experiments)
            shape = TwoTier(args.nodes, args.ranks_per_node, Tier(0, 1),
                            Tier(0, 1))
            rows = {"rows": run_experiments(comm, shape, sizes(args.sizes),
                                            reps=args.reps),
                    "nodes": node_probe(comm, args.nodes,
                                        args.ranks_per_node)}
        if comm.rank == 0:
            Path(args.out).write_text(json.dumps(rows))
    finally:
        comm.close()


# ----------------------------------------------------------- driver side
def sizes(text: str) -> list[int]:
    return [parse_size(s, multiple_of=8) for s in text.split(",") if s]


def calibration_sizes(largest: int) -> tuple[int, ...]:
    """The calibration's message sizes (:data:`~warmup_kit.measure.cluster.
    SIZES`) up to ``largest`` bytes."""
    return tuple(s for s in SIZES if s <= largest)


def job(cl, args, kind: str, transport: str | None = None, **extra):
    """Run the rank side of ``kind`` on every node; rank 0's rows."""
    fd, out = tempfile.mkstemp(prefix="wk-cluster-", suffix=".json")
    os.close(fd)
    argv = [str(HERE), "--rank", kind, "--out", out,
            "--nodes", str(args.nodes),
            "--ranks-per-node", str(args.ranks_per_node),
            "--reps", str(args.reps), "--point-s", str(args.point_s),
            "--calibrate-to", str(args.calibrate_to), "--sizes", args.sizes]
    for k, v in extra.items():
        argv += [f"--{k}", str(v)]
    try:
        done = cl.run_job(argv, timeout=args.timeout,
                          transport=transport or args.transport)
        bad = [d for d in done if d.returncode]
        if bad:
            raise SystemExit(f"{kind} failed on {len(bad)} node(s):\n" +
                             "\n".join((d.stderr or "")[-2000:] for d in bad))
        return json.loads(Path(out).read_text())
    finally:
        os.unlink(out)


def mbit(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:.0f}mbit"


def measure(args) -> dict:
    from warmup_kit.cluster import Cluster
    start = "1gbit" if args.link == "auto" else args.link
    load0 = R.machine_facts()["loadavg"]
    ticks0 = cpu_jiffies()
    with Cluster(nodes=args.nodes, ranks_per_node=args.ranks_per_node,
                 link=start) as cl:
        chosen = f"fixed ({args.link})"
        if args.link == "auto":
            cal = job(cl, args, "calibrate", patterns=",".join(PATTERNS))
            fast = fit_tiers(cal, args.nodes, args.ranks_per_node,
                             burst(start))[0].intra.bw_bytes_per_s
            rate = mbit(fast / args.ratio / PAYLOAD_PER_WIRE_BYTE)
            cl.set_rate(rate)
            chosen = (f"auto: fast tier {fast / 1e9:.2f} GB/s / "
                      f"{args.ratio:g}, over TCP's payload share of a frame")
        # calibrate before, between and after ``--rounds`` runs of the
        # experiments and take each point's median over them: on shared,
        # stolen cores the fast tier drifts by tens of percent within
        # minutes, and interleaving gives calibration and experiments the
        # same conditions
        pats = ",".join(PATTERNS)
        cals = [job(cl, args, "calibrate", patterns=pats)]
        runs, probes = [], []
        for _ in range(args.rounds):
            with fault_on(cl, args):
                got = job(cl, args, "experiments",
                          transport=experiments_transport(args))
            runs.append(got["rows"])
            probes.append(got["nodes"])
            cals.append(job(cl, args, "calibrate", patterns=pats))
        cal = [dict(rs[0], time_s=float(np.median([r["time_s"]
                                                   for r in rs])))
               for rs in zip(*cals)]
        measured = [dict(rs[0], measured_ms=float(np.median(
                        [r["measured_ms"] for r in rs])),
                         correct=all(r["correct"] for r in rs),
                         bytes_match=all(r["bytes_match"] for r in rs),
                         worst_ms=max(r["worst_ms"] for r in rs),
                         calls=sum(r["calls"] for r in rs),
                         spread_ms=[round(r["measured_ms"], 4) for r in rs])
                    for rs in zip(*runs)]
        nodes = [dict(ps[0], probe_ms=float(np.median([p["probe_ms"]
                                                       for p in ps])))
                 for ps in zip(*probes)]
        tt, rep = fit_tiers(cal, args.nodes, args.ranks_per_node,
                            burst(cl.link), cores(), llc_bytes() or 0)
        link = cl.link
    facts = R.machine_facts()
    facts["loadavg_before"] = load0
    facts["steal_share"] = steal_share(ticks0, cpu_jiffies())
    ours = experiments_transport(args)
    inside = "sockets (TCP)" if ours == "sockets" else "shared memory"
    launcher = f"warmup_kit.run ({args.transport})" + (
        f"; the experiments: {ours}" if ours != args.transport else "")
    doc = {"machine": facts,
           "cluster": {"nodes": args.nodes,
                       "ranks_per_node": args.ranks_per_node,
                       "link": link, "link_chosen": chosen,
                       "transports": {"inside a node": inside,
                                      "across nodes": "sockets (TCP)",
                                      "launcher": launcher},
                       "reps": args.reps, "rounds": args.rounds,
                       "point_s": args.point_s,
                       "calibrated_sizes": list(
                           calibration_sizes(args.calibrate_to)),
                       "command": "(as root) .venv/bin/python benchmarks/"
                                  "cluster.py " + (
                                      f"--fault {args.fault} --json "
                                      f"book/data/faults/{args.fault}.json"
                                      if args.fault else
                                      "--check --json "
                                      "book/data/cluster.json")},
           "tiers": {"model": tt.as_dict(), "ratio": tt.ratio,
                     "touch": [r for r in cal if r["pattern"] == "touch"],
                     "fit_rms_rel_error": rep["rms_rel_error"],
                     "fit_max_rel_error": rep["max_rel_error"],
                     "calibration": rep["rows"]},
           "nodes": nodes,
           "rows": R.merge(measured, tt)}
    if args.fault:
        doc["fault"] = {"name": args.fault, "node": args.nodes - 1,
                        "what": faults.FAULTS[args.fault],
                        "during": "the experiments (not the calibrations)"}
    return doc


def experiments_transport(args) -> str:
    """The experiments' transport: ``--transport``, or sockets for the
    sockets-in-node fault (the calibrations keep ``--transport``)."""
    return "sockets" if args.fault == "sockets-in-node" else args.transport


def fault_on(cl, args):
    """The ``--fault`` context (the last node), or a no-op."""
    last = args.nodes - 1
    if args.fault == "throttled-link":
        return faults.throttled(cl, last, mbit(rate_bytes(cl.link) / 4))
    if args.fault == "flapping-link":
        return faults.flapping(cl, last)
    if args.fault == "slow-node":
        return faults.slowed(cl, last, share=0.15)
    return contextlib.nullcontext()


def rate_bytes(rate: str) -> float:
    from warmup_kit.cluster.netns import rate_bytes as rb
    return rb(rate)


def burst(rate: str | None) -> float:
    """The token bucket depth the cluster gives a link of ``rate``."""
    if rate is None:
        return 0.0
    from warmup_kit.cluster.netns import burst_bytes
    return float(burst_bytes(rate))


def report(doc: dict) -> None:
    from warmup_kit.viz.plots_cluster import label
    print(label(doc))
    print(Table(*R.tiers_table(doc)))
    print()
    print(Table(*R.table(doc)))


def main(argv=None) -> int:
    from warmup_kit import cliargs as A
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=A.int_range(2, 64), default=2)
    p.add_argument("--ranks-per-node", type=A.int_range(1, 64), default=2)
    p.add_argument("--link", type=A.validated(A.rate, keep=("auto",)),
                   default="auto",
                   help="tc rate of each cable, or 'auto' (fast tier / "
                        "--ratio)")
    p.add_argument("--ratio", type=A.float_range(1.0, open_lo=True),
                   default=10.0,
                   help="tier ratio aimed at with --link auto (default 10)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, type=A.validated(
        A.comma_list(A.byte_size(1), name="size")))
    p.add_argument("--reps", type=A.positive_int, default=5,
                   help="timed calls per point at least (more for a fast "
                        "point; default 5)")
    p.add_argument("--point-s", type=A.float_range(0.0), default=MIN_POINT_S,
                   help="seconds of calls each calibration point fills at "
                        f"least (default {MIN_POINT_S:g}; 0: --reps calls "
                        "only, a quick and noisier fit)")
    p.add_argument("--calibrate-to", type=A.byte_size(SIZES[1]),
                   default=SIZES[-1], metavar="SIZE",
                   help="largest calibration message (default "
                        f"{human_bytes(SIZES[-1])}; of "
                        f"{', '.join(map(human_bytes, SIZES))}): a run of "
                        "small sizes needs no 32 MiB points")
    p.add_argument("--rounds", type=A.positive_int, default=None,
                   help="runs of the experiments, each followed by a "
                        "calibration; each point is the median (default 3; "
                        "1 with --fault)")
    p.add_argument("--fault", choices=tuple(faults.FAULTS),
                   help="put the last node wrong during the experiments: "
                        + "; ".join(f"{k}: {v}"
                                    for k, v in faults.FAULTS.items())
                        .replace("%", "%%"))
    p.add_argument("--transport", default="hybrid",
                   choices=("hybrid", "sockets"))
    p.add_argument("--timeout", type=A.positive_float, default=600.0)
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless within 25%% at >= 1 MiB and the "
                        "same winners")
    p.add_argument("--json", help="store the run here")
    p.add_argument("--show", help="print a stored run and exit")
    # the rank side (run by the driver through warmup_kit.run)
    p.add_argument("--rank", choices=("calibrate", "experiments"),
                   help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--patterns", default=",".join(PATTERNS),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.fault else 3
    if args.rank:
        rank_main(args)
        return 0
    if args.show:
        doc = R.load(args.show)
    else:
        from warmup_kit.cluster import ClusterUnavailable
        try:
            doc = measure(args)
        except ClusterUnavailable as exc:
            print(f"{exc}\n(the stored run: python benchmarks/cluster.py "
                  f"--show book/data/cluster.json)", file=sys.stderr)
            return 2
        R.validate(doc)
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    report(doc)
    if args.check:
        return check(doc)
    return 0


def check(doc: dict) -> int:
    """``--check`` of a run: its rules with their reasons, then each
    failure (exit 1) or the pass (exit 0)."""
    print("\ncheck:")
    for rule, why in R.RULES:
        print(f"  - {rule}\n      why: {why}")
    bad = R.failures(doc["rows"])
    for line in bad:
        print(f"CHECK FAILED: {line}")
    if bad:
        return 1
    print(f"check passed: every result right, within {R.TOLERANCE:.0%} at "
          f">= 1 MiB, same winners (within {R.TIE:.0%}: tied)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
