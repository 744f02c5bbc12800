"""The nccl-tests-style bench and the alpha-beta-gamma fit.

Untimed: these tests check that the bench checks, that its table parses,
that the fit recovers known parameters, and that tiny real sweeps run over
sockets and under mpiexec. Performance targets live in
``benchmarks/targets.py --check``, not here.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conftest import have_mpi, mpi_run, run_command, PYTHON
from warmup_kit.measure import fit as F
from warmup_kit import collectives
from warmup_kit.bench import COLLECTIVES, Options, run_launched
from warmup_kit.bench.output import parse_table, table
from warmup_kit.bench.record import Buffers, pattern, reduced, wrong
from warmup_kit.model.costs import BUSBW_FACTORS

HEADER = {"collective": "allreduce", "ranks": 2, "transport": "sockets",
          "type": "double", "redop": "sum", "iters": 1, "warmup": 0,
          "check": True, "machine": "test"}


def tiny(collective="allreduce", **kw) -> Options:
    base = dict(collective=collective, sizes=(8, 96, 4096), iters=2,
                warmup=1, algorithms=())
    base.update(kw)
    return Options(**base)


# ---------------------------------------------------------------- checking
def test_wrong_counts_differing_elements():
    want = np.arange(10.0)
    got = want.copy()
    got[[2, 7]] = -1
    assert wrong(got, want) == 2
    assert wrong(want.copy(), want) == 0
    assert wrong(None, want) == 10
    assert wrong(got, None) == 0          # an output that is not defined


def test_reference_data_is_exact():
    n, start, length = 7, 5, 1000
    want = sum(pattern(r, start, length, np.int64, "sum") for r in range(n))
    for dt in (np.float16, np.float32, np.float64, np.int32):
        assert np.array_equal(reduced(n, start, length, dt, "sum"),
                              want.astype(dt))


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_checker_catches_an_injected_wrong_result():
    good = COLLECTIVES["allreduce"]

    def corrupt(algorithm, b, comm, op, root, timeout):
        out = good.run_ours(algorithm, b, comm, op, root, timeout)
        if comm.rank == 1:
            out[-1] += 1                  # one wrong element on one rank
        return out

    bad = dataclasses.replace(good, run_ours=corrupt)
    rows = run_launched(tiny(), 2, timeout=60, collective=bad)
    assert [r["wrong"] for r in rows] == [1, 1, 1]
    rows = run_launched(tiny(), 2, timeout=60)
    assert [r["wrong"] for r in rows] == [0, 0, 0]


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_ours_is_the_public_call(name, monkeypatch):
    """What the bench times is the function a reader calls, with the
    preallocated output and default settings otherwise."""
    seen = []

    def spy(sendbuf, comm, **kw):
        seen.append(kw)
        return kw.get("out")
    monkeypatch.setattr(collectives, name, spy)
    b = Buffers(np.zeros(8), np.zeros(8))
    COLLECTIVES[name].run_ours("x", b, object(), "sum", 0, None)
    assert len(seen) == 1
    kw = seen[0]
    assert kw["out"] is b.recv and kw["algorithm"] == "x"
    assert kw["timeout"] is None and "async_op" not in kw


def test_a_nocheck_twin_times_the_same_call_without_the_agreement():
    """'ring+nocheck' times ring with comm.check_calls off, interleaved with
    ring (check on), and leaves the communicator as it found it."""
    from warmup_kit.bench.harness import LaunchContext, bench_rank
    from warmup_kit.comm import SocketComm
    seen = []
    coll = dataclasses.replace(COLLECTIVES["allreduce"], run_ours=lambda a, b,
                               comm, *rest: seen.append((a, comm.check_calls))
                               or b.recv)
    with SocketComm(0, 1, [("127.0.0.1", 0)]) as comm:
        rows = bench_rank(LaunchContext(comm, "sockets"),
                          tiny(sizes=(8,), algorithms=("ring", "ring+nocheck"),
                               check=False), coll)
        assert comm.check_calls
    assert [r["algorithm"] for r in rows] == ["ring", "ring+nocheck"]
    assert set(seen) == {("ring", True), ("ring", False)}
    assert seen[:2] == [("ring", True), ("ring", False)]     # interleaved


# ------------------------------------------------------------------- table
@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_output_table_parses_back():
    rows = run_launched(tiny(algorithms=("ring", "tree")), 2, timeout=60)
    text = table(rows, HEADER)
    parsed = parse_table(text)
    assert len(parsed) == len(rows) == 6
    for p, r in zip(parsed, rows):
        assert (p["size"], p["count"], p["algorithm"], p["wrong"]) == \
            (r["size"], r["count"], r["algorithm"], r["wrong"])
        assert p["time_us"] == pytest.approx(r["time_us"], abs=0.01)
        assert p["busbw_gbps"] == pytest.approx(
            p["algbw_gbps"] * BUSBW_FACTORS["allreduce"](2), abs=2e-3)
    assert "Out of bounds values : 0 OK" in text


def test_parse_table_rejects_garbage():
    with pytest.raises(ValueError):
        parse_table("  8 1 double sum\n")


def test_sweep_sizes_like_nccl_tests():
    assert Options(minbytes=8, maxbytes=64, stepfactor=2).sweep() == \
        [8, 16, 32, 64]
    assert Options(minbytes=8, maxbytes=32, stepbytes=8).sweep() == \
        [8, 16, 24, 32]


@pytest.mark.parametrize("kw,match", [
    (dict(minbytes=64 << 20, maxbytes=8), "empty sweep"),
    (dict(stepfactor=1), "-f must be >= 2")])
def test_an_empty_or_endless_sweep_is_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        Options(**kw).sweep()


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["-b", "64M", "-e", "8"], "empty sweep"),
    (["--algorithms", "mpi"], "needs ranks under mpiexec"),
    (["--algorithms", "ring,warp"], "unknown allreduce algorithm"),
    (["--algorithms", "mpi+nocheck"], "unknown allreduce algorithm"),
    (["-b", "3X"], "K, M, G or T"),
    (["-n", "0"], "-n/--iters: must be >= 1")])
def test_cli_refuses_what_it_cannot_do(args, message):
    run = run_command([PYTHON, "-m", "warmup_kit.bench", "--world", "2",
                       *args], timeout=60)
    assert run.returncode == 2, run.describe()
    assert message in run.stderr


@pytest.mark.slow
def test_cli_refuses_world_under_mpiexec():
    run = run_command([PYTHON, "-m", "warmup_kit.bench", "--world", "2"],
                      timeout=60, env={"PMI_RANK": "0"})
    assert run.returncode == 2 and "do not run it under mpiexec" in run.stderr


# ----------------------------------------------------------- collectives
@pytest.mark.multiproc
@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
@pytest.mark.parametrize("collective", sorted(COLLECTIVES))
def test_every_collective_checks_clean(collective, transport):
    opts = tiny(collective, root=2,
                sizes=(24, 3000))
    rows = run_launched(opts, 3, transport, timeout=120)
    assert rows and all(r["wrong"] == 0 for r in rows)
    assert all(r["busbw_gbps"] == pytest.approx(
        r["algbw_gbps"] * BUSBW_FACTORS[collective](3)) for r in rows)


# --------------------------------------------------------------------- fit
def synthetic(alpha, beta, gamma, n, algorithms, sizes, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    truth = F.Fit(alpha, beta, gamma)
    rows = []
    for a in algorithms:
        for v in sizes:
            t = F.predict(a, v, n, truth) * (1 + noise * rng.standard_normal())
            rows.append({"algorithm": a, "ranks": n, "size": v,
                         "type": "double", "time_us": t * 1e6})
    return rows


ALGS = ("ring", "tree", "recursive_doubling", "rabenseifner")
SIZES = [1 << k for k in range(10, 27, 2)]


@pytest.mark.parametrize("n", [2, 4, 5, 8])
def test_fit_recovers_known_parameters(n):
    rows = synthetic(20e-6, 0.25e-9, 0.4e-9, n, ALGS, SIZES)
    f = F.fit(rows)
    assert f.alpha_s == pytest.approx(20e-6, rel=1e-6)
    assert f.beta_s_per_byte == pytest.approx(0.25e-9, rel=1e-6)
    assert f.gamma_s_per_byte == pytest.approx(0.4e-9, rel=1e-6)
    assert f.max_rel_error < 1e-9


def test_fit_tolerates_noise():
    rows = synthetic(30e-6, 0.2e-9, 0.5e-9, 4, ALGS, SIZES, noise=0.03)
    f = F.fit(rows)
    assert f.alpha_s == pytest.approx(30e-6, rel=0.1)
    assert f.beta_s_per_byte == pytest.approx(0.2e-9, rel=0.15)
    assert f.gamma_s_per_byte == pytest.approx(0.5e-9, rel=0.25)


def test_fit_with_gamma_held():
    rows = synthetic(10e-6, 0.3e-9, 0.6e-9, 4, ("ring",), SIZES)
    f = F.fit(rows, gamma_s_per_byte=0.6e-9)
    assert (f.alpha_s, f.beta_s_per_byte) == pytest.approx((10e-6, 0.3e-9))


def test_features_of_ring():
    # ring: 2(N-1) rounds of V/N bytes, half of them reducing
    R, B, G = F.features("ring", 8 * 1024, 4)
    assert (R, B, G) == (6, 6 * 2048, 3 * 2048)


def test_crossover_predicted_and_measured_agree():
    n, fitted = 8, F.Fit(50e-6, 0.3e-9, 0.3e-9)
    cp = F.crossover_predicted("ring", "tree", n, fitted)
    assert cp is not None
    below = max(int(cp * 0.8) // 64 * 64, 64)
    above = int(cp * 1.25) // 64 * 64
    assert F.predict("ring", below, n, fitted) > \
        F.predict("tree", below, n, fitted)
    assert F.predict("ring", above, n, fitted) < \
        F.predict("tree", above, n, fitted)
    sizes = [1 << k for k in range(6, 24)]
    rows = synthetic(50e-6, 0.3e-9, 0.3e-9, n, ("ring", "tree"), sizes)
    cm = F.crossover_measured(rows, "ring", "tree")
    # the sweep's own sizes bracket the predicted crossover; the measured
    # one (log-interpolated between them) must fall in that same bracket
    lo = max(v for v in sizes if v <= cp)
    assert lo <= cm <= 2 * lo, (cm, cp)
    assert cm == pytest.approx(cp, rel=0.1)


# ------------------------------------------------------------ real sweeps
@pytest.mark.multiproc
@pytest.mark.timeout(150)
def test_cli_sweep_over_sockets(tmp_path):
    out = tmp_path / "b.json"
    run = run_command([PYTHON, "-m", "warmup_kit.bench", "--world", "3",
                       "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1",
                       "--algorithms", "ring,tree,recursive_doubling",
                       "--json", out, "--csv", tmp_path / "b.csv"],
                      timeout=120)
    assert run.returncode == 0, run.describe()
    rows = parse_table(run.stdout)
    assert "# timed: warmup_kit.allreduce(sendbuf, comm, out=recvbuf" in \
        run.stdout
    assert {r["algorithm"] for r in rows} == {"ring", "tree",
                                              "recursive_doubling"}
    assert all(r["wrong"] == 0 for r in rows)
    data = json.loads(out.read_text())
    assert data["header"]["transport"] == "sockets"
    assert len(data["rows"][0]["times_us"]) == 2
    assert (tmp_path / "b.csv").read_text().startswith("collective,")


@pytest.mark.mpi
@pytest.mark.timeout(200)
@pytest.mark.skipif(not have_mpi(), reason="needs mpi4py and mpiexec")
@pytest.mark.parametrize("n", [2, 3])
def test_sweep_under_mpiexec_with_library_baseline(tmp_path, n):
    out = tmp_path / "b.json"
    run = mpi_run("warmup_kit.bench", n,
                  ["-b", "8", "-e", "256K", "-f", "8", "-n", "3", "-w", "1",
                   "--algorithms", "ring,recursive_doubling,mpi",
                   "--json", out], module=True, timeout=150)
    assert run.returncode == 0, run.describe()
    rows = parse_table(run.stdout)
    assert {r["algorithm"] for r in rows} == {"ring", "recursive_doubling",
                                              "mpi"}
    assert all(r["wrong"] == 0 for r in rows)
    data = json.loads(out.read_text())
    assert data["header"]["ranks"] == n
    assert "MPICH" in data["header"]["machine"]
    assert "MPI_Allreduce" in data["header"]["timed"]
    f = F.fit(data["rows"], min_bytes=8)
    assert f.alpha_s >= 0 and f.beta_s_per_byte >= 0
