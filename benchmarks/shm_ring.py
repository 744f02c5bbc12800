"""Issue 4, item 4: our ring all-reduce over shared memory against MPICH.

Usage::

    python benchmarks/shm_ring.py --check             # N = 2 and N = 4
    python benchmarks/shm_ring.py --ranks 4 -n 10 --passes 3 --json out.json

Per pass and N it runs MPICH's MPI_Allreduce (``warmup-bench --algorithms
mpi`` under the venv's mpiexec, ranks told to yield when they share cores)
and our ring over :mod:`warmup_kit.comm.shm` (:func:`launch_shm`, buffers in
the ranks' shared segments, out of place: ``run_schedule_shm(ring, buf,
comm, src=src)``), one right after the other, alternating which goes first.
float64 sum, 1, 16 and 64 MiB; each iteration starts after a barrier and
lasts as long as its slowest rank; medians over all passes' iterations.
Every result is checked.

Columns: busbw (nccl-tests: algbw * 2(N-1)/N), the ratio ours / MPICH
(target: >= 2x at 64 MiB), and "distance to the limit": busbw as a fraction
of this machine's single-core numpy memcpy bandwidth out of cache
(:func:`warmup_kit.measure.fit_host.measure_host`). Load averages before and after
are printed: other jobs on the machine make timings noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from warmup_kit.algorithms import build
from warmup_kit.comm.launch import MPICH_YIELD_ENV, find_mpiexec
from warmup_kit.comm.shm import launch_shm
from warmup_kit.execute.shm import run_schedule_shm
from warmup_kit.measure.fit_host import cores, measure_host

SIZES = (1 << 20, 16 << 20, 64 << 20)
TARGET = (64 << 20, 2.0)


def mpi_times(n: int, iters: int, warmup: int, timeout: float) -> dict:
    """MPI_Allreduce per-iteration times (s) by size, from warmup-bench."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mpi.json"
        cmd = [find_mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py",
               "-m", "warmup_kit.bench", "--algorithms", "mpi", "-b",
               str(SIZES[0]), "-e", str(SIZES[-1]), "-f", "4", "-n",
               str(iters), "-w", str(warmup), "--json", str(out)]
        proc = subprocess.run(cmd, env={**os.environ, **MPICH_YIELD_ENV},
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n"
                               f"{proc.stderr[-2000:]}")
        rows = json.loads(out.read_text())["rows"]
    return {r["size"]: ([t * 1e-6 for t in r["times_us"]], r["wrong"])
            for r in rows if r["size"] in SIZES}


def _ring_rank(comm, iters: int, warmup: int):
    """One rank: time the ring at every size (buffers in the segment)."""
    s = build("allreduce", "ring", comm.size)
    big = max(SIZES) // 8
    src, buf = comm.empty(big), comm.empty(big)
    src[:] = comm.rank + 1.0
    want = comm.size * (comm.size + 1) / 2
    tok = np.zeros(1)
    peers = [p for p in range(comm.size) if p != comm.rank]
    got = {p: np.zeros(1) for p in peers}
    out = {}
    for nbytes in SIZES:
        n = nbytes // 8
        b, x = buf[:n], src[:n]
        b.fill(np.nan)
        run_schedule_shm(s, b, comm, src=x)
        wrong = int(np.count_nonzero(b != want))
        ts = []
        for it in range(warmup + iters):
            comm.exchange([(p, tok) for p in peers], list(got.items()),
                          control=True)                  # a barrier
            t0 = time.perf_counter()
            run_schedule_shm(s, b, comm, src=x)
            if it >= warmup:
                ts.append(time.perf_counter() - t0)
        out[nbytes] = (ts, wrong)
    return out


def shm_times(n: int, iters: int, warmup: int, timeout: float) -> dict:
    per_rank = launch_shm(_ring_rank, n, args=(iters, warmup),
                          shm_bytes=2 * max(SIZES) + (1 << 20),
                          timeout=timeout)
    return {k: (list(np.max([r[k][0] for r in per_rank], axis=0)),
                sum(r[k][1] for r in per_rank)) for k in SIZES}


