"""The emulated cluster's faults (warmup_kit.cluster.faults) put one node
wrong while they are held and put it right afterwards, even when the body
raises. Live: root, ip and tc (skipped with the reason otherwise)."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import PYTHON
from warmup_kit.cluster import Cluster, faults, netns
from warmup_kit.cluster.core import NODE_IFACE
from warmup_kit.cluster import why_unavailable

WHY = why_unavailable()
needs_root = pytest.mark.skipif(WHY is not None, reason=f"cluster: {WHY}")


def qdisc(ns: str, dev: str) -> str:
    return subprocess.run(netns.in_ns(ns, ["tc", "qdisc", "show", "dev", dev]),
                          capture_output=True, text=True, timeout=30).stdout


def port_up(cl, node) -> bool:
    out = subprocess.run(netns.in_ns(cl.switch, ["ip", "-o", "link", "show",
                                                 cl.node(node).port]),
                         capture_output=True, text=True, timeout=30).stdout
    return ",UP" in out or "<UP" in out


def test_every_fault_says_what_it_does():
    assert set(faults.FAULTS) == {"throttled-link", "flapping-link",
                                  "slow-node", "sockets-in-node"}
    assert all(len(v) > 20 for v in faults.FAULTS.values())


@pytest.mark.parametrize("kw", [dict(down_s=0), dict(up_s=-1),
                                dict(first_s=-1)])
def test_flapping_refuses_bad_timings(kw):
    with pytest.raises(ValueError, match="down_s and up_s"):
        with faults.flapping(None, 0, **kw):
            pass


def test_slowed_refuses_a_bad_share():
    with pytest.raises(ValueError, match="share"):
        with faults.slowed(None, 0, share=0):
            pass


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_throttled_shapes_one_node_both_ways_and_puts_it_back():
    with Cluster(nodes=2, link="200mbit") as cl:
        n1, n0 = cl.node(1), cl.node(0)
        with pytest.raises(KeyError):
            with faults.throttled(cl, 1, "50mbit"):
                assert "rate 50Mbit" in qdisc(cl.switch, n1.port)
                assert "rate 50Mbit" in qdisc(n1.netns, NODE_IFACE)
                assert "rate 200Mbit" in qdisc(cl.switch, n0.port)
                raise KeyError("the body failed")
        assert "rate 200Mbit" in qdisc(cl.switch, n1.port)
        assert "rate 200Mbit" in qdisc(n1.netns, NODE_IFACE)


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_flapping_takes_the_port_down_and_leaves_it_up():
    with Cluster(nodes=2, link=None) as cl:
        seen = set()
        with faults.flapping(cl, 1, down_s=0.4, up_s=0.4, first_s=0):
            end = time.monotonic() + 3
            while time.monotonic() < end and len(seen) < 2:
                seen.add(port_up(cl, 1))
                time.sleep(0.05)
        assert seen == {True, False}
        assert port_up(cl, 1) and port_up(cl, 0)


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_slowed_holds_a_node_to_its_share_and_lets_it_go():
    spin = ("import time,os; t=time.monotonic()\n"
            "while time.monotonic()-t<2: pass\n"
            "print(os.times().user+os.times().system)")
    with Cluster(nodes=2, link=None) as cl:
        try:
            ctx = faults.slowed(cl, 1, share=0.1)
            ctx.__enter__()
        except faults.ClusterUnavailable as exc:
            pytest.skip(f"no CPU cgroup here: {exc}")
        try:
            p = cl.popen(1, [PYTHON, "-c", spin], stdout=subprocess.PIPE,
                         text=True)
            cpu = float(p.communicate(timeout=60)[0])
        finally:
            ctx.__exit__(None, None, None)
        # 2 s of wall at 10% of a CPU: about 0.2 s of CPU (the first
        # 50 ms before the mover thread sees it run free); an upper bound,
        # so a loaded machine cannot fail it
        assert cpu < 0.6, cpu
        group = f"{cl.prefix}-{cl.node(1).name}-slow"
        assert not any(group in d for d in _cgroup_dirs())
        free = cl.popen(1, [PYTHON, "-c", "import time; time.sleep(30)"])
        time.sleep(0.3)                      # the mover ran every 50 ms
        with open(f"/proc/{free.pid}/cgroup") as f:
            assert group not in f.read()
        free.kill()
        free.wait(timeout=10)


def _cgroup_dirs():
    for top in ("/sys/fs/cgroup", "/sys/fs/cgroup/cpu"):
        if os.path.isdir(top):
            yield from os.listdir(top)
