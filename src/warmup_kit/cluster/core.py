"""The emulated cluster: N nodes, one switch, a token bucket on every cable.

::

    with Cluster(nodes=2, ranks_per_node=2, link="1gbit") as cl:
        cl.run_job(["labs/lab01.py", "--size", "1M"], timeout=300)

Each node is a network namespace with ``lo`` and an ``eth0`` at
``10.77.0.<i+1>/24``; a "switch" namespace holds a bridge with one veth
port per node. The ranks of one node talk over ``lo`` or shared memory
(the fast tier, as NVLink inside a server); nodes talk through the bridge,
and both ends of every cable are shaped by ``tc tbf`` at ``link`` (the
slow tier, as the NIC and the fabric). Every process started on a node
also gets its own UTS namespace with the node's host name, so a launcher
that groups ranks by host name (MPICH) sees separate hosts.

Everything is removed when the block ends, on an exception, on Ctrl-C and
on SIGTERM; after a SIGKILL, ``python -m warmup_kit.cluster down`` removes
the leftovers (:mod:`warmup_kit.cluster.janitor`).
"""
from __future__ import annotations

import atexit
import ipaddress
import itertools
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from warmup_kit.cluster import janitor, netns
from warmup_kit.cluster.netns import ClusterUnavailable

_COUNTER = itertools.count()
SWITCH_BRIDGE = "br0"
NODE_IFACE = "eth0"


@dataclass(frozen=True)
class Node:
    """One emulated host: its name (also its host name), its network
    namespace and its address on the cluster's network."""

    name: str
    netns: str
    address: str
    index: int = 0
    port: str = ""          # its cable's end on the switch


