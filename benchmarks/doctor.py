"""Speed of the cluster doctor (issue 28, item 7): a 100,000-line log
diagnosed in under 1 s.

Run:  python benchmarks/doctor.py [--lines 100000] [--repeat 3] [--check]

The log is what a long job's output looks like: nccl-tests runs of a
2-node DGX H100 (all_reduce, all_gather, reduce_scatter, 8 B to 8 GiB)
concatenated, each with its ``# Using devices`` lines and NCCL INFO lines
(version, comm, NET/IB, one Channel line per rank and channel) before its
rows, repeated until the file has ``--lines`` lines. The time is the whole
``examine([path])``: read, parse, the model's numbers (their cache cleared
first: cold), verdict and causes. ``--check`` exits 1 above the target.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from doctor_samples import info, run_lines  # noqa: E402

from warmup_kit import cliargs  # noqa: E402
from warmup_kit.doctor import examine  # noqa: E402
from warmup_kit.doctor.expect import expected  # noqa: E402

TARGET_S = 1.0
MARKER = {"allreduce": "all_reduce_perf", "all_gather": "all_gather_perf",
          "reduce_scatter": "reduce_scatter_perf"}


def one_run(collective: str) -> list[str]:
    lines = run_lines("dgx-h100", collective, hosts=2, per_host=8)
    at = next(i for i, line in enumerate(lines)
              if line.startswith("#       size"))
    msgs = ["NCCL version 2.18.5+cuda12.2",
            "comm 0x5 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0",
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB "
            "[3]mlx5_5:1/IB [4]mlx5_6:1/IB [5]mlx5_9:1/IB [6]mlx5_10:1/IB "
            "[7]mlx5_11:1/IB ; OOB eth0:10.0.0.1<0>"]
    for ch in range(16):
        for r in range(16):
            via = ("NET/IB/%d/GDRDMA" % (r % 8) if r % 8 == 7
                   else "P2P/IPC/read")
            msgs.append("Channel %02d/0 : %d[%d] -> %d[%d] via %s"
                        % (ch, r, r % 8, (r + 1) % 16, (r + 1) % 8, via))
    return ([f"# Collective test starting: {MARKER[collective]}"]
            + lines[:at] + [info(msg=m) for m in msgs] + lines[at:])


def make_log(path: str, n_lines: int) -> int:
    out: list[str] = []
    colls = list(MARKER)
    i = 0
    while len(out) < n_lines:
        out += one_run(colls[i % len(colls)])
        i += 1
    out = out[:n_lines]
    Path(path).write_text("\n".join(out) + "\n")
    return i


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=cliargs.int_range(1000, 10_000_000),
                   default=100_000)
    p.add_argument("--repeat", type=cliargs.positive_int, default=5)
    p.add_argument("--check", action="store_true",
                   help=f"exit 1 if the CPU time's median is over "
                        f"{TARGET_S} s")
    args = p.parse_args(argv)
    fd, path = tempfile.mkstemp(suffix=".log", prefix="doctor-bench-")
    os.close(fd)
    try:
        make_log(path, args.lines)
        times, cpu, ds = [], [], []
        for _ in range(args.repeat):
            expected.cache_clear()
            t, c = time.perf_counter(), time.process_time()
            ds = examine([path])
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    finally:
        os.unlink(path)
    med = statistics.median(cpu)
    rows = sum(len(d.rows) for d in ds)
    print(f"doctor: {args.lines} lines, {len(ds)} runs, {rows} rows: "
          f"CPU median {med:.3f} s, wall median "
          f"{statistics.median(times):.3f} s (min {min(times):.3f} s) over "
          f"{args.repeat}; load average {os.getloadavg()[0]:.1f}; target "
          f"< {TARGET_S} s")
    if args.check and med >= TARGET_S:
        print(f"FAIL: {med:.3f} s >= {TARGET_S} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
