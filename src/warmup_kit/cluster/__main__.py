"""``python -m warmup_kit.cluster up|down|status|exec``: the emulated cluster
from a shell (root).

    python -m warmup_kit.cluster up --nodes 2 --ranks-per-node 2 --link 1gbit
    python -m warmup_kit.cluster exec node1 -- hostname
    python -m warmup_kit.cluster status
    python -m warmup_kit.cluster down

``up`` builds the cluster, records it, prints its nodes and exits, leaving
it up for ``exec`` (which also sets hydra's launcher, hostfile and
interface, so ``mpirun -n 4 python labs/lab01.py`` on node 0 spans the
nodes: :mod:`warmup_kit.cluster.mpi`); with ``--hold`` it stays in the
foreground until Ctrl-C or SIGTERM and then removes it. If ``up`` is
stopped while building, it removes what it made; if it is killed
(SIGKILL), ``down`` removes the rest. ``down`` removes every cluster of ours
whose owner is gone (``--all``: every one, held or not).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from warmup_kit.cluster import janitor
from warmup_kit.cluster.core import Cluster, Node
from warmup_kit.cluster.mpi import mpi_env, write_hostfile
from warmup_kit.cluster.netns import ClusterUnavailable


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m warmup_kit.cluster",
        description="An emulated cluster on one machine: network namespaces "
                    "joined by rate-limited veth links (needs root).")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build a cluster")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--ranks-per-node", type=int, default=1)
    up.add_argument("--link", default="1gbit",
                    help="tc rate of every cable, e.g. 1gbit, 200mbit; "
                         "'none' for unshaped")
    up.add_argument("--hostfile", default=None,
                    help="also write an MPI hostfile here (e.g. hosts)")
    up.add_argument("--hold", action="store_true",
                    help="stay in the foreground; Ctrl-C removes it")
    down = sub.add_parser("down", help="remove clusters whose owner is gone")
    down.add_argument("--all", action="store_true",
                      help="also clusters whose owner still runs")
    sub.add_parser("status", help="list our clusters")
    ex = sub.add_parser("exec", help="run a command on a node of the "
                                     "(only, or --prefix) cluster")
    ex.add_argument("node", help="node name, e.g. node1")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    ex.add_argument("--prefix", help="which cluster (see status)")
    return p.parse_args(argv)


def _pick(prefix: str | None) -> dict:
    found = janitor.entries()
    if prefix:
        if prefix not in found:
            raise SystemExit(f"no cluster {prefix}: see `status`")
        return found[prefix]
    # the one left up by `up`, if there is one; else the only one
    left = {p: i for p, i in found.items() if i.get("detached")} or found
    if len(left) != 1:
        raise SystemExit(f"{len(left)} clusters are up; name one with "
                         f"--prefix ({', '.join(left) or 'none'})")
    return next(iter(left.values()))


def _attach(info: dict) -> Cluster:
    """A Cluster object for a registered one (to run commands on it)."""
    cl = Cluster.__new__(Cluster)
    cl.prefix, cl.switch = info["prefix"], info["switch"]
    cl.link, cl.ranks_per_node = info["link"], info["ranks_per_node"]
    cl.nodes = [Node(**n) for n in info["nodes"]]
    cl.detached, cl._up, cl._procs, cl._old_handlers = True, True, [], {}
    cl.prefix_len = 24
    return cl


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    try:
        if args.cmd == "up":
            link = None if args.link.lower() == "none" else args.link
            cl = Cluster(args.nodes, args.ranks_per_node, link)
            cl.detached = not args.hold
            cl.start()
            janitor.record(cl.prefix, cl.info())
            print(f"cluster {cl.prefix}: {len(cl.nodes)} nodes x "
                  f"{cl.ranks_per_node} ranks, link "
                  f"{cl.link or 'unshaped'} (tbf, both directions)")
            for n in cl.nodes:
                print(f"  {n.name:<7} netns {n.netns:<22} {n.address}")
            if args.hostfile:
                write_hostfile(cl.info(), Path(args.hostfile))
                print(f"MPI hostfile: {args.hostfile}; on node 0 (python -m "
                      "warmup_kit.cluster exec node0 -- bash): mpirun "
                      f"-hostfile {args.hostfile} -n "
                      f"{len(cl.nodes) * cl.ranks_per_node} python "
                      "labs/lab01.py")
            if not args.hold:
                print("remove it with: python -m warmup_kit.cluster down")
                return 0
            print("holding; Ctrl-C removes it", flush=True)
            try:
                while True:
                    time.sleep(3600)
            finally:
                cl.detached = False
                cl.close()
                print(f"cluster {cl.prefix} removed")
        if args.cmd == "down":
            gone = janitor.sweep(force=args.all)
            if not gone:
                print("nothing to remove")
            for prefix, spaces in gone.items():
                print(f"removed {prefix}: {len(spaces)} namespaces"
                      + (f" ({', '.join(spaces)})" if spaces else ""))
            return 0
        if args.cmd == "status":
            found = janitor.entries()
            if not found:
                print("no clusters")
            for prefix, info in found.items():
                live = janitor.ours(prefix)
                held = ("left up by `up`" if info.get("detached") else
                        f"held by pid {info.get('pid')}"
                        + ("" if janitor.alive(int(info.get("pid") or 0))
                           else " (gone)"))
                print(f"{prefix}: {len(info.get('nodes', []))} nodes, link "
                      f"{info.get('link') or 'unshaped'}, {held}, "
                      f"{len(live)} namespaces")
                for n in info.get("nodes", []):
                    print(f"  {n['name']:<7} {n['address']}")
            return 0
        if args.cmd == "exec":
            cl = _attach(_pick(args.prefix))
            argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not argv:
                raise SystemExit("exec: give a command after the node")
            # hydra's launcher, hostfile and interface: a plain mpirun on
            # node 0 spans the cluster
            env = dict(os.environ, **mpi_env(cl.info()))
            return subprocess.call(cl.command(args.node, argv), env=env)
    except ClusterUnavailable as exc:
        print(f"cluster unavailable: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