class Cluster:
    """An emulated cluster of ``nodes`` hosts (see the module docstring).

    Args:
        nodes: number of nodes (1..64).
        ranks_per_node: ranks :meth:`run_job` and :meth:`mpirun` start on
            each node.
        link: the cables' rate, a tc rate string ('1gbit', '200mbit'), or
            None for unshaped veth links.
        subnet: the cluster's network (only inside its namespaces).

    Raises:
        ClusterUnavailable: not root (no CAP_NET_ADMIN/CAP_SYS_ADMIN), or
            ``ip``/``tc``/``unshare`` missing, or the kernel refused a
            namespace, veth, bridge or tbf; the message says which.
    """

    def __init__(self, nodes: int = 2, ranks_per_node: int = 1,
                 link: str | None = "1gbit", *,
                 subnet: str = "10.77.0.0/24") -> None:
        if not isinstance(nodes, int) or isinstance(nodes, bool) \
                or not 1 <= nodes <= 64:
            raise ValueError(f"nodes must be an int in [1, 64], got {nodes!r}")
        if not isinstance(ranks_per_node, int) or ranks_per_node < 1:
            raise ValueError(f"ranks_per_node must be an int >= 1, got "
                             f"{ranks_per_node!r}")
        if link is not None:
            netns.rate_bytes(link)
        net = ipaddress.ip_network(subnet)
        if net.num_addresses < nodes + 2:
            raise ValueError(f"subnet {subnet} too small for {nodes} nodes")
        self.ranks_per_node = ranks_per_node
        self.link = link
        self.prefix = f"wkc{os.getpid()}-{next(_COUNTER)}"
        self.switch = f"{self.prefix}-switch"
        hosts = list(itertools.islice(net.hosts(), nodes))
        self.prefix_len = net.prefixlen
        self.nodes = [Node(f"node{i}", f"{self.prefix}-node{i}", str(a), i,
                           f"n{i}") for i, a in enumerate(hosts)]
        self._procs: list[subprocess.Popen] = []
        self._up = False
        self._old_handlers: dict = {}
        self._closing = False
        self._building = False
        self.detached = False

    # ------------------------------------------------------------ lifetime
    def info(self) -> dict:
        """What the registry stores about this cluster."""
        return {"prefix": self.prefix, "pid": os.getpid(),
                "detached": self.detached, "building": self._building,
                "link": self.link,
                "ranks_per_node": self.ranks_per_node,
                "switch": self.switch, "created": time.time(),
                "nodes": [n.__dict__ for n in self.nodes]}

    def start(self, *, detach: bool = False) -> "Cluster":
        """Build it (what ``with`` does); returns self.

        Until it is built its registry entry says "building", so ``down``
        leaves it alone (or waits for it); on any failure, Ctrl-C or
        SIGTERM before then, everything made so far is removed. With
        ``detach`` it is handed over once built: left up, for ``down`` to
        remove (what ``python -m warmup_kit.cluster up`` does).
        """
        why = netns.why_unavailable()
        if why:
            raise ClusterUnavailable(f"the emulated cluster {why}")
        janitor.sweep(detached=False)    # leftovers of dead runs only
        janitor.remove(self.prefix)      # a dead run's, if our pid is reused
        self._building, detach = True, detach or self.detached
        self.detached = False            # not handed over until built
        janitor.record(self.prefix, self.info())
        atexit.register(self.close)
        self._catch_signals()
        try:
            netns.add_netns(self.switch)
            netns.add_bridge(self.switch, SWITCH_BRIDGE)
            for n in self.nodes:
                netns.add_netns(n.netns)
                netns.add_uplink(self.switch, n.port, n.netns, n.address,
                                 self.prefix_len, SWITCH_BRIDGE, NODE_IFACE)
            self._up = True
            self.set_rate(self.link)
            self._building, self.detached = False, detach
            janitor.record(self.prefix, self.info())     # handed over
        except subprocess.CalledProcessError as exc:
            self._abandon()
            raise ClusterUnavailable(
                f"the kernel refused `{' '.join(exc.cmd)}`: "
                f"{(exc.stderr or '').strip()}") from None
        except BaseException:
            self._abandon()
            raise
        return self

    def _abandon(self) -> None:
        """A build that did not finish: remove all of it, whatever
        ``detached`` said."""
        self._closing = True             # no signal interrupts this
        self._building = self.detached = False
        self.close()

    def close(self) -> None:
        """Stop what still runs on the nodes and remove every namespace (and
        with them every link) of this cluster. Idempotent; Ctrl-C and
        SIGTERM cannot interrupt it."""
        self._closing = True
        try:
            self._close()
        finally:
            self._closing = False
            self._restore_signals()

    def _close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        if not self.detached:
            janitor.remove(self.prefix)
        self._up = False
        atexit.unregister(self.close)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _catch_signals(self) -> None:
        """SIGTERM and SIGHUP end the main thread as Ctrl-C does, so the
        ``with`` block unwinds and cleans up (none of them interrupts the
        clean-up itself)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum, frame):
            if self._closing:
                return
            if self._building:           # a second signal must not cut
                self._closing = True     # the removal of the first short
            raise KeyboardInterrupt(f"signal {signum}")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, stop)

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, TypeError):
                pass
        self._old_handlers.clear()

    # ------------------------------------------------------------ the nodes
    def node(self, which: "Node | int | str") -> Node:
        """A node by Node, index or name."""
        if isinstance(which, Node):
            return which
        for n in self.nodes:
            if which in (n.index, n.name, n.netns, n.address):
                return n
        raise ValueError(f"no node {which!r} in this cluster "
                         f"({[n.name for n in self.nodes]})")

    def command(self, node: "Node | int | str", argv: Sequence[str]
                ) -> list[str]:
        """The command line that runs ``argv`` on ``node``: in its network
        namespace and a UTS namespace of its own carrying its host name."""
        n = self.node(node)
        return netns.in_ns(n.netns, [
            "unshare", "--uts", "--", "sh", "-c",
            'hostname "$0" && exec "$@"', n.name, *map(str, argv)])

    def popen(self, node: "Node | int | str", argv: Sequence[str],
              env: dict | None = None, **kw) -> subprocess.Popen:
        """Start ``argv`` on ``node``; ``env`` adds to this process's
        environment. The process gets its own session, and is killed if
        still running when the cluster closes."""
        if not self._up:
            raise RuntimeError("the cluster is not up (use `with Cluster()`)")
        full = dict(os.environ, **(env or {}))
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(self.command(node, argv), env=full, **kw)
        self._procs.append(p)
        return p

    def wait_all(self, procs: Sequence[subprocess.Popen], argvs, timeout: float
                 ) -> list[subprocess.CompletedProcess]:
        """Wait for every process (a shared deadline), killing them all past
        it; returns their CompletedProcess in order."""
        deadline = time.monotonic() + timeout
        outs = [None] * len(procs)

        def reap(i, p):
            try:
                outs[i] = p.communicate(timeout=max(
                    0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill(p)
                outs[i] = p.communicate()
        threads = [threading.Thread(target=reap, args=(i, p), daemon=True)
                   for i, p in enumerate(procs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        timed_out = time.monotonic() > deadline
        done = [subprocess.CompletedProcess(a, p.returncode, *o)
                for a, p, o in zip(argvs, procs, outs)]
        if timed_out:
            for d in done:
                d.timed_out = True
        return done

    # ------------------------------------------------------------- the links
    def link_down(self, node: "Node | int | str") -> None:
        """Pull ``node``'s cable out of the switch (its port goes down)."""
        netns.set_link(self.switch, self.node(node).port, False)

    def link_up(self, node: "Node | int | str") -> None:
        """Plug it back in."""
        netns.set_link(self.switch, self.node(node).port, True)

    def set_rate(self, rate: str | None) -> None:
        """Shape every cable, both directions, to ``rate`` (None: unshaped)."""
        if rate is not None:
            netns.rate_bytes(rate)
        for n in self.nodes:
            netns.set_tbf(self.switch, n.port, rate)
            netns.set_tbf(n.netns, NODE_IFACE, rate)
        self.link = rate

    # ------------------------------------------------------------- the jobs
    def run_job(self, argv: Sequence[str], *, timeout: float = 300.0,
                transport: str = "hybrid", port: int = 29400,
                env: dict | None = None
                ) -> list[subprocess.CompletedProcess]:
        """Run ``python -m warmup_kit.run ... argv`` on every node (a
        script and its arguments), ``ranks_per_node`` ranks each, node 0 the
        rendezvous master; output captured, per node in order."""
        from warmup_kit.cluster.jobs import run_job
        return run_job(self, argv, timeout=timeout, transport=transport,
                       port=port, env=env)

    def mpirun(self, argv: Sequence[str], *, timeout: float = 300.0,
               env: dict | None = None) -> subprocess.CompletedProcess:
        """``mpirun -hostfile hosts -n N argv`` across the nodes (see
        :mod:`warmup_kit.cluster.mpi`)."""
        from warmup_kit.cluster.mpi import mpirun
        return mpirun(self, argv, timeout=timeout, env=env)


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()


__all__ = ["Cluster", "ClusterUnavailable", "Node"]
