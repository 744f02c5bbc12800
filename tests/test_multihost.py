"""Multi-host ranks: the rendezvous of ``python -m warmup_kit.run``, the job
secret, the hybrid communicator and Lab 01 across nodes.

Two "nodes" are two agents on 127.0.0.1 (the master's port fixed, every
rank on a port of its own), so this runs on any machine; the emulated
cluster's version (real namespaces and shaped links) needs root and skips
elsewhere.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time

import pytest

from conftest import PYTHON, ROOT
from warmup_kit.cluster import Cluster, why_unavailable
from warmup_kit.cluster.janitor import alive as janitor_alive

JOB = str(ROOT / "tests" / "multihost_job.py")
LAB = str(ROOT / "labs" / "lab01.py")
pytestmark = [pytest.mark.multiproc]


def free_port() -> int:
    """A loopback port free now, for a master that binds it a moment later.

    Drawn below the kernel's ephemeral range: ports bound to 0 and the local
    ends of outgoing connections come from that range, so a test running
    beside this one cannot take the port in between (a master once lost its
    port so, in CI: "Address already in use")."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(20000, max(low, 20200)), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def agents(argv, *, nnodes=2, nproc=2, transport="sockets", secrets=None,
           timeout=240, extra=()):
    """Start one agent per node on loopback; their (rc, stdout, stderr)."""
    port = free_port()
    secrets = secrets or [os.urandom(32).hex()] * nnodes
    procs = []
    try:
        for n in range(nnodes):
            env = dict(os.environ)
            env.pop("WARMUP_KIT_SECRET", None)
            if secrets[n] is not None:
                env["WARMUP_KIT_SECRET"] = secrets[n]
            procs.append(subprocess.Popen(
                [PYTHON, "-m", "warmup_kit.run", "--nnodes", str(nnodes),
                 "--node-rank", str(n), "--nproc-per-node", str(nproc),
                 "--master-addr", "127.0.0.1", "--master-port", str(port),
                 "--transport", transport, "--timeout", str(timeout - 30),
                 *extra, *argv], env=env, cwd=ROOT, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True))
        outs = [p.communicate(timeout=timeout) for p in procs]
        return [(p.returncode, *o) for p, o in zip(procs, outs)]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def last_json(out: str):
    return json.loads([ln for ln in out.splitlines()
                       if ln.startswith(("[", "{"))][-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["sockets", "hybrid"])
def test_two_loopback_nodes_meet_and_reduce(transport):
    res = agents([JOB], transport=transport)
    assert [r[0] for r in res] == [0, 0], res
    every = last_json(res[0][1])
    assert [v["rank"] for v in every] == [0, 1, 2, 3]
    assert [v["node"] for v in every] == [0, 0, 1, 1]
    for v in every:
        assert v["sum"] == 1 + 2 + 3 + 4
        # ring all-reduce: 2 (N-1)/N of 256 KiB, whatever the transport
        assert v["sent"] == 2 * 3 * (1 << 18) // 4
        assert v["sub_size"] == 2
        assert v["sub_sum"] == (4 if v["rank"] % 2 == 0 else 6)
    want = "HybridComm" if transport == "hybrid" else "SocketComm"
    assert {v["type"] for v in every} == {want}
    if transport == "hybrid":
        assert [v["local"] for v in every] == [[1], [0], [3], [2]]
        # the ring sends to rank+1: ranks 0 and 2 by shared memory only,
        # ranks 1 and 3 across the nodes only; each tier counted its part
        n = every[0]["sent"]
        assert [v["tiers"] for v in every] == [[n, 0], [0, n], [n, 0],
                                               [0, n]]
    assert not res[1][1].strip()                 # only rank 0 prints


@pytest.mark.timeout(300)
def test_a_wrong_secret_is_rejected_and_the_job_does_not_start():
    res = agents([JOB], secrets=[os.urandom(32).hex(),
                                 os.urandom(32).hex()],
                 extra=("--rdzv-timeout", "10"))
    assert res[0][0] != 0 and res[1][0] != 0
    assert "job-secret proof" in res[1][2], res[1][2]
    assert "never connected" in res[0][2], res[0][2]


@pytest.mark.timeout(120)
def test_several_nodes_need_a_secret():
    res = agents([JOB], secrets=[None, None], timeout=60)
    for rc, _, err in res:
        assert rc == 2 and "WARMUP_KIT_SECRET" in err


@pytest.mark.timeout(300)
def test_a_failing_rank_stops_every_node():
    res = agents([JOB, "fail", "3"], timeout=240)
    assert all(rc != 0 for rc, _, _ in res), res
    assert "rank 1 of node 1 exited with 3" in res[1][2], res[1][2]
    assert "stopping the job" in res[0][2], res[0][2]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["sockets", "hybrid"])
