"""A real network partition: pull one node's cable mid-collective (book,
Chapter 8, "A real network partition"; issue 14 item 6).

Usage (root: the cluster is made of network namespaces)::

    python benchmarks/partition.py --json book/data/partition.json
    python benchmarks/partition.py --show book/data/partition.json

Two emulated nodes of two ranks (:class:`warmup_kit.cluster.Cluster`) run a
loop of all-reduces over the sockets transport, each with a ``--timeout``,
as Chapter 8's hung and killed ranks do. Once the loop runs, node 1's cable
is pulled out of the switch (:meth:`~warmup_kit.cluster.Cluster.link_down`):
no process dies and no connection is closed; packets just stop. Each rank's
wait then passes its deadline and raises
:class:`~warmup_kit.CollectiveTimeout` naming the rank its chain of waits
ends at (:mod:`warmup_kit.comm.blame`): the path that names a hung rank
names the ranks behind the partition, every rank on one side naming one on
the other.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# ------------------------------------------------------------- rank side
def rank_main(args) -> None:
    import numpy as np

    import warmup_kit as wk
    from warmup_kit.comm.rendezvous import comm_from_env, run_info
    info = run_info()
    comm = comm_from_env()
    x = np.ones(args.nbytes // 8)
    out = {"rank": comm.rank, "node": info["node_rank"], "error": None}
    step = 0
    try:
        for step in range(args.steps):
            wk.allreduce(x, comm, algorithm=args.algorithm,
                         timeout=args.timeout)
            if step == 2 and comm.rank == 0:
                Path(args.ready).write_text("running")
            time.sleep(0.02)
    except (wk.CollectiveTimeout, wk.PeerLost) as exc:
        out.update(error=type(exc).__name__, peer=exc.peer,
                   message=str(exc).splitlines()[0], step=step,
                   at=time.time())
    Path(f"{args.out}.{comm.rank}").write_text(json.dumps(out))
    os._exit(0)          # the mesh is cut: closing it would only wait


# ----------------------------------------------------------- driver side
def measure(args) -> dict:
    from warmup_kit.cluster import Cluster
    tmp = Path(tempfile.mkdtemp(prefix="wk-partition-"))
    ready, out = tmp / "ready", tmp / "rank"
    argv = [str(HERE), "--rank-side", "--ready", str(ready),
            "--out", str(out), "--algorithm", args.algorithm,
            "--timeout", str(args.timeout), "--nbytes", str(args.nbytes),
            "--steps", "100000"]
    done: list = []
    with Cluster(nodes=2, ranks_per_node=2, link=args.link) as cl:
        job = threading.Thread(target=lambda: done.append(cl.run_job(
            argv, timeout=args.timeout + 90, transport="sockets")),
            daemon=True)
        job.start()
        limit = time.monotonic() + 60
        while not ready.exists():
            if time.monotonic() > limit or not job.is_alive():
                raise SystemExit("the job did not start its loop")
            time.sleep(0.05)
        cl.link_down(1)
        t_down = time.time()
        limit = time.monotonic() + args.timeout + 60
        while not all(Path(f"{out}.{r}").exists() for r in range(4)):
            if time.monotonic() > limit:
                raise SystemExit("not every rank reported the partition")
            time.sleep(0.05)
        cl.link_up(1)        # so that the agents can end the job
        job.join(args.timeout + 120)
    ranks = []
    for r in range(4):
        o = json.loads(Path(f"{out}.{r}").read_text())
        if o.get("peer") is not None:
            o["peer_node"] = o["peer"] // 2
            o["detected_after_s"] = round(o.pop("at") - t_down, 2)
        ranks.append(o)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    from warmup_kit.measure.cluster_report import machine_facts
    return {"machine": machine_facts(),
            "cluster": {"nodes": 2, "ranks_per_node": 2, "link": args.link,
                        "transport": "sockets", "pulled": "node1"},
            "algorithm": args.algorithm, "timeout_s": args.timeout,
            "nbytes": args.nbytes, "ranks": ranks,
            "command": "(as root) .venv/bin/python benchmarks/partition.py "
                       "--json book/data/partition.json"}


def named_across(doc: dict) -> bool:
    """Every rank raised, naming a rank on the other side of the cut."""
    return all(r["error"] == "CollectiveTimeout" and r.get("peer_node")
               is not None and r["peer_node"] != r["node"]
               for r in doc["ranks"])


def report(doc: dict) -> str:
    lines = [f"node1's cable pulled mid-loop ({doc['algorithm']} all-reduce "
             f"of {doc['nbytes']} B, timeout {doc['timeout_s']:g} s, link "
             f"{doc['cluster']['link']}):"]
    for r in doc["ranks"]:
        lines.append(f"  rank {r['rank']} (node{r['node']}): {r['error']}, "
                     f"names rank {r.get('peer')} (node{r.get('peer_node')})"
                     f" after {r.get('detected_after_s')} s: "
                     f"{r.get('message')}")
    lines.append("every rank names one across the cut" if named_across(doc)
                 else "NOT every rank named a rank across the cut")
    return "\n".join(lines)


def main(argv=None) -> int:
    from warmup_kit import cliargs
    from warmup_kit.algorithms import algorithms_for
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algorithm", default="ring",
                   choices=algorithms_for("allreduce"))
    p.add_argument("--timeout", type=cliargs.positive_float, default=3.0)
    p.add_argument("--nbytes", type=cliargs.byte_size(8), default=1 << 20)
    p.add_argument("--link", type=cliargs.rate, default="1gbit")
    p.add_argument("--json", help="store the run here")
    p.add_argument("--show", help="print a stored run and exit")
    p.add_argument("--rank-side", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ready", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=cliargs.positive_int, default=100000,
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank_side:
        rank_main(args)
        return 0
    if args.show:
        doc = json.loads(Path(args.show).read_text())
    else:
        from warmup_kit.cluster import ClusterUnavailable
        try:
            doc = measure(args)
        except ClusterUnavailable as exc:
            print(exc, file=sys.stderr)
            return 2
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(report(doc))
    return 0 if named_across(doc) else 1


if __name__ == "__main__":
    sys.exit(main())
