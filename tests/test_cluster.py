"""The emulated cluster: built, shaped, partitioned and always removed.

The parts that build namespaces need root (CAP_NET_ADMIN and
CAP_SYS_ADMIN) and iproute2; elsewhere they skip with the reason
:func:`warmup_kit.cluster.why_unavailable` gives. Every check of "nothing
left" looks for this test's own prefix, so clusters other tests build at
the same time are left alone.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time

import pytest

from conftest import PYTHON, ROOT
from warmup_kit.cluster import Cluster, ClusterUnavailable, janitor, netns
from warmup_kit.cluster import why_unavailable

WHY = why_unavailable()
needs_root = pytest.mark.skipif(WHY is not None, reason=f"cluster: {WHY}")
CLI = [PYTHON, "-m", "warmup_kit.cluster"]
CONNECT = ("import socket,sys; socket.create_connection((sys.argv[1], "
           "int(sys.argv[2])), timeout=3).close(); print('connected')")
SERVE = ("import socket,sys; s=socket.create_server((sys.argv[1], "
         "int(sys.argv[2]))); print('ready', flush=True); c,_=s.accept(); "
         "c.close()")


def leftovers(prefix: str) -> tuple[list[str], list[str], bool]:
    """Namespaces, host links and registry files still carrying prefix."""
    spaces = [n for n in netns.netns_list() if n.startswith(prefix + "-")]
    links = [line for line in subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True,
        timeout=30).stdout.splitlines() if prefix in line]
    reg = (janitor.registry_dir() / f"{prefix}.json").exists()
    return spaces, links, reg


def read_until(proc: subprocess.Popen, word: str, timeout: float = 120
               ) -> str:
    """proc's stdout (unbuffered bytes) up to ``word``."""
    seen, end, fd = b"", time.monotonic() + timeout, proc.stdout.fileno()
    while word.encode() not in seen:
        left = end - time.monotonic()
        if left <= 0:
            proc.kill()
            raise AssertionError(f"no {word!r} in time; got:\n{seen!r}")
        if select.select([fd], [], [], min(left, 1))[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.kill()
                raise AssertionError(f"exited before {word!r}:\n{seen!r}")
            seen += chunk
    return seen.decode()


def test_rates_parse_and_bad_ones_are_named():
    assert netns.rate_bytes("1gbit") == 125e6
    assert netns.rate_bytes("200Mbit") == 25e6
    assert netns.rate_bytes("100mbps") == 100e6
    assert netns.burst_bytes("1gbit") == 250_000
    assert netns.burst_bytes("10mbit") == 64 << 10
    for bad in ("fast", "1 gbit", "0gbit", "-3mbit", ""):
        with pytest.raises(ValueError, match="link rate"):
            netns.rate_bytes(bad)


def test_bad_arguments_fail_before_anything_is_built():
    for kw in ({"nodes": 0}, {"nodes": 65}, {"nodes": True},
               {"ranks_per_node": 0}, {"link": "fast"},
               {"nodes": 9, "subnet": "10.1.0.0/29"}):
        with pytest.raises(ValueError):
            Cluster(**kw)


def test_without_tools_or_root_the_reason_is_given(monkeypatch):
    monkeypatch.setattr(netns.shutil, "which", lambda t: None
                        if t == "ip" else "/bin/" + t)
    assert "iproute2" in netns.why_unavailable()
    with pytest.raises(ClusterUnavailable, match="iproute2"):
        Cluster(nodes=2).start()
    monkeypatch.setattr(netns.shutil, "which", lambda t: "/bin/" + t)
    monkeypatch.setattr(netns, "_effective_caps", lambda: 0)
    assert "needs root" in netns.why_unavailable()
    with pytest.raises(ClusterUnavailable, match="CAP_NET_ADMIN"):
        with Cluster(nodes=2):
            pass


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_nodes_have_own_names_addresses_shaped_links_and_go_away():
    with Cluster(nodes=2, ranks_per_node=2, link="200mbit") as cl:
        prefix = cl.prefix
        assert [n.address for n in cl.nodes] == ["10.77.0.1", "10.77.0.2"]
        assert len(leftovers(prefix)[0]) == 3          # 2 nodes + switch
        for n in cl.nodes:
            p = cl.popen(n, ["sh", "-c", "hostname; ip -o -4 addr show "
                             "eth0; tc qdisc show dev eth0"],
                         stdout=subprocess.PIPE, text=True)
            out = p.communicate(timeout=60)[0]
            assert out.splitlines()[0] == n.name
            assert f"{n.address}/24" in out
            assert re.search(r"tbf .*rate 200Mbit", out), out
        sw = subprocess.run(netns.in_ns(cl.switch, ["tc", "qdisc", "show"]),
                            capture_output=True, text=True, timeout=30)
        assert sw.stdout.count("rate 200Mbit") == 2    # the other direction
        cl.set_rate("50mbit")
        sw = subprocess.run(netns.in_ns(cl.switch, ["tc", "qdisc", "show"]),
                            capture_output=True, text=True, timeout=30)
        assert sw.stdout.count("rate 50Mbit") == 2
        assert "192.168" not in subprocess.run(
            netns.in_ns(cl.nodes[0].netns, ["ip", "-o", "addr"]),
            capture_output=True, text=True, timeout=30).stdout
    assert leftovers(prefix) == ([], [], False)


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_link_down_is_a_partition_and_link_up_heals_it():
    with Cluster(nodes=2, link=None) as cl:
        a = cl.nodes[0].address

        def connect() -> int:
            srv = cl.popen(0, [PYTHON, "-c", SERVE, a, "7070"],
                           stdout=subprocess.PIPE)
            read_until(srv, "ready", 60)
            c = cl.popen(1, [PYTHON, "-c", CONNECT, a, "7070"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            rc = c.wait(timeout=60)
            srv.kill()
            srv.wait(timeout=10)
            return rc
        assert connect() == 0
        cl.link_down(cl.nodes[1])
        assert connect() != 0
        cl.link_up("node1")
        deadline = time.monotonic() + 60
        while connect() != 0:                # carrier and ARP come back
            assert time.monotonic() < deadline, "link_up did not heal"


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_cli_up_status_exec_down():
    up = subprocess.run([*CLI, "up", "--nodes", "2", "--ranks-per-node", "2",
                         "--link", "1gbit"], capture_output=True, text=True,
                        timeout=120)
    assert up.returncode == 0, up.stderr
    prefix = re.search(r"cluster (wkc\d+-\d+):", up.stdout).group(1)
    try:
        st = subprocess.run([*CLI, "status"], capture_output=True, text=True,
                            timeout=60)
        assert prefix in st.stdout and "left up" in st.stdout
        ex = subprocess.run([*CLI, "exec", "--prefix", prefix, "node1", "--",
                             "hostname"], capture_output=True, text=True,
                            timeout=60)
        assert ex.stdout.strip() == "node1", ex.stderr
        assert len(leftovers(prefix)[0]) == 3
    finally:
        down = subprocess.run([*CLI, "down"], capture_output=True, text=True,
                              timeout=120)
    assert f"removed {prefix}: 3 namespaces" in down.stdout, down.stdout
    assert leftovers(prefix) == ([], [], False)


HOLD_CM = """
import sys, time
from warmup_kit.cluster import Cluster
with Cluster(nodes=2, link="1gbit") as cl:
    print("up", cl.prefix, flush=True)
    time.sleep(600)
"""


def _start(kind: str) -> tuple[subprocess.Popen, str]:
    argv = ([*CLI, "up", "--nodes", "2", "--hold"] if kind == "cli"
            else [PYTHON, "-c", HOLD_CM])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=ROOT)
    seen = read_until(p, "holding" if kind == "cli" else "up wkc")
    prefix = re.search(r"(wkc\d+-\d+)", seen).group(1)
    assert len(leftovers(prefix)[0]) == 3
    return p, prefix


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["cli", "context"])
def test_sigkill_leftovers_are_removed_by_down(kind):
    """A cluster whose creator was SIGKILLed stays up until ``down``. The
    leftovers of a dead creator are also swept by any cluster that starts
    (another test file's, on another worker): a try where that sweep got
    there first proves nothing about ``down`` and is run again; one where
    the leftovers outlive ``down`` fails."""
    for _ in range(3):
        p, prefix = _start(kind)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        p.stdout.close()
        if len(leftovers(prefix)[0]) != 3:       # nobody cleaned up...
            continue                             # (but a sweep did)
        down = subprocess.run([*CLI, "down"], capture_output=True,
                              text=True, timeout=120)
        assert leftovers(prefix) == ([], [], False), down.stdout
        if prefix in down.stdout:                # ...until down
            return
    pytest.fail("3 tries: each time another process's sweep removed the "
                "leftovers before `down` ran")


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind,sig", [("cli", signal.SIGINT),
                                      ("context", signal.SIGINT),
                                      ("context", signal.SIGTERM)])
