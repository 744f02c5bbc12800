"""benchmarks/targets.py: the restated targets' logic (each with its
reason, informational rows, pass/fail, the direct mpi4py floor's message
pattern), on synthetic measurements; one small live latency job under
mpiexec."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import have_mpi, run_command, PYTHON
from warmup_kit.measure import fit_host as H

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / "benchmarks" / "targets.py"


@pytest.fixture(scope="module")
def T():
    spec = importlib.util.spec_from_file_location("targets_bench", TARGETS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_check_compares_unrounded_both_ways_and_keeps_its_reason(T):
    c = T.check("x", "1", "2", 2.0, 2.0, True, "because")
    assert c["ok"] and c["need"] == "<= 2" and c["reason"] == "because"
    assert not T.check("x", "1", "2", 2.0001, 2.0, True, "r")["ok"]
    assert T.check("x", "1", "2", 0.8, 0.8, False, "r")["ok"]
    assert not T.check("x", "1", "2", 0.7999, 0.8, False, "r")["ok"]


def test_informational_rows_never_fail_the_check(T):
    assert T.informational(4, 2) and not T.informational(2, 2)
    miss = T.check("x", "1", "2", 9.0, 2.0, True, "r")
    info = T.check("x", "1", "2", 9.0, 2.0, True, "r", info=True)
    assert not T.passed([miss]) and T.passed([info])
    assert T.verdict(miss) == "NO" and T.verdict(info) == "info (no)"
    lines = T.table([info])
    assert "info (no)" in lines[1] and lines[2].strip() == "why: r"


def _sweep(n, fit, ours_bw=1.0, lib_bw=1.0, wrong=0):
    rows = []
    for v in [1 << k for k in range(10, 27, 2)]:
        for a in T_ALGS:
            t = H.predict(a, v, n, fit) * 1e6
            rows.append({"algorithm": a, "ranks": n, "size": v,
                         "type": "double", "time_us": t, "wrong": 0,
                         "busbw_gbps": ours_bw})
        rows.append({"algorithm": "mpi", "ranks": n, "size": v,
                     "type": "double", "time_us": 1.0, "wrong": wrong,
                     "busbw_gbps": lib_bw})
    return rows


T_ALGS = ("ring", "tree", "recursive_doubling", "rabenseifner")
FIT = H.HostFit(10e-6, 5e-6, 1e-6, 0.4e-9, 0.4e-9, 1e-6, cores=2,
                cache_bytes=4 << 20, cached_factor=0.2)


def _latency(kit, direct, mpi, wrong=0):
    return {"times_us": {"kit": [kit] * 5, "direct": [direct] * 5,
                         "mpi": [mpi] * 5},
            "wrong": {"kit": wrong, "direct": 0, "mpi": 0}}


def test_evaluate_two_ranks_counts_every_target(T):
    data = {"sweep": _sweep(2, FIT, 1.3, 1.0),
            "latency": _latency(10.0, 5.0, 4.0)}
    checks, model = T.evaluate(2, data, ncores=2)
    got = {c["target"]: c for c in checks}
    assert got["latency 8 B kit/direct mpi4py exchange"]["ratio"] == 2.0
    assert got["latency 8 B kit/MPICH Allreduce"]["ratio"] == 2.5
    assert all(c["reason"] for c in checks)
    assert not any(c["info"] for c in checks)
    assert T.passed(checks)                   # 2.0 and 2.5: at the limits
    assert model["host_fit"]["cache_mib"] == 4       # the cache term is on
    slow = dict(data, latency=_latency(10.1, 5.0, 4.0))
    bad = [c for c in T.evaluate(2, slow, ncores=2)[0] if not c["ok"]]
    assert [c["target"] for c in bad] == [
        "latency 8 B kit/direct mpi4py exchange",
        "latency 8 B kit/MPICH Allreduce"]


def test_oversubscribed_rows_are_informational_but_results_still_count(T):
    data = {"sweep": _sweep(4, FIT, 0.5, 1.0),
            "latency": _latency(50.0, 5.0, 4.0)}
    checks, _ = T.evaluate(4, data, ncores=2)
    perf = [c for c in checks if not c["target"].startswith("#wrong")]
    assert perf and all(c["info"] for c in perf)
    assert not all(c["ok"] for c in perf) and T.passed(checks)
    data["latency"] = _latency(50.0, 5.0, 4.0, wrong=1)
    checks, _ = T.evaluate(4, data, ncores=2)
    assert not T.passed(checks)               # a wrong result always fails
    # the same N on 4 cores counts
    assert not T.passed(T.evaluate(4, dict(data, latency=_latency(
        50.0, 5.0, 4.0)), ncores=4)[0])


def test_shm_ring_against_the_add_and_copy_bound(T):
    def samples(ring_us_64m):
        sizes = T.SHM_SIZES
        return {"samples": {
            "ring": {s: [s / 1e3 / 4.0] for s in sizes[:-1]}
            | {sizes[-1]: [ring_us_64m]},
            "mpi": {s: [s / 1e3 / 1.0] for s in sizes},
            "bound": {s: [s / 1e3 / 5.0] for s in sizes}}, "wrong": 0}
    top = T.SHM_BOUND_BYTES
    at = top / 1e3 / 4.0                       # 4 GB/s against a 5 GB/s bound
    checks = T.evaluate_shm(samples(at * 0.999))
    b = [c for c in checks if "add+copy" in c["target"]][0]
    assert b["ratio"] == pytest.approx(0.8, rel=0.01) and b["ok"]
    assert T.passed(checks) and b["reason"] == T.SHM_BOUND_REASON
    checks = T.evaluate_shm(samples(at * 1.01))
    assert not T.passed(checks)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_add_copy_bound_times_two_processes(T):
    ts = T.add_copy_bound(1 << 20, reps=3, timeout=60)
    assert len(ts) == 3 and min(ts) > 0


@pytest.mark.parametrize("n,want", [
    (2, [[(1, 0, True)], [(0, 1, False)]]),
    (4, [[(1, 2, True)], [(2, 3, True)], [(3, 0, True)], [(0, 1, False)],
         [(1, 2, False)], [(2, 3, False)]])])
def test_direct_exchange_sends_the_kits_8_byte_messages(T, n, want):
    """The pattern the kit's default all-reduce of one float64 sends
    (``WARMUP_KIT_TRACE=1`` prints the same messages)."""
    assert T.exchange_pattern(n) == want


class _Pair:
    """Two ranks' ends of mpi4py-like blocking calls, run in lock-step by
    replaying the pattern (enough for the one-message-each-way rounds)."""

    def __init__(self):
        self.box = {}

    def comm(self, rank):
        pair = self

        class C:
            def Send(self, buf, dest):
                pair.box[(rank, dest)] = buf.copy()

            def Recv(self, buf, source):
                buf[...] = pair.box.pop((source, rank))

            def Sendrecv(self, sbuf, dest, recvbuf, source):
                self.Send(sbuf, dest)
                self.Recv(recvbuf, source)
        return C()


def test_direct_allreduce_sums_along_the_pattern(T):
    n = 4
    pattern = T.exchange_pattern(n)
    outs = [np.empty(1) for _ in range(n)]
    pair = _Pair()
    # one rank's call at a time, round by round: every round has one
    # message, sent before it is received
    x = [np.array([float(r + 1)]) for r in range(n)]
    for r in range(n):
        outs[r][...] = x[r]
    for k, moves in enumerate(pattern):
        sub = [moves]
        (s, d, _), = moves
        T.direct_allreduce(pair.comm(s), outs[s].copy(), outs[s],
                           np.empty(1), sub, s)
        T.direct_allreduce(pair.comm(d), outs[d].copy(), outs[d],
                           np.empty(1), sub, d)
    assert [o[0] for o in outs] == [10.0] * n


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.skipif(not have_mpi(), reason="needs mpi4py and mpiexec")
def test_latency_job_times_all_three_and_checks_them(tmp_path, T):
    out = tmp_path / "lat.json"
    from warmup_kit.comm.mpirun import find_mpiexec
    run_command([find_mpiexec(), "-n", "2", PYTHON, str(TARGETS), "--rank",
                 "latency", "--iters", "20", "--out", str(out)], timeout=90)
    doc = json.loads(out.read_text())
    assert doc["wrong"] == {"kit": 0, "direct": 0, "mpi": 0}
    assert all(len(v) == 20 and min(v) > 0
               for v in doc["times_us"].values())
    assert len(T.latency_checks(doc)) == 2
