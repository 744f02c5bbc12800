"""The shared harness: flags, timing, checking and the output table.

Modelled on nccl-tests (``src/common.cu``): one harness, one small file per
collective. Every size is checked before it is timed (``#wrong``); our
implementations and the MPI library's own collective ("mpi") are timed
interleaved, iteration by iteration, so a noisy machine disturbs them alike.
An iteration's time is the slowest rank's; the table shows the median over
iterations and its spread (interquartile range, % of the median).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from warmup_kit.algorithms import algorithms_for, build
from warmup_kit.comm.base import deadline_after
from warmup_kit.ops import check_dtype
from warmup_kit.bench.record import Collective, wrong

MPI_ENV = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID")
TYPE_NAMES = {"float64": "double", "float32": "float", "float16": "half",
              "int8": "int8", "uint8": "uint8", "int32": "int32",
              "uint32": "uint32", "int64": "int64", "uint64": "uint64"}
COLUMNS = ("size", "count", "type", "redop", "root", "algorithm", "time_us",
           "spread_pct", "algbw_gbps", "busbw_gbps", "wrong")


@dataclass
class Options:
    """What to sweep (the nccl-tests flags, plus ours)."""

    collective: str = "allreduce"
    algorithms: tuple = ()          # empty: the default algorithm (+ "mpi")
    minbytes: int = 8
    maxbytes: int = 64 << 20
    stepfactor: int = 2
    stepbytes: int = 0              # > 0: add instead of multiply
    iters: int = 20
    warmup: int = 5
    check: bool = True
    dtype: str = "float64"
    op: str = "sum"
    root: int = 0
    timeout: float | None = None    # per call; None: like MPI, no deadline
    progress: bool = False
    sizes: tuple = field(default=())  # explicit sizes override the sweep
    passes: int = 1                 # > 1: sweep again, -n iterations each
                                    # pass, so a burst of load elsewhere
                                    # hits a fraction of each size's samples

    def sweep(self) -> list[int]:
        """Byte sizes, -b to -e by factor -f (or by -i bytes)."""
        if self.sizes:
            return list(self.sizes)
        out, v = [], self.minbytes
        while v <= self.maxbytes:
            out.append(v)
            nxt = v + self.stepbytes if self.stepbytes else v * self.stepfactor
            if nxt <= v:
                break
            v = nxt
        return out


# -------------------------------------------------------------- contexts
class MPIContext:
    """Ranks under mpiexec: our MPIComm plus the library's communicator."""

    transport = "mpi"

    def __init__(self) -> None:
        from mpi4py import MPI

        from warmup_kit.comm.mpi import MPIComm
        self.world = MPI.COMM_WORLD.Dup()
        self.comm = MPIComm(self.world)
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()

    def barrier(self) -> None:
        self.world.Barrier()

    def gather(self, obj):
        return self.world.gather(obj, root=0)   # small result rows only

    def close(self) -> None:
        self.world.Barrier()      # no rank exits with a send in flight
        self.comm.close()
        self.world.Free()


class SocketContext:
    """One rank of :func:`warmup_kit.launch` (no library baseline)."""

    transport = "sockets"

    def __init__(self, comm) -> None:
        self.comm, self.world = comm, None
        self.rank, self.size = comm.rank, comm.size
        self._token = np.zeros(1, np.int64)
        self._peers = {p: np.zeros(1, np.int64) for p in range(comm.size)
                       if p != comm.rank}

    def barrier(self) -> None:
        if self.size > 1:      # everyone hears from everyone: a barrier
            self.comm.exchange([(p, self._token) for p in self._peers],
                               list(self._peers.items()), control=True)


# ----------------------------------------------------------------- timing
def implementations(opts: Options, ctx) -> list[str]:
    names = list(opts.algorithms) or [algorithms_for(opts.collective)[0],
                                      "mpi"]
    if ctx.transport != "mpi":
        names = [a for a in names if a != "mpi"]
    known = algorithms_for(opts.collective) + ("mpi",)
    bad = [a for a in names if a not in known]
    if bad:
        raise ValueError(f"unknown {opts.collective} algorithm(s) {bad}; "
                         f"choose from {list(known)}")
    return names


