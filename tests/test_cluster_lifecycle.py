"""`cluster up` owns what it builds until it hands it over: stopped
(SIGTERM, Ctrl-C) or failing while building, it removes all of it; and
`down` never races a build (it waits for it, or refuses in one line).

Needs root and iproute2 (skips with the reason elsewhere); every check
looks only at this test's own cluster prefix (``wkc<pid of up>-0``), and
`down` is always given ``--prefix``, so other clusters are left alone.
"""
from __future__ import annotations

import subprocess
import time

import pytest

from conftest import PYTHON, ROOT
from warmup_kit.cluster import janitor, netns, why_unavailable
from warmup_kit.cluster.__main__ import main as cluster_main

WHY = why_unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"cluster: {WHY}")
CLI = [PYTHON, "-m", "warmup_kit.cluster"]
BIG = "60"          # nodes: a build that takes a few seconds at least


def spaces(prefix: str) -> list[str]:
    return [n for n in netns.netns_list() if n.startswith(prefix + "-")]


def registered(prefix: str) -> bool:
    return (janitor.registry_dir() / f"{prefix}.json").exists()


def start_big_up() -> tuple[subprocess.Popen, str]:
    """`up` of a big cluster, returned once it has made a few namespaces
    (and is still building)."""
    p = subprocess.Popen([*CLI, "up", "--nodes", BIG], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    prefix = f"wkc{p.pid}-0"
    deadline = time.monotonic() + 60
    while len(spaces(prefix)) < 4:
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            out, err = p.communicate(timeout=30)
            janitor.remove(prefix)
            pytest.fail(f"up did not start building: {out}\n{err}")
        time.sleep(0.05)
    return p, prefix


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_up_stopped_while_building_removes_what_it_made(sig):
    import signal
    p, prefix = start_big_up()
    try:
        assert janitor.entries()[prefix]["building"]
        p.send_signal(getattr(signal, sig))
        out, err = p.communicate(timeout=120)
        assert p.returncode == 130, (out, err)
        assert "Traceback" not in err and "removed" in err, err
        assert spaces(prefix) == [] and not registered(prefix)
    finally:
        p.kill()
        p.wait(timeout=30)
        janitor.remove(prefix)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_up_that_fails_while_building_removes_what_it_made(monkeypatch,
                                                           capsys):
    """A rate the kernel refuses (tc fails on the first cable) after the
    namespaces exist: `up` exits 3 with the reason and leaves nothing."""
    made = []
    real = netns.add_netns

    def add(ns):
        made.append(ns)
        real(ns)

    def refuse(*a, **k):
        raise subprocess.CalledProcessError(
            2, ["tc", "qdisc", "replace"], "", "Error: rate refused")
    monkeypatch.setattr(netns, "add_netns", add)
    monkeypatch.setattr(netns, "set_tbf", refuse)
    rc = cluster_main(["up", "--nodes", "3"])
    err = capsys.readouterr().err
    prefix = made[0].rsplit("-", 1)[0]
    try:
        assert rc == 3 and "rate refused" in err, err
        assert len(made) == 4
        assert spaces(prefix) == [] and not registered(prefix)
    finally:
        janitor.remove(prefix)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_down_during_up_refuses_or_waits_and_leaves_nothing_unregistered():
    p, prefix = start_big_up()
    try:
        # no waiting: a one-line refusal, and the build goes on untouched
        d = subprocess.run([*CLI, "down", "--prefix", prefix, "--wait", "0"],
                           capture_output=True, text=True, timeout=60)
        assert d.returncode == 1, (d.stdout, d.stderr)
        assert "still building" in d.stderr and "Traceback" not in d.stderr
        assert registered(prefix)
        st = subprocess.run([*CLI, "status"], capture_output=True, text=True,
                            timeout=60).stdout
        assert f"{prefix}: {BIG} nodes" in st and "being built" in st, st
        # waiting: `down` removes it once `up` has handed it over
        d = subprocess.run([*CLI, "down", "--prefix", prefix, "--wait",
                            "150"], capture_output=True, text=True,
                           timeout=200)
        assert d.returncode == 0, (d.stdout, d.stderr)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, (out, err)
        assert f"removed {prefix}: {int(BIG) + 1} namespaces" in d.stdout
        assert spaces(prefix) == [] and not registered(prefix)
        assert prefix not in janitor.unregistered()
    finally:
        p.kill()
        p.wait(timeout=30)
        janitor.remove(prefix)