def test_a_rank_that_dies_is_named_across_both_tiers(transport):
    """Rank 3 dies inside the job: rank 2 (same node: under hybrid the
    ring sends it rank 2's bytes by shared memory, where rank 3 is local
    rank 1) names rank 3, not its local index, and not a timeout."""
    res = agents([JOB, "die", "3"], transport=transport,
                 extra=("--grace", "60"))
    got = last_json(res[1][1])
    assert got == {"error": "PeerLost", "peer": 3}, (got, res[1][2][-2000:])


@pytest.mark.timeout(300)
def test_a_lost_node_stops_the_job_and_no_rank_outlives_it(tmp_path):
    """SIGKILL node 1's agent mid-job: its ranks die with it, node 0 sees
    the node lost and stops its own ranks."""
    port = free_port()
    env = dict(os.environ, WARMUP_KIT_SECRET=os.urandom(32).hex())
    procs = [subprocess.Popen(
        [PYTHON, "-m", "warmup_kit.run", "--nnodes", "2", "--node-rank",
         str(n), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(port), "--timeout", "200", JOB, "hold",
         str(tmp_path)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
        for n in range(2)]
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("*.pid"))) < 4:
            assert time.monotonic() < deadline, "the ranks never joined"
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        procs[1].kill()
        _, err = procs[0].communicate(timeout=120)
        assert procs[0].returncode != 0
        assert "lost node 1" in err, err
        deadline = time.monotonic() + 30
        while any(janitor_alive(p) for p in pids):
            assert time.monotonic() < deadline, "a rank outlived its job"
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["sockets", "hybrid"])
def test_lab01_bytes_equal_the_schedule_across_loopback_nodes(transport):
    # 16 MiB: ring steps of 4 MiB, more than a socket's buffers hold, so a
    # rank must keep its socket sends moving while it waits on shared
    # memory (it once did not, and the hybrid ring stopped)
    res = agents([LAB, "--json", "--algorithm", "ring,hierarchical",
                  "--size", "64K", "--size", "16M", "--iters", "1"],
                 transport=transport)
    assert [r[0] for r in res] == [0, 0], res
    out = last_json(res[0][1])
    assert out["ranks"] == 4 and out["correct"] and out["bytes_match"]
    assert out["transport"] == f"{transport} across 2 nodes"
    assert len(out["rows"]) == 2 * 2 * 4


WHY = why_unavailable()


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.skipif(WHY is not None, reason=f"cluster: {WHY}")
@pytest.mark.parametrize("transport", ["sockets", "hybrid"])
def test_lab01_across_two_emulated_nodes(transport):
    with Cluster(nodes=2, ranks_per_node=2, link="1gbit") as cl:
        res = cl.run_job([LAB, "--json", "--algorithm",
                          "ring,tree,hierarchical", "--size", "1M",
                          "--iters", "1"], timeout=360, transport=transport)
    assert [r.returncode for r in res] == [0, 0], [r.stderr for r in res]
    out = last_json(res[0].stdout)
    assert out["ranks"] == 4 and out["correct"] and out["bytes_match"]
    for row in out["rows"]:
        assert row["bytes_sent"] == row["predicted_sent"]
        assert row["bytes_received"] == row["predicted_received"]


HOSTS = ("from mpi4py import MPI; import json, socket; c = MPI.COMM_WORLD; "
         "v = c.gather([c.rank, socket.gethostname(), "
         "MPI.Get_processor_name()]); c.rank or print(json.dumps(v))")


def _have_mpi() -> bool:
    from conftest import have_mpi
    return have_mpi()


@pytest.mark.mpi
@pytest.mark.timeout(420)
@pytest.mark.skipif(WHY is not None, reason=f"cluster: {WHY}")
@pytest.mark.skipif(not _have_mpi(), reason="mpi4py or mpiexec missing")
def test_mpirun_spans_the_emulated_nodes_over_their_links():
    with Cluster(nodes=2, ranks_per_node=2, link="1gbit") as cl:
        names = cl.mpirun(["python", "-c", HOSTS], timeout=180)
        assert names.returncode == 0, names.stderr[-3000:]
        every = last_json(names.stdout)
        # each node its own host, as MPICH sees it
        assert [h for _, h, _ in every] == ["node0", "node0", "node1",
                                            "node1"]
        assert [p for _, _, p in every] == ["node0", "node0", "node1",
                                            "node1"]

        def into_switch() -> int:
            return int(subprocess.run(
                ["ip", "netns", "exec", cl.switch, "cat",
                 "/sys/class/net/n1/statistics/rx_bytes"],
                capture_output=True, text=True, timeout=30).stdout)
        before = into_switch()
        lab = cl.mpirun(["python", LAB, "--json", "--algorithm",
                         "ring,hierarchical", "--size", "1M", "--iters",
                         "1"], timeout=300)
        crossed = into_switch() - before
    assert lab.returncode == 0, lab.stderr[-3000:]
    out = last_json(lab.stdout)
    assert out["transport"] == "mpi" and out["ranks"] == 4
    assert out["correct"] and out["bytes_match"]
    # node 1's ranks sent at least their ring share across its cable (the
    # payload went over the veth links, not shared memory between nodes)
    assert crossed > 2 * (1 << 20)
