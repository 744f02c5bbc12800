"""The Linux calls behind the emulated cluster: namespaces, veth, bridge, tbf.

Every object lives inside a network namespace this package creates: a
"switch" namespace holding a bridge, and one namespace per node holding
``lo`` and the node's end of a veth pair (``eth0``). Nothing is added to the
machine's own namespace, and no address exists outside ours, so deleting
the namespaces removes everything and no packet can leave the machine.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Sequence

from warmup_kit.units import parse_rate

#: commands the cluster needs on PATH
TOOLS = ("ip", "tc", "unshare")
_CAP_SYS_ADMIN, _CAP_NET_ADMIN = 21, 12


class ClusterUnavailable(RuntimeError):
    """This machine (or this user) cannot build the emulated cluster; the
    message says why."""


def why_unavailable() -> str | None:
    """None if namespaces can be made here, else the reason in words."""
    if not os.path.isdir("/proc/self/ns") or not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return (f"{', '.join(missing)} not found: install iproute2 and "
                "util-linux (apt-get install iproute2 util-linux)")
    caps = _effective_caps()
    need = {_CAP_NET_ADMIN: "CAP_NET_ADMIN", _CAP_SYS_ADMIN: "CAP_SYS_ADMIN"}
    lacking = [name for bit, name in need.items() if not caps >> bit & 1]
    if lacking:
        return (f"needs root ({' and '.join(lacking)} missing: running as "
                f"uid {os.geteuid()}); run it with sudo, or read the stored "
                "run")
    return None


def _effective_caps() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return (1 << 40) - 1 if os.geteuid() == 0 else 0


def rate_bytes(rate: str) -> float:
    """A tc rate string ('1gbit', '100mbit', '125mbps') in bytes per second
    (:func:`warmup_kit.units.parse_rate`).

    Raises:
        ValueError: not a rate tc understands in these units, or outside
            1kbit..1tbit.
    """
    return parse_rate(rate)


def burst_bytes(rate: str) -> int:
    """The token bucket's depth: 2 ms at the rate, at least 64 KiB (one GSO
    packet on a veth must fit, or tbf drops it)."""
    return max(int(rate_bytes(rate) * 2e-3), 64 << 10)


def sh(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0
       ) -> subprocess.CompletedProcess:
    """Run a command, capture its output; on failure raise with stderr."""
    done = subprocess.run(list(argv), capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, list(argv),
                                            done.stdout, done.stderr)
    return done


def in_ns(ns: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside network namespace ``ns``."""
    return ["ip", "netns", "exec", ns, *argv]


def netns_list() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    out = sh(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def add_netns(ns: str) -> None:
    sh(["ip", "netns", "add", ns])
    sh(in_ns(ns, ["ip", "link", "set", "lo", "up"]))
    # TCP restarts slow start on a connection idle for one RTO (Linux's
    # default): every collective after a pause would then ramp up again
    # on the slow tier. RDMA fabrics have no such ramp, so neither do we.
    sh(in_ns(ns, ["sh", "-c", "echo 0 > "
                  "/proc/sys/net/ipv4/tcp_slow_start_after_idle"]))


def add_bridge(ns: str, name: str = "br0") -> None:
    sh(in_ns(ns, ["ip", "link", "add", name, "type", "bridge"]))
    sh(in_ns(ns, ["ip", "link", "set", name, "up"]))


def add_uplink(switch_ns: str, port: str, node_ns: str, address: str,
               prefix_len: int, bridge: str = "br0", iface: str = "eth0"
               ) -> None:
    """A veth pair made directly in its two namespaces (never in the host's
    own): ``port`` on the switch's bridge, ``iface`` in the node with
    ``address``."""
    sh(["ip", "link", "add", port, "netns", switch_ns, "type", "veth",
        "peer", "name", iface, "netns", node_ns])
    sh(in_ns(switch_ns, ["ip", "link", "set", port, "master", bridge]))
    sh(in_ns(switch_ns, ["ip", "link", "set", port, "up"]))
    sh(in_ns(node_ns, ["ip", "addr", "add", f"{address}/{prefix_len}",
                       "dev", iface]))
    sh(in_ns(node_ns, ["ip", "link", "set", iface, "up"]))


def set_link(ns: str, dev: str, up: bool) -> None:
    sh(in_ns(ns, ["ip", "link", "set", dev, "up" if up else "down"]))


def set_tbf(ns: str, dev: str, rate: str | None) -> None:
    """Shape ``dev``'s egress to ``rate`` with a token bucket (tbf); None
    removes the shaping."""
    if rate is None:
        sh(in_ns(ns, ["tc", "qdisc", "del", "dev", dev, "root"]),
           check=False)
        return
    rate_bytes(rate)
    sh(in_ns(ns, ["tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                  "rate", rate, "burst", str(burst_bytes(rate)),
                  "latency", "100ms"]))


def ns_pids(ns: str) -> list[int]:
    out = sh(["ip", "netns", "pids", ns], check=False).stdout
    return [int(x) for x in out.split() if x.isdigit()]


def delete_netns(ns: str) -> None:
    """Kill what still runs in ``ns``, then delete it (its links go too)."""
    for pid in ns_pids(ns):
        try:
            os.kill(pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    sh(["ip", "netns", "delete", ns], check=False)
