"""Performance targets for a 2-core machine: the public collectives
against the floor of the same exchange written directly with mpi4py, the
MPI library's own collective and the machine's memory.

Usage::

    python benchmarks/targets.py --check          # N = 2 and N = 4, and shm
    python benchmarks/targets.py --check --ranks 2 --json results/t.json

What is timed is what a reader calls: ``warmup_kit.allreduce(sendbuf,
comm, out=recvbuf, algorithm=...)``, default settings otherwise, float64
sum, every result checked first. Each target is printed with its reason.
Rows of an N with more ranks than cores are printed as informational:
ranks then take turns on the cores, and a time measures the scheduler's
time slices as much as our code (their results are still checked).

MPIComm, for each N, under the venv's ``mpiexec`` (MPICH):

* latency, 8 bytes: the kit's call with default settings (``wk.allreduce(x,
  comm, out=y)``), the same messages written directly with mpi4py
  (:func:`direct_allreduce`: the default algorithm's rounds, ``Send`` /
  ``Recv`` / ``Sendrecv`` on numpy buffers and ``np.add``, from Python: the
  CPython floor) and MPICH's ``Allreduce``, timed interleaved iteration by
  iteration in one job (``--rank latency``; medians of the slowest rank):
  kit <= 2x the direct exchange and <= 2.5x MPICH's;
* busbw of our ring >= 1.2x the library's at 64 MiB and 16 MiB, >= 0.9x at
  1 MiB (``warmup-bench``, interleaved, 5 passes);
* the host alpha-beta-gamma model (:mod:`warmup_kit.measure.fit_host`, with
  its cache-resident bandwidth), fitted once per N on all our algorithms
  (1 KiB - 64 MiB), predicts the ring's measured times within 25% at every
  size (the per-size errors are printed; the textbook fit of
  :mod:`warmup_kit.measure.fit` is shown beside it, for reference);
* no wrong result anywhere.

ShmComm, N = 2: our ring over shared memory (``warmup-bench --world 2
--transport shm``), the library's MPI_Allreduce under mpiexec and the
add-and-copy bound (:func:`add_copy_bound`), in turn, several times over
(medians of all samples):

* busbw >= 2x the library's at 16 MiB and 64 MiB, >= 1x at 1 MiB;
* busbw >= 0.8 of the add-and-copy bound at 64 MiB: two processes at once,
  each doing what a rank of the 2-rank ring must do to its bytes (add its
  half to the peer's, copy the peer's other half), numpy, no
  synchronisation between them: the memory's limit on this machine, now.

It prints one table per N and one for shared memory, with the ratios
computed and compared unrounded (printed to 3 digits), the fit, the
ring/tree crossover (predicted and measured), and exits 1 if any target
that is not informational is missed. MPICH is told to yield
(MPIR_CVAR_CH4_PROGRESS_THROTTLE=1, MPIR_CVAR_POLLS_BEFORE_YIELD=100).
Timings on a shared machine are noisy: run it again before believing a
miss; the load average is printed beside each table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from warmup_kit.measure import fit as F
from warmup_kit.measure import fit_host as H
from warmup_kit.comm.mpirun import MPICH_YIELD_ENV, find_mpiexec
from warmup_kit.machine import cores as core_count
from warmup_kit.machine import load_average
from warmup_kit.units import human_bytes as human

HERE = Path(__file__).resolve()

#: (size in bytes, minimum ratio ours/library busbw, reason)
BW_TARGETS = [
    (64 << 20, 1.2, "our ring reduces each slice as it lands and the "
     "public call runs out of place: one pass over the bytes where "
     "MPICH's large all-reduce copies into its buffer first"),
    (16 << 20, 1.2, "as at 64 MiB"),
    (1 << 20, 0.9, "the data still fits in the cores' caches; our Python "
     "per message and slice then weighs, so we ask only not to lose much")]
LATENCY_BYTES = 8
#: the kit's 8-byte call against the same messages sent directly with
#: mpi4py (the CPython floor) and against MPICH's Allreduce
LATENCY_VS_DIRECT, LATENCY_VS_MPI = 2.0, 2.5
LATENCY_REASONS = {
    "direct": "the same messages from Python: what is left above that floor "
              "is the kit's own work per call (checks, plan lookup, "
              "executor); at most as much again",
    "mpi": "MPICH's Allreduce is one call into C; ours is a Python loop of "
           "point-to-point calls, so even the floor is above it; 2.5x "
           "bounds the gap"}
LATENCY_WARMUP = 50
#: shared memory, N = 2: (size, minimum ratio ours/library busbw, reason)
SHM_TARGETS = [
    (64 << 20, 2.0, "the receiver reduces straight out of the sender's "
     "segment: no message, no copy through MPICH's cells"),
    (16 << 20, 2.0, "as at 64 MiB"),
    (1 << 20, 1.0, "in cache both are fast; at least as fast as MPI")]
SHM_BOUND_MIN = 0.8
SHM_BOUND_BYTES = 64 << 20
SHM_BOUND_REASON = ("the add-and-copy bound is the memory's limit for "
                    "this work on this machine now; the ring's rounds and "
                    "waits may cost at most a fifth of it")
SHM_SIZES = (1 << 20, 16 << 20, 64 << 20)
PASSES = 5
FIT_MAX_ERROR, FIT_RANGE = 0.25, (1 << 10, 64 << 20)
FIT_REASON = ("one set of costs per N, with the cache's speed-up as a "
              "mechanism, must explain every size, or the book's "
              "predictions from it mean nothing")
WRONG_REASON = "a fast wrong answer is not an answer"
FIT_ALGORITHMS = ("ring", "tree", "recursive_doubling", "rabenseifner")
INFO_REASON = "more ranks than cores: they take turns, so times are the " \
              "scheduler's as much as ours (informational)"


# ------------------------------------------------------------ the checks
def check(target: str, ours: str, library: str, ratio: float, need: float,
          at_most: bool, reason: str, info: bool = False) -> dict:
    """One target: ``ratio`` against ``need`` (``at_most``: ratio <= need,
    else ratio >= need). ``info``: printed, never counted."""
    ok = ratio <= need if at_most else ratio >= need
    return {"target": target, "ours": ours, "library": library,
            "ratio": float(ratio),
            "need": f"{'<=' if at_most else '>='} {need:g}",
            "ok": bool(ok), "info": bool(info), "reason": reason}


def informational(n: int, ncores: int) -> bool:
    """Whether the performance rows of an N-rank job are informational."""
    return n > ncores


def passed(checks: list[dict]) -> bool:
    """Every target that counts is met (informational ones never fail)."""
    return all(c["ok"] or c.get("info", False) for c in checks)


def verdict(c: dict) -> str:
    yes = "yes" if c["ok"] else "NO"
    return f"info ({yes.lower()})" if c.get("info") else yes


def wrong_check(bad: int) -> dict:
    return check("#wrong (every row checked)", str(bad), "-", float(bad), 0,
                 True, WRONG_REASON)


# ---------------------------------------------- the direct mpi4py floor
def exchange_pattern(n: int, nbytes: int = LATENCY_BYTES,
                     itemsize: int = 8) -> list[list[tuple[int, int, bool]]]:
    """The messages the kit's all-reduce of ``nbytes`` sends with default
    settings: per round, ``(src, dst, reduce)`` of each transfer that
    carries data (a transfer of empty chunks is not sent)."""
    from warmup_kit.algorithms import build, default_algorithm
    from warmup_kit.schedule import chunk_sizes
    s = build("allreduce", default_algorithm("allreduce"), n)
    sizes = chunk_sizes(nbytes // itemsize, s.chunks)
    out = []
    for rnd in s.rounds:
        moves = [(t.src, t.dst, bool(t.reduce)) for t in rnd
                 if sum(sizes[c] for c in t.chunks)]
        if moves:
            out.append(moves)
    return out


def direct_allreduce(comm, x: np.ndarray, out: np.ndarray, tmp: np.ndarray,
                     pattern, rank: int) -> np.ndarray:
    """The kit's small all-reduce written directly with mpi4py: each
    round of ``pattern`` (:func:`exchange_pattern`) as one ``Sendrecv``,
    ``Send`` or ``Recv`` of numpy buffers, then ``np.add`` (a reducing
    round) or a copy (the others)."""
    out[...] = x
    for moves in pattern:
        to = [d for s, d, _ in moves if s == rank]
        frm = [(s, red) for s, d, red in moves if d == rank]
        if len(to) > 1 or len(frm) > 1:
            raise ValueError("direct_allreduce: one message each way per "
                             "round only")
        if to and frm:
            comm.Sendrecv(out, to[0], recvbuf=tmp, source=frm[0][0])
        elif to:
            comm.Send(out, to[0])
        elif frm:
            comm.Recv(tmp, frm[0][0])
        if frm:
            if frm[0][1]:
                np.add(out, tmp, out=out)
            else:
                out[...] = tmp
    return out


def latency_rank(iters: int, warmup: int, out_path: str) -> None:
    """Rank side of the latency job (under mpiexec): the kit's call, the
    direct exchange and MPICH's Allreduce, checked, then timed in turn
    (after a barrier each), iteration by iteration; rank 0 writes each
    one's per-iteration slowest-rank times (us) and wrong counts."""
    from mpi4py import MPI

    import warmup_kit as wk
    from warmup_kit.comm.mpi import MPIComm
    world, direct = MPI.COMM_WORLD.Dup(), MPI.COMM_WORLD.Dup()
    kit = MPIComm(world)
    rank, n = world.Get_rank(), world.Get_size()
    x = np.array([float(rank + 1)])
    y, tmp = np.empty(1), np.empty(1)
    want = n * (n + 1) / 2
    pattern = exchange_pattern(n)
    calls = {"kit": lambda: wk.allreduce(x, kit, out=y),
             "direct": lambda: direct_allreduce(direct, x, y, tmp, pattern,
                                                rank),
             "mpi": lambda: world.Allreduce(x, y)}
    wrong = {}
    for name, call in calls.items():
        y[:] = np.nan
        world.Barrier()
        call()
        wrong[name] = int(y[0] != want)
    times = {k: [] for k in calls}
    for it in range(warmup + iters):
        for name, call in calls.items():
            world.Barrier()
            t0 = time.perf_counter()
            call()
            dt = time.perf_counter() - t0
            if it >= warmup:
                times[name].append(dt)
    got = world.gather((times, wrong), root=0)
    if rank == 0:
        doc = {"ranks": n, "iters": iters, "pattern": pattern,
               "times_us": {k: (np.max([g[0][k] for g in got], axis=0)
                                * 1e6).tolist() for k in calls},
               "wrong": {k: sum(g[1][k] for g in got) for k in calls}}
        Path(out_path).write_text(json.dumps(doc))
    world.Barrier()
    kit.close()
    world.Free()
    direct.Free()


