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
stopped (Ctrl-C, SIGTERM) or fails while building, it removes what it made
before it exits; if it is killed (SIGKILL), ``down`` removes the rest.
``down`` removes every cluster of ours whose owner is gone (``--all``:
every one, held or not; ``--prefix``: that one only). It never removes a
cluster ``up`` is still building: it waits for the build (``--wait``
seconds, 120 by default), then refuses, naming it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from warmup_kit import cliargs
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
    up.add_argument("--nodes", type=cliargs.int_range(1, 64), default=2)
    up.add_argument("--ranks-per-node", type=cliargs.int_range(1, 256),
                    default=1)
    up.add_argument("--link", type=cliargs.rate_or_none, default="1gbit",
                    help="tc rate of every cable, 1kbit..1tbit, e.g. 1gbit, "
                         "200mbit; 'none' for unshaped")
    up.add_argument("--hostfile", default=None,
                    help="also write an MPI hostfile here (e.g. hosts)")
    up.add_argument("--hold", action="store_true",
                    help="stay in the foreground; Ctrl-C removes it")
    down = sub.add_parser("down", help="remove clusters whose owner is gone")
    down.add_argument("--all", action="store_true",
                      help="also clusters whose owner still runs")
    down.add_argument("--prefix", help="only this cluster (see status)")
    down.add_argument("--wait", type=cliargs.non_negative_float,
                      default=120.0,
                      help="seconds to wait for a cluster `up` is still "
                           "building before refusing to remove it")
    sub.add_parser("status", help="list our clusters")
    ex = sub.add_parser("exec", help="run a command on a node of the "
                                     "(only, or --prefix) cluster")
    ex.add_argument("node", help="node name, e.g. node1")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    ex.add_argument("--prefix", help="which cluster (see status)")
    args = p.parse_args(argv)
    if args.cmd == "up" and args.hostfile:
        parent = Path(args.hostfile).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            p.error(f"--hostfile {args.hostfile}: cannot write in {parent}")
    if args.cmd == "exec":
        args.argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not args.argv:
            p.error("exec: give a command after the node")
    args.parser = p
    return args


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
    cl._closing = cl._building = False
    cl.prefix_len = 24
    return cl


def _wait_for_builds(only: str | None, wait: float) -> list[str]:
    """Wait up to ``wait`` s while `up` still builds clusters (all, or
    ``only``); returns those still being built at the end."""
    deadline = time.monotonic() + wait
    while True:
        busy = [p for p, i in janitor.entries().items()
                if (only is None or p == only) and janitor.building(p, i)]
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _up(args) -> int:
    cl = Cluster(args.nodes, args.ranks_per_node, args.link)
    # held or not, it is ours to remove until start() hands it over
    try:
        cl.start(detach=not args.hold)
    except KeyboardInterrupt:
        print(f"stopped while building: cluster {cl.prefix} removed",
              file=sys.stderr)
        raise
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
        cl.close()
        print(f"cluster {cl.prefix} removed")


def _down(args) -> int:
    if args.prefix and args.prefix not in janitor.entries() \
            and args.prefix not in janitor.unregistered():
        print(f"no cluster {args.prefix}: see `status`", file=sys.stderr)
        return 1
    busy = _wait_for_builds(args.prefix, args.wait)
    gone = janitor.sweep(force=args.all, only=args.prefix)
    if not gone and not busy:
        print("nothing to remove")
    for prefix, spaces in gone.items():
        print(f"removed {prefix}: {len(spaces)} namespaces"
              + (f" ({', '.join(spaces)})" if spaces else ""))
    for prefix in busy:
        pid = janitor.entries().get(prefix, {}).get("pid")
        print(f"not removing {prefix}: `up` (pid {pid}) is still building "
              f"it after {args.wait:g} s; run down again once it returns",
              file=sys.stderr)
    return 1 if busy else 0


def _status() -> int:
    found, stray = janitor.entries(), janitor.unregistered()
    if not found and not stray:
        print("no clusters")
    for prefix, info in found.items():
        live = janitor.ours(prefix)
        held = ("being built by pid {}".format(info.get("pid"))
                if janitor.building(prefix, info) else
                "left up by `up`" if info.get("detached") else
                f"held by pid {info.get('pid')}"
                + ("" if janitor.alive(int(info.get("pid") or 0))
                   else " (gone)"))
        print(f"{prefix}: {len(info.get('nodes', []))} nodes, link "
              f"{info.get('link') or 'unshaped'}, {held}, "
              f"{len(live)} namespaces")
        for n in info.get("nodes", []):
            print(f"  {n['name']:<7} {n['address']}")
    for prefix, spaces in stray.items():
        print(f"{prefix}: not registered, {len(spaces)} namespaces "
              "(`down` removes them once their creator is gone)")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    try:
        if args.cmd == "up":
            return _up(args)
        if args.cmd == "down":
            return _down(args)
        if args.cmd == "status":
            return _status()
        if args.cmd == "exec":
            try:
                cl = _attach(_pick(args.prefix))
                cl.node(args.node)
            except ValueError as exc:
                args.parser.error(str(exc))
            # hydra's launcher, hostfile and interface: a plain mpirun on
            # node 0 spans the cluster
            env = dict(os.environ, **mpi_env(cl.info()))
            return subprocess.call(cl.command(args.node, args.argv), env=env)
    except ClusterUnavailable as exc:
        print(f"cluster unavailable: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0

if __name__ == "__main__":
    sys.exit(main())
