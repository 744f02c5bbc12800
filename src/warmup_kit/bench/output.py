"""The bench's output: the nccl-tests table, its parser, CSV and JSON."""
from __future__ import annotations

import csv
import json
import os
import platform

import numpy as np

from warmup_kit.machine import cores, cpu_name

COLUMNS = ("size", "count", "type", "redop", "root", "algorithm", "time_us",
           "spread_pct", "algbw_gbps", "busbw_gbps", "wrong")
LEGEND = ("# time: median over iterations of the slowest rank's time; "
          "spread: interquartile range, % of the median;\n"
          "# algbw = size / time; busbw = algbw x the collective's "
          "nccl-tests factor; #wrong: elements that differ from the "
          "expected result")


def table(results: list[dict], header: dict) -> str:
    """The nccl-tests table: one line per size and implementation."""
    lines = [f"# warmup-bench: {header['collective']}, {header['ranks']} "
             f"ranks over {header['transport']}, {header['type']} "
             f"{header['redop']}, iters {header['iters']} warmup "
             f"{header['warmup']}, check {'on' if header['check'] else 'off'}",
             f"# timed: {header.get('timed', '')}",
             f"# machine: {header['machine']}",
             LEGEND,
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
    keys = [k for k in results[0] if k != "times_us"] if results else []
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)


def write_json(path: str, header: dict, results: list[dict]) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"header": header, "rows": results}, f, indent=1)


def machine(transport: str) -> str:
    """A one-line label of this machine, for stored measurements."""
    lib = ""
    if transport == "mpi":
        from mpi4py import MPI
        lib = ", " + MPI.Get_library_version().splitlines()[0].strip()
    return (f"{platform.node()}, {cpu_name()}, {cores()} cores, "
            f"Linux {platform.release()}, numpy {np.__version__}{lib}")
