"""Lab 01 end to end, as a reader runs it: over sockets (--world N) and under
mpiexec, checked against the reference, with measured bytes equal to the
schedule's prediction and the ring's 2(N-1)/N * V."""
from __future__ import annotations

import pytest

import extra_chunk
import warmup_kit as wk
from conftest import (PYTHON, ROOT, mpi_run, mpi_script, requires_mpi,
                      run_command)

LAB = ROOT / "labs" / "lab01.py"
SIZES = ["1K", "64K", "1000"]          # 1000 B = 125 float64: uneven chunks
SIZE_BYTES = [1 << 10, 64 << 10, 1000]


def lab(*args, timeout=120):
    return run_command([PYTHON, LAB, *args], timeout=timeout)


def _size_args(sizes=SIZES):
    return [a for s in sizes for a in ("--size", s)]


def check_rows(result: dict, n: int, algorithms, sizes=SIZE_BYTES,
               transport=None):
    assert result["correct"] is True
    assert result["bytes_match"] is True
    assert result["ranks"] == n
    if transport:
        assert result["transport"] == transport
    rows = result["rows"]
    assert sorted({r["algorithm"] for r in rows}) == sorted(algorithms)
    assert len(rows) == n * len(algorithms) * len(sizes)
    for alg in algorithms:
        for v in sizes:
            mine = sorted((r for r in rows if r["algorithm"] == alg
                           and r["nbytes"] == v), key=lambda r: r["rank"])
            assert [r["rank"] for r in mine] == list(range(n))
            t = wk.traffic(wk.build("allreduce", alg, n), v, itemsize=8)
            naive = wk.traffic(wk.build("allreduce", "naive", n), v,
                               itemsize=8)
            for r in mine:
                rank = r["rank"]
                assert r["correct"] is True
                assert r["bytes_sent"] == r["predicted_sent"] == \
                    t.bytes_sent[rank]
                assert r["bytes_received"] == r["predicted_received"] == \
                    t.bytes_received[rank]
                assert r["formula_bytes"] == pytest.approx(
                    2 * (n - 1) / n * v)
                assert r["naive_sent"] == naive.bytes_sent[rank] == (n - 1) * v
            if alg == "ring":
                # the headline: the ranks together send exactly 2(N-1) V,
                # each 2(N-1)/N V when N divides the element count
                assert sum(r["bytes_sent"] for r in mine) == 2 * (n - 1) * v
                if (v // 8) % n == 0:
                    assert all(r["bytes_sent"] == 2 * (n - 1) * v // n
                               for r in mine)


@pytest.mark.multiproc
@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_lab01_sockets_json(n):
    run = lab("--world", n, "--json", "--iters", 1, *_size_args())
    assert run.returncode == 0, run.describe()
    check_rows(run.json(), n, ["ring"], transport="sockets")


@pytest.mark.multiproc
@pytest.mark.timeout(150)
def test_lab01_sockets_all_algorithms():
    run = lab("--world", 4, "--json", "--algorithm", "all", "--iters", 1,
              *_size_args())
    assert run.returncode == 0, run.describe()
    check_rows(run.json(), 4, wk.ALGORITHMS, transport="sockets")


@pytest.mark.multiproc
@pytest.mark.timeout(150)
def test_lab01_prints_a_table():
    run = lab("--world", 3, "--algorithm", "ring,naive", "--iters", 1,
              "--size", "1K")
    assert run.returncode == 0, run.describe()
    assert "correct: every result equals the reference (sockets)" in run.stdout
    assert "N = 3 ranks" in run.stdout
    ring = [line.split() for line in run.stdout.splitlines()
            if line.startswith("ring ")]
    assert len(ring) == 3
    for cols in ring:
        # algorithm V rank sent received predicted formula naive match ms
        assert cols[1] == "1024" and cols[3] == cols[5] and cols[8] == "yes"
        assert cols[6] == str(round(2 * 2 / 3 * 1024))


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_lab01_mpi_default_sizes():
    """The README's command, as is (sizes 1K, 1M, 16M)."""
    run = mpi_run(LAB, 4, ["--json", "--iters", 1], timeout=180,
                  mpi4py_runner=False)
    assert run.returncode == 0, run.describe()
    check_rows(run.json(), 4, ["ring"], sizes=[1 << 10, 1 << 20, 16 << 20],
               transport="mpi")


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_lab01_mpi_all_algorithms_under_mpi4py():
    run = mpi_run(LAB, 4, ["--json", "--algorithm", "all", "--iters", 1,
                           *_size_args()], timeout=180)
    assert run.returncode == 0, run.describe()
    check_rows(run.json(), 4, wk.ALGORITHMS, transport="mpi")


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 3])
def test_lab01_mpi_small_worlds(n):
    run = mpi_run(LAB, n, ["--json", "--iters", 1, *_size_args()],
                  timeout=100)
    assert run.returncode == 0, run.describe()
    check_rows(run.json(), n, ["ring"], transport="mpi")


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["--algorithm", "bogus"], "unknown algorithm"),
    (["--algorithm", "ring,nope"], "unknown algorithm"),
    (["--size", "12"], "multiple of 8"),
    (["--world", "0"], "argument --world: must be in [1, 256]"),
])
@pytest.mark.timeout(60)
def test_lab01_rejects_bad_arguments(args, message):
    run = lab(*args, "--json", timeout=50)
    assert run.returncode != 0, run.describe()
    assert message in run.stderr, run.describe()


# ------------------------------------------- the byte check can fail
def _check_extra_chunk_caught(rows, n):
    chunk = extra_chunk.NBYTES // n
    assert all(r["correct"] for r in rows), "the extra copy must be harmless"
    for r in rows:
        sent_extra = chunk if r["rank"] == 0 else 0
        recv_extra = chunk if r["rank"] == 1 else 0
        assert r["bytes_sent"] == r["predicted_sent"] + sent_extra, r
        assert r["bytes_received"] == r["predicted_received"] + recv_extra, r


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_counters_catch_one_extra_chunk(transport):
    """The transport counts what crosses it, not what the plan says: a
    schedule with one chunk too many shows up as a byte mismatch."""
    rows = wk.launch(extra_chunk.measure, 3, transport=transport, timeout=45)
    _check_extra_chunk_caught(rows, 3)


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(90)
def test_counters_catch_one_extra_chunk_mpi():
    result = mpi_script("extra_chunk", 3, timeout=60)
    _check_extra_chunk_caught(result["rows"], 3)