def test_ctrl_c_and_sigterm_clean_up_by_themselves(kind, sig):
    p, prefix = _start(kind)
    p.send_signal(sig)
    p.wait(timeout=120)
    p.stdout.close()
    assert leftovers(prefix) == ([], [], False)


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_failed_build_removes_what_it_made(monkeypatch):
    made = []

    def boom(*a, **k):
        made.append(a)
        raise subprocess.CalledProcessError(2, ["ip", "link", "add"], "",
                                            "RTNETLINK answers: nope")
    monkeypatch.setattr(netns, "add_uplink", boom)
    cl = Cluster(nodes=2)
    with pytest.raises(ClusterUnavailable, match="nope"):
        cl.start()
    assert made and leftovers(cl.prefix) == ([], [], False)


def test_janitor_leaves_live_owners_alone():
    assert not janitor.owner_gone(f"wkc{os.getpid()}-0", {})
    assert janitor.owner_gone("wkc0-0", {"pid": 0})
    assert janitor.owner_gone("x", {"detached": True})
    assert not janitor.owner_gone("x", {"detached": True}, detached=False)
    assert janitor.PREFIX_RE.match("wkc12-3-node0").group(1) == "wkc12-3"
    assert janitor.PREFIX_RE.match("wk12-node0") is None


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_killed_owner_not_yet_reaped_counts_as_gone():
    """A SIGKILLed owner whose parent has not reaped it (or whose parent
    died, where nothing reaps orphans) is a zombie: its cluster is
    leftovers, not live."""
    p = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(60)"])
    try:
        assert janitor.alive(p.pid)
        os.kill(p.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while janitor.alive(p.pid):          # a zombie until we wait()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split(
        )[0] == "Z"
        assert janitor.owner_gone(f"wkc{p.pid}-0", {"pid": p.pid})
    finally:
        p.kill()
        p.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cli_says_why_it_cannot_build(tmp_path):
    """Without iproute2 on PATH (as without root) `up` exits 3 with the
    reason, having built nothing."""
    env = dict(os.environ, PATH=str(tmp_path))
    up = subprocess.run([*CLI, "up", "--nodes", "2"], capture_output=True,
                        text=True, timeout=60, env=env, cwd=ROOT)
    assert up.returncode == 3, (up.stdout, up.stderr)
    assert "cluster unavailable" in up.stderr and "iproute2" in up.stderr