def measure_latency(n: int, iters: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "latency.json"
        cmd = [find_mpiexec(), "-n", str(n), sys.executable, str(HERE),
               "--rank", "latency", "--iters", str(iters), "--out",
               str(out)]
        env = {**os.environ, **MPICH_YIELD_ENV}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):"
                               f"\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def latency_checks(lat: dict, info: bool = False) -> list[dict]:
    """The two 8-byte targets from a latency job's times."""
    med = {k: statistics.median(v) for k, v in lat["times_us"].items()}
    out = []
    for base, need, what in (("direct", LATENCY_VS_DIRECT,
                              "direct mpi4py exchange"),
                             ("mpi", LATENCY_VS_MPI, "MPICH Allreduce")):
        out.append(check(f"latency 8 B kit/{what}", f"{med['kit']:.1f} us",
                         f"{med[base]:.1f} us", med["kit"] / med[base],
                         need, True, LATENCY_REASONS[base], info))
    return out


# ----------------------------------------------------------- MPIComm, N
def bench(n: int, args: list[str], timeout: float, mpi: bool = True) -> dict:
    """One ``warmup-bench`` job (under mpiexec, or ``--world n``); its JSON
    output."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        if mpi:
            cmd = [find_mpiexec(), "-n", str(n), sys.executable, "-m",
                   "mpi4py", "-m", "warmup_kit.bench", "--json", str(out),
                   *args]
        else:
            cmd = [sys.executable, "-m", "warmup_kit.bench", "--world",
                   str(n), "--json", str(out), *args]
        env = {**os.environ, **MPICH_YIELD_ENV}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):"
                               f"\n{proc.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def measure(n: int, iters: int, timeout: float) -> dict:
    lat = measure_latency(n, iters * 20, timeout)
    # the sweep runs PASSES times over, iters / PASSES iterations a pass: a
    # burst of load from elsewhere then lands on a few samples of every
    # size rather than on all samples of one (the fit compares sizes)
    sweep = bench(n, ["-b", "1K", "-e", "64M", "-f", "4", "-n",
                      str(max(1, iters // PASSES)), "--passes", str(PASSES),
                      "-w", "2", "--algorithms",
                      ",".join(FIT_ALGORITHMS + ("mpi",))], timeout)
    return {"header": sweep["header"], "latency": lat,
            "sweep": sweep["rows"]}


def _row(rows, size, alg):
    for r in rows:
        if r["size"] == size and r["algorithm"] == alg:
            return r
    raise KeyError(f"no {alg} row at {size} bytes")


def evaluate(n: int, data: dict, ncores: int | None = None
             ) -> tuple[list[dict], dict]:
    """Every target for one N: rows of (what, ours, library, ratio, need,
    ok, info, reason); informational when N exceeds ``ncores``."""
    info = informational(n, ncores or core_count())
    sweep, lat = data["sweep"], data["latency"]
    checks = latency_checks(lat, info)
    for size, need, why in BW_TARGETS:
        ours, lib = _row(sweep, size, "ring"), _row(sweep, size, "mpi")
        checks.append(check(f"busbw ring/mpi {size >> 20} MiB",
                            f"{ours['busbw_gbps']:.3f} GB/s",
                            f"{lib['busbw_gbps']:.3f} GB/s",
                            ours["busbw_gbps"] / lib["busbw_gbps"], need,
                            False, why, info))
    fitted = F.fit(sweep, min_bytes=FIT_RANGE[0], max_bytes=FIT_RANGE[1],
                   algorithms=FIT_ALGORITHMS)
    host = H.fit_host(sweep, min_bytes=FIT_RANGE[0], max_bytes=FIT_RANGE[1],
                      algorithms=FIT_ALGORITHMS, ncores=ncores, cache=True)
    ring_err = [e for e in host.errors if e["algorithm"] == "ring"]
    worst = max(abs(e["rel_error"]) for e in ring_err)
    checks.append(check("fit: ring within 25%, 1 KiB-64 MiB",
                         f"max {worst:.0%}", "-", worst, FIT_MAX_ERROR, True,
                         FIT_REASON, info))
    checks.append(wrong_check(sum(r["wrong"] for r in sweep)
                              + sum(lat["wrong"].values())))
    model = {"fit": fitted.as_dict(),
             "errors": {a: max(abs(e["rel_error"]) for e in fitted.errors
                               if e["algorithm"] == a)
                        for a in FIT_ALGORITHMS},
             "host_fit": host.as_dict(),
             "host_errors": {a: max(abs(e["rel_error"]) for e in host.errors
                                    if e["algorithm"] == a)
                             for a in FIT_ALGORITHMS},
             "host_ring_errors": {e["size"]: e["rel_error"]
                                  for e in ring_err},
             "crossover_ring_tree_predicted":
                 F.crossover_predicted("ring", "tree", n, fitted),
             "crossover_ring_tree_measured":
                 F.crossover_measured(sweep, "ring", "tree")}
    return checks, model


def table(checks: list[dict]) -> list[str]:
    lines = [f"  {'target':<36}{'ours':>14}{'library':>14}{'ratio':>8}"
             f"{'need':>9}  ok"]
    for c in checks:
        lines.append(f"  {c['target']:<36}{c['ours']:>14}{c['library']:>14}"
                     f"{c['ratio']:>8.3f}{c['need']:>9}  {verdict(c)}")
        lines.append(f"      why: {c['reason']}")
    return lines


def _share(n: int) -> str:
    c = core_count()
    return (f"{n} ranks share {c} cores (oversubscribed: performance rows "
            "informational)" if informational(n, c)
            else f"{n} ranks on {c} cores")


def show(n: int, checks: list[dict], model: dict, header: dict) -> str:
    lines = [f"N = {n}, MPIComm: {_share(n)}; float64 sum; load average "
             f"{header.get('loadavg', 0):.1f}; {header['machine']}",
             f"  timed: {header.get('timed', '')}; latency: kit = "
             "wk.allreduce(x, comm, out=y), direct = the same messages "
             "with mpi4py from Python, MPICH = comm.Allreduce"]
    lines += table(checks)
    f, h = model["fit"], model["host_fit"]
    cp, cm = (model["crossover_ring_tree_predicted"],
              model["crossover_ring_tree_measured"])
    lines.append(f"  host model: call {h['call_us']:.1f} us, alpha "
                 f"{h['alpha_us']:.1f} us/round, mu {h['mu_us']:.1f} us/msg, "
                 f"rho {h['rho_us']:.1f} us/rendezvous msg, "
                 f"beta {h['beta_ns_per_byte']:.3f} ns/B copied, gamma "
                 f"{h['gamma_ns_per_byte']:.3f} ns/B reduced (out of cache;"
                 f" x{h['cached_factor']:.2f} for the share of the working "
                 f"set within {h['cache_mib']:g} MiB of cache), "
                 f"{h['cores']} cores; rms error {h['rms_rel_error']:.0%}; "
                 "max error per algorithm: "
                 + ", ".join(f"{a} {e:.0%}" for a, e in
                             model["host_errors"].items()))
    lines.append("  host model, ring error by size: " + ", ".join(
        f"{human(int(v))} {e:+.0%}" for v, e in
        sorted(model["host_ring_errors"].items(), key=lambda x: int(x[0]))))
    lines.append(f"  textbook fit (reference): alpha {f['alpha_us']:.2f} us, beta "
                 f"{f['beta_ns_per_byte']:.4f} ns/B ({f['bandwidth_gbps']:.2f}"
                 f" GB/s), gamma {f['gamma_ns_per_byte']:.4f} ns/B; rms error "
                 f"{f['rms_rel_error']:.0%}; max error per algorithm: "
                 + ", ".join(f"{a} {e:.0%}" for a, e in
                             model["errors"].items()))
    fmt = (lambda v: "none in range" if v is None else f"{v / 1024:,.1f} KiB")
    lines.append(f"  ring overtakes tree above: predicted {fmt(cp)}, "
                 f"measured {fmt(cm)}")
    return "\n".join(lines)


# --------------------------------------------------------- ShmComm, N = 2
def _bound_worker(nbytes: int, reps: int, barrier, queue) -> None:
    half = nbytes // 16                     # float64 elements in V / 2
    x, peer, out = (np.ones(nbytes // 8) for _ in range(3))
    ts = []
    try:
        for _ in range(reps):
            barrier.wait()
            t0 = time.perf_counter()
            np.add(x[:half], peer[:half], out=out[:half])
            np.copyto(out[half:], peer[half:])
            ts.append(time.perf_counter() - t0)
    finally:
        queue.put(ts)


def add_copy_bound(nbytes: int, reps: int = 10, timeout: float = 120.0
                   ) -> list[float]:
    """Seconds per iteration (the slower of two processes; the first two
    dropped) of what a rank of a 2-rank ring all-reduce of ``nbytes`` must
    do to its bytes, on two processes at once: add half of them to a
    peer's into its output, copy the peer's other half into it (numpy,
    float64, arrays touched first)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(2, timeout=timeout), ctx.Queue()
    procs = [ctx.Process(target=_bound_worker,
                         args=(nbytes, reps + 2, barrier, queue))
             for _ in range(2)]
    for p in procs:
        p.start()
    got = []
    try:
        deadline = time.monotonic() + timeout
        for _ in procs:
            left = max(1.0, deadline - time.monotonic())
            got.append(queue.get(timeout=left))
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    if len(got) != 2 or min(len(g) for g in got) != reps + 2:
        raise RuntimeError("add_copy_bound: a process did not finish")
    return np.max(np.array(got), axis=0)[2:].tolist()


