"""Faults an emulated cluster can be given while a job runs (book,
Chapter 5's doctor; ``benchmarks/cluster.py --fault``).

Each is a context manager on a :class:`~warmup_kit.cluster.Cluster` that
puts one node wrong on entry and puts it right on exit, what ever
happened inside:

* :func:`throttled`: the node's cable shaped to a lower rate, both ways
  (a NIC that trained down to a lower speed, a congested port);
* :func:`flapping`: the node's switch port taken down and brought back up
  again and again (a loose cable or a flapping link): TCP keeps the
  connections and retransmits once the port is back, so calls that were
  sending stall for a retransmission timeout or more;
* :func:`slowed`: the node's processes held to a share of one CPU by the
  kernel's CPU controller (a node thermally throttled, or sharing its
  cores with something else).

The fourth fault of the book, sockets instead of shared memory inside a
node, is a choice of transport (``run_job(..., transport="sockets")``),
not a change to a running node.
"""
from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from warmup_kit.cluster import netns
from warmup_kit.cluster.core import NODE_IFACE
from warmup_kit.cluster.netns import ClusterUnavailable

#: what each fault of ``benchmarks/cluster.py --fault`` does
FAULTS = {
    "throttled-link": "one node's cable at a quarter of the link rate",
    "flapping-link": "one node's switch port down 1 s in every 4 s",
    "slow-node": "one node's processes held to 15% of one CPU",
    "sockets-in-node": "sockets (TCP over loopback) instead of shared "
                       "memory between the ranks of a node",
}


@contextlib.contextmanager
def _in_background(work, name: str):
    """``work(stop)`` on a daemon thread while the block runs; on exit
    ``stop`` is set and the thread joined (30 s at most)."""
    stop = threading.Event()
    t = threading.Thread(target=work, args=(stop,), name=name, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=30)


@contextlib.contextmanager
def throttled(cl, node, rate: str):
    """``node``'s cable at ``rate`` (a tc rate) both ways, then back at
    the cluster's own rate."""
    n = cl.node(node)
    netns.rate_bytes(rate)
    try:
        netns.set_tbf(cl.switch, n.port, rate)
        netns.set_tbf(n.netns, NODE_IFACE, rate)
        yield
    finally:
        netns.set_tbf(cl.switch, n.port, cl.link)
        netns.set_tbf(n.netns, NODE_IFACE, cl.link)


@contextlib.contextmanager
def flapping(cl, node, down_s: float = 1.0, up_s: float = 3.0,
             first_s: float = 4.0):
    """``node``'s port goes down for ``down_s`` every ``up_s + down_s``
    seconds, the first time ``first_s`` after entry (the job's rendezvous
    has connected by then); up again on exit."""
    if not (down_s > 0 and up_s > 0 and first_s >= 0):
        raise ValueError("down_s and up_s must be > 0, first_s >= 0")

    def flap(stop: threading.Event) -> None:
        if stop.wait(first_s):
            return
        while True:
            cl.link_down(node)
            try:
                if stop.wait(down_s):
                    return
            finally:
                cl.link_up(node)
            if stop.wait(up_s):
                return

    try:
        with _in_background(flap, "flapping-link"):
            yield
    finally:
        cl.link_up(node)


def _cpu_group(name: str) -> tuple[Path, str, str]:
    """A new CPU cgroup: (its folder, the limit file, the parent's procs
    file). cgroup v2 where the cpu controller is on it, else v1's cpu."""
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        ctl = root / "cgroup.controllers"
        if ctl.is_file() and "cpu" in ctl.read_text().split():
            sub = root / "cgroup.subtree_control"
            if "cpu" not in sub.read_text().split():
                sub.write_text("+cpu")
            return root / name, "cpu.max", str(root / "cgroup.procs")
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").is_file():
        return v1 / name, "cpu.cfs_quota_us", str(v1 / "cgroup.procs")
    raise ClusterUnavailable("no CPU cgroup controller (neither cgroup v2's "
                             "cpu.max nor v1's cpu.cfs_quota_us)")


@contextlib.contextmanager
def slowed(cl, node, share: float = 0.15, period_us: int = 100_000,
           every_s: float = 0.05):
    """``node``'s processes, and those it starts, held to ``share`` of one
    CPU; freed on exit. A thread moves every process of the node's
    namespace into the group every ``every_s`` (a job's ranks start after
    entry); their children start inside it."""
    if not 0 < share <= 64:
        raise ValueError(f"share must be in (0, 64], got {share!r}")
    n = cl.node(node)
    where, limit, parent = _cpu_group(f"{cl.prefix}-{n.name}-slow")
    try:
        where.mkdir()
        quota = max(1000, int(share * period_us))
        if limit == "cpu.max":
            (where / "cpu.max").write_text(f"{quota} {period_us}")
        else:
            (where / "cpu.cfs_period_us").write_text(str(period_us))
            (where / "cpu.cfs_quota_us").write_text(str(quota))
    except OSError as exc:
        with contextlib.suppress(OSError):
            where.rmdir()
        raise ClusterUnavailable(f"cannot make the CPU cgroup {where}: "
                                 f"{exc}") from None
    procs = where / "cgroup.procs"

    def hold(stop: threading.Event) -> None:
        while True:
            for pid in netns.ns_pids(n.netns):
                with contextlib.suppress(OSError):
                    procs.write_text(str(pid))
            if stop.wait(every_s):
                return

    try:
        with _in_background(hold, "slow-node"):
            yield
    finally:
        for pid in procs.read_text().split():
            with contextlib.suppress(OSError):
                Path(parent).write_text(pid)
        with contextlib.suppress(OSError):
            os.rmdir(where)


__all__ = ["FAULTS", "flapping", "slowed", "throttled"]