def bench_rank(ctx, opts: Options, coll: Collective) -> list[dict]:
    """Every size and implementation on this rank: check, warm up, time.

    Returns one row per (size, implementation) with this rank's
    per-iteration times (seconds) and its count of wrong elements.
    """
    n, rank = ctx.size, ctx.rank
    dtype = check_dtype(opts.dtype)
    op = opts.op if coll.reduces else None
    impls = implementations(opts, ctx)
    schedules = {a: build(coll.name, a, n, root=opts.root)
                 for a in impls if a != "mpi"}
    sizes = opts.sweep()
    times: dict = {}
    bad: dict = {}
    counts: dict = {}
    passes = max(1, opts.passes)
    for p in range(passes):
        for k, nbytes in enumerate(sizes):
            lay = coll.layout(nbytes // dtype.itemsize, n)
            if lay.count == 0:
                continue
            counts[k] = lay.count
            bufs = coll.alloc(lay, dtype)
            bufs.send[:] = coll.init(rank, n, lay, dtype, op, opts.root)

            def call(a):
                if a == "mpi":
                    return coll.run_mpi(ctx.world, bufs, opts.op, opts.root,
                                        rank)
                return coll.run_ours(schedules[a], bufs, ctx.comm, opts.op,
                                     deadline_after(opts.timeout), opts.root,
                                     rank)
            if p == 0:
                want = (coll.expected(rank, n, lay, dtype, op, opts.root)
                        if opts.check else None)
                for a in impls:
                    for arr in (bufs.recv, bufs.work):
                        if arr is not None:
                            arr.fill(_sentinel(dtype))
                    ctx.barrier()
                    bad[(k, a)] = wrong(call(a), want) if opts.check else 0
            for it in range(opts.warmup + opts.iters):
                for a in impls:
                    ctx.barrier()
                    t0 = time.perf_counter()
                    call(a)
                    dt = time.perf_counter() - t0
                    if it >= opts.warmup:
                        times.setdefault((k, a), []).append(dt)
            if opts.progress and rank == 0:
                _progress(p * len(sizes) + k + 1, passes * len(sizes),
                          coll.name, nbytes)
    if opts.progress and rank == 0:
        print(file=sys.stderr)
    return [{"size": counts[k] * dtype.itemsize, "count": counts[k],
             "algorithm": a, "times": times[(k, a)], "wrong": bad[(k, a)]}
            for k in sorted(counts) for a in impls]


def _sentinel(dtype: np.dtype):
    return np.nan if dtype.kind in "fc" else np.iinfo(dtype).max


def _progress(done: int, total: int, name: str, nbytes: int) -> None:
    width = 30
    fill = int(width * done / total)
    sys.stderr.write(f"\r[warmup-bench] {name} [{'#' * fill}"
                     f"{'.' * (width - fill)}] {done}/{total} sizes "
                     f"({human(nbytes)})  ")
    sys.stderr.flush()


def merge(per_rank: list[list[dict]], opts: Options, coll: Collective,
          n: int) -> list[dict]:
    """One result row per (size, implementation) from every rank's rows.

    An iteration lasts as long as its slowest rank; the median over
    iterations is the time, the interquartile range its spread.
    """
    out = []
    factor = coll.busbw_factor(n)
    for i, row in enumerate(per_rank[0]):
        t = np.max([np.asarray(rows[i]["times"]) for rows in per_rank], axis=0)
        med = float(np.median(t))
        q1, q3 = np.percentile(t, [25, 75])
        algbw = row["size"] / med / 1e9 if med > 0 else 0.0
        out.append({
            "collective": coll.name, "ranks": n, "size": row["size"],
            "count": row["count"],
            "type": TYPE_NAMES.get(opts.dtype, opts.dtype),
            "redop": opts.op if coll.reduces else "none",
            "root": opts.root if coll.name in ("broadcast", "reduce") else -1,
            "algorithm": row["algorithm"], "time_us": med * 1e6,
            "spread_pct": float((q3 - q1) / med * 100) if med > 0 else 0.0,
            "min_us": float(t.min() * 1e6), "max_us": float(t.max() * 1e6),
            "algbw_gbps": algbw, "busbw_gbps": algbw * factor,
            "wrong": int(sum(rows[i]["wrong"] for rows in per_rank)),
            "times_us": [float(x * 1e6) for x in t]})
    return out


# ----------------------------------------------------------------- output
def human(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def table(results: list[dict], header: dict) -> str:
    """The nccl-tests table: one line per size and implementation."""
    lines = [f"# warmup-bench: {header['collective']}, {header['ranks']} "
             f"ranks over {header['transport']}, {header['type']} "
             f"{header['redop']}, iters {header['iters']} warmup "
             f"{header['warmup']}, check {'on' if header['check'] else 'off'}",
             f"# machine: {header['machine']}",
             "#",
             f"# {'size':>10} {'count':>12} {'type':>7} {'redop':>6} "
             f"{'root':>5} {'algorithm':>19} {'time':>10} {'spread':>7} "
             f"{'algbw':>7} {'busbw':>7} {'#wrong':>7}",
             f"# {'(B)':>10} {'(elements)':>12} {'':>7} {'':>6} {'':>5} "
             f"{'':>19} {'(us)':>10} {'(%)':>7} {'(GB/s)':>7} {'(GB/s)':>7} "
             f"{'':>7}"]
    for r in results:
        lines.append(
            f"  {r['size']:>10} {r['count']:>12} {r['type']:>7} "
            f"{r['redop']:>6} {r['root']:>5} {r['algorithm']:>19} "
            f"{r['time_us']:>10.2f} {r['spread_pct']:>7.1f} "
            f"{r['algbw_gbps']:>7.3f} {r['busbw_gbps']:>7.3f} "
            f"{r['wrong']:>7}")
    bad = sum(r["wrong"] for r in results)
    lines.append(f"# Out of bounds values : {bad} {'OK' if not bad else 'FAILED'}")
    for a in dict.fromkeys(r["algorithm"] for r in results):
        bw = [r["busbw_gbps"] for r in results if r["algorithm"] == a]
        lines.append(f"# Avg bus bandwidth    : {np.mean(bw):.4f} GB/s ({a})")
    return "\n".join(lines)


def parse_table(text: str) -> list[dict]:
    """Rows of a :func:`table` (comment lines skipped), typed."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split()
        if len(f) != len(COLUMNS):
            raise ValueError(f"not a table row: {line!r}")
        row = dict(zip(COLUMNS, f))
        for k in ("size", "count", "root", "wrong"):
            row[k] = int(row[k])
        for k in ("time_us", "spread_pct", "algbw_gbps", "busbw_gbps"):
            row[k] = float(row[k])
        rows.append(row)
    return rows


def write_csv(path: str, results: list[dict]) -> None:
    import csv
    keys = [k for k in results[0] if k != "times_us"] if results else []
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)


def machine(transport: str) -> str:
    """A one-line label of this machine, for stored measurements."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    lib = ""
    if transport == "mpi":
        from mpi4py import MPI
        lib = ", " + MPI.Get_library_version().splitlines()[0].strip()
    return (f"{platform.node()}, {cpu}, {os.cpu_count()} cores, "
            f"Linux {platform.release()}, numpy {np.__version__}{lib}")


# ------------------------------------------------------------------- CLI
def parse_size(text: str) -> int:
    """'8', '1K', '64M', '1G' -> bytes (nccl-tests suffixes)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="warmup-bench",
        description="nccl-tests-style sweeps of warmup_kit's collectives "
                    "(and the MPI library's own, as 'mpi'), checked.",
        epilog="Under MPI: mpiexec -n 4 python -m warmup_kit.bench -b 8 -e "
               "64M -f 2. Without: python -m warmup_kit.bench --world 4.")
    p.add_argument("--collective", default="allreduce",
                   choices=["allreduce", "reduce_scatter", "all_gather",
                            "broadcast", "reduce", "all_to_all"])
    p.add_argument("--algorithms", default="",
                   help="comma list of algorithms and/or 'mpi', or 'all' "
                        "(default: the collective's default and 'mpi')")
    p.add_argument("-b", "--minbytes", type=parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=64 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-i", "--stepbytes", type=parse_size, default=0)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("--passes", type=int, default=1,
                   help="sweep the sizes this many times (-n and -w per "
                        "pass); the median is over all passes")
    p.add_argument("-c", "--check", type=int, default=1, choices=[0, 1])
    p.add_argument("-d", "--datatype", default="float64")
    p.add_argument("-o", "--op", default="sum",
                   choices=["sum", "prod", "max", "min"])
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("--world", type=int, default=None,
                   help="run N ranks over TCP sockets instead of MPI")
    p.add_argument("--timeout", type=float, default=None,
                   help="per-call deadline in seconds (default: none, as "
                        "the library has none)")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--json", help="also write header and rows (with every "
                                  "iteration's time) to this JSON file")
    p.add_argument("--progress", action="store_true", default=None,
                   help="progress bar on stderr (default: if a terminal)")
    return p.parse_args(argv)


def options(args: argparse.Namespace) -> Options:
    if args.algorithms == "all":
        algs = algorithms_for(args.collective) + ("mpi",)
    else:
        algs = tuple(a.strip() for a in args.algorithms.split(",") if a)
    progress = (sys.stderr.isatty() if args.progress is None
                else args.progress)
    return Options(args.collective, algs, args.minbytes, args.maxbytes,
                   args.stepfactor, args.stepbytes, args.iters,
                   args.warmup_iters, bool(args.check), args.datatype,
                   args.op, args.root, args.timeout, progress,
                   passes=args.passes)


def under_mpi() -> bool:
    return any(v in os.environ for v in MPI_ENV)


def report(results: list[dict], opts: Options, n: int, transport: str,
           args) -> dict:
    header = {"collective": opts.collective, "ranks": n,
              "transport": transport,
              "type": TYPE_NAMES.get(opts.dtype, opts.dtype),
              "redop": opts.op, "iters": opts.iters, "warmup": opts.warmup,
              "check": opts.check, "machine": machine(transport),
              "options": asdict(opts)}
    print(table(results, header), flush=True)
    if getattr(args, "csv", None):
        write_csv(args.csv, results)
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            json.dump({"header": header, "rows": results}, f, indent=1)
    return header