def busbw(nbytes: int, t: float, n: int) -> float:
    return nbytes / t / 1e9 * 2 * (n - 1) / n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,4")
    p.add_argument("-n", "--iters", type=int, default=8)
    p.add_argument("-w", "--warmup", type=int, default=2)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--check", action="store_true",
                   help="exit 1 if ours < 2x MPICH's busbw at 64 MiB")
    p.add_argument("--json")
    a = p.parse_args(argv)
    ranks = [int(x) for x in a.ranks.split(",")]
    load0 = os.getloadavg()
    host = measure_host()
    limit = host["memcpy_gbps"]
    pooled = {(n, w): {k: [] for k in SIZES} for n in ranks
              for w in ("shm", "mpi")}
    wrong = 0
    for ps in range(a.passes):
        for n in ranks:
            order = ("mpi", "shm") if ps % 2 == 0 else ("shm", "mpi")
            for w in order:
                f = mpi_times if w == "mpi" else shm_times
                res = f(n, a.iters, a.warmup, a.timeout)
                for k in SIZES:
                    pooled[(n, w)][k].extend(res[k][0])
                    wrong += res[k][1]
            print(f"[shm_ring] pass {ps + 1}/{a.passes} N={n} done",
                  file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    rows, ok = [], True
    for n in ranks:
        for k in SIZES:
            ts = float(np.median(pooled[(n, "shm")][k]))
            tm = float(np.median(pooled[(n, "mpi")][k]))
            bs, bm = busbw(k, ts, n), busbw(k, tm, n)
            row = {"ranks": n, "size": k, "shm_ms": ts * 1e3,
                   "mpi_ms": tm * 1e3, "shm_busbw": bs, "mpi_busbw": bm,
                   "ratio": bs / bm, "shm_of_limit": bs / limit,
                   "mpi_of_limit": bm / limit}
            rows.append(row)
            if k == TARGET[0] and row["ratio"] < TARGET[1]:
                ok = False
    c = cores()
    print(f"# ring all-reduce, float64 sum: ours over shared memory vs "
          f"MPICH MPI_Allreduce; {a.passes} passes x {a.iters} iterations, "
          f"medians; {c} cores")
    print(f"# memcpy (numpy, 1 core, out of cache): {limit:.2f} GB/s = the "
          f"limit; load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"{'N':>2} {'cores':>5} {'size':>7} {'shm ms':>9} {'MPI ms':>9} "
          f"{'shm busbw':>10} {'MPI busbw':>10} {'ratio':>6} "
          f"{'shm/limit':>9} {'MPI/limit':>9}")
    for r in rows:
        print(f"{r['ranks']:>2} {c:>5} {r['size'] >> 20:>4}MiB "
              f"{r['shm_ms']:>9.2f} {r['mpi_ms']:>9.2f} "
              f"{r['shm_busbw']:>10.2f} {r['mpi_busbw']:>10.2f} "
              f"{r['ratio']:>5.2f}x {r['shm_of_limit']:>9.2f} "
              f"{r['mpi_of_limit']:>9.2f}")
    if any(n > c for n in ranks):
        print(f"# N > {c}: ranks share cores (MPICH told to yield; ours "
              "yields and sleeps while waiting)")
    print(f"# wrong elements: {wrong}; target ratio >= {TARGET[1]}x at "
          f"{TARGET[0] >> 20} MiB: {'met' if ok else 'MISSED'}")
    if a.json:
        Path(a.json).write_text(json.dumps(
            {"rows": rows, "memcpy_gbps": limit, "host": host, "cores": c,
             "load": [load0, load1]}, indent=1))
    return 0 if (ok and wrong == 0) or not a.check else 1


if __name__ == "__main__":
    sys.exit(main())