def measure_shm(iters: int, passes: int, timeout: float) -> dict:
    """Our ring over ShmComm, MPI_Allreduce and the add-and-copy bound,
    N = 2, in turn; per size, every sample of every pass."""
    sweep = ["-b", str(SHM_SIZES[0]), "-e", str(SHM_SIZES[-1]), "-f", "4",
             "-n", str(iters), "-w", "3"]
    samples: dict = {"ring": {}, "mpi": {}, "bound": {}}
    wrong = 0
    header = None
    for p in range(passes):
        jobs = [("mpi", True), ("ring", False)]
        for name, mpi in (jobs if p % 2 == 0 else jobs[::-1]):
            args = sweep + (["--algorithms", "mpi"] if mpi else
                            ["--transport", "shm", "--algorithms", "ring"])
            data = bench(2, args, timeout, mpi=mpi)
            header = header or data["header"] if not mpi else header
            for r in data["rows"]:
                samples[name].setdefault(r["size"], []).extend(r["times_us"])
                wrong += r["wrong"]
        for size in SHM_SIZES:
            samples["bound"].setdefault(size, []).extend(
                t * 1e6 for t in add_copy_bound(size, reps=max(3, iters // 2),
                                                timeout=timeout))
    return {"samples": samples, "wrong": wrong, "header": header}


def evaluate_shm(data: dict) -> list[dict]:
    med = {k: {int(v): statistics.median(t) for v, t in d.items()}
           for k, d in data["samples"].items()}

    def busbw(name, size):        # N = 2: busbw = algbw
        return size / (med[name][size] * 1e-6) / 1e9
    checks = []
    for size, need, why in SHM_TARGETS:
        ours, lib = busbw("ring", size), busbw("mpi", size)
        checks.append(check(f"shm busbw ring/mpi {size >> 20} MiB",
                            f"{ours:.3f} GB/s", f"{lib:.3f} GB/s",
                            ours / lib, need, False, why))
    top = SHM_BOUND_BYTES
    ours, bound = busbw("ring", top), busbw("bound", top)
    checks.append(check(f"shm busbw / add+copy {top >> 20} MiB",
                        f"{ours:.3f} GB/s", f"{bound:.3f} GB/s",
                        ours / bound, SHM_BOUND_MIN, False,
                        SHM_BOUND_REASON))
    checks.append(wrong_check(int(data["wrong"])))
    return checks


def main(argv=None) -> int:
    from warmup_kit import cliargs as A
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if any target is missed")
    p.add_argument("--ranks", type=A.int_range(2, 64), action="append",
                   help="N to run (repeatable; default 2 and 4)")
    p.add_argument("--iters", type=A.positive_int, default=40,
                   help="timed iterations per size (x20 at 8 bytes)")
    p.add_argument("--timeout", type=A.positive_float, default=900.0)
    p.add_argument("--shm-passes", type=A.non_negative_int, default=4,
                   help="alternating MPI / shared-memory jobs (0: skip the "
                        "shared-memory targets)")
    p.add_argument("--json", help="write measurements and checks here")
    # the latency job's rank side (run by main under mpiexec)
    p.add_argument("--rank", choices=("latency",), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank:
        latency_rank(args.iters, LATENCY_WARMUP, args.out)
        return 0
    ok, dump = True, {}
    host = H.measure_host()
    print(f"this machine, numpy on one core: memcpy "
          f"{host['memcpy_gbps']:.1f} GB/s on {host['out_mib']:.0f} MiB "
          f"arrays ({host['memcpy_in_cache_gbps']:.1f} on 2 MiB), add "
          f"{host['add_gbps']:.1f} GB/s ({host['add_in_cache_gbps']:.1f}); "
          f"last-level cache {host['llc_mib']:.0f} MiB (sysfs)", flush=True)
    dump["host"] = host
    for n in args.ranks or [2, 4]:
        data = measure(n, args.iters, args.timeout)
        data["header"]["loadavg"] = load_average() or 0.0
        checks, model = evaluate(n, data)
        print(show(n, checks, model, data["header"]), flush=True)
        ok &= passed(checks)
        dump[n] = {"checks": checks, "model": model, **data}
    if args.shm_passes:
        data = measure_shm(max(5, args.iters // 2), args.shm_passes,
                           args.timeout)
        checks = evaluate_shm(data)
        print("\n".join([f"N = 2, ShmComm ring vs MPI_Allreduce and the "
                         f"add-and-copy bound: {_share(2)}; float64 sum; "
                         f"load average {load_average() or 0.0:.1f}; "
                         f"{args.shm_passes} alternating passes"]
                        + table(checks)), flush=True)
        ok &= passed(checks)
        dump["shm"] = {"checks": checks, **data}
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)),
                    exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)
    print("all targets met" if ok else "some targets MISSED")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
