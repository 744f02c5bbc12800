"""The bench's output: the nccl-tests table, its parser, CSV and JSON."""
from __future__ import annotations

import csv
import json
import os
import platform

import numpy as np

from warmup_kit.machine import cores, cpu_name
from warmup_kit.textfit import fit

COLUMNS = ("size", "count", "type", "redop", "root", "algorithm", "time_us",
           "spread_pct", "algbw_gbps", "busbw_gbps", "wrong")
LEGEND = ("# time: median over iterations of the slowest rank's time;\n"
          "# spread: interquartile range, % of the median;\n"
          "# algbw = size / time; busbw = algbw x the collective's "
          "nccl-tests factor;\n"
          "# #wrong: elements that differ from the expected result")


def table(results: list[dict], header: dict) -> str:
    """The nccl-tests table: one line per size and implementation."""
    lines = [f"# warmup-bench: {header['collective']}, {header['ranks']} "
             f"ranks over {header['transport']}, {header['type']} "
             f"{header['redop']}",
             f"# iters {header['iters']}, warmup {header['warmup']}, check "
             f"{'on' if header['check'] else 'off'}",
             f"# timed: {header.get('timed', '')}",
             f"# machine: {header['machine']}",
             LEGEND,
             "#"]
    head = ("size", "count", "type", "redop", "root", "algorithm", "time",
            "spread", "algbw", "busbw", "#wrong")
    unit = ("(B)", "(elements)", "", "", "", "", "(us)", "(%)", "(GB/s)",
            "(GB/s)", "")
    body = [(str(r["size"]), str(r["count"]), str(r["type"]),
             str(r["redop"]), str(r["root"]), str(r["algorithm"]),
             f"{r['time_us']:.2f}", f"{r['spread_pct']:.1f}",
             f"{r['algbw_gbps']:.3f}", f"{r['busbw_gbps']:.3f}",
             str(r["wrong"])) for r in results]
    # each column as wide as its widest cell: within the book's 86 columns
    # for the kit's short algorithm names; a row is never wrapped (the
    # table is read back by parse_table), so longer names widen it
    w = [max(len(x[i]) for x in (head, unit, *body)) for i in range(len(head))]

    def line(lead: str, cells) -> str:
        return lead + " ".join(f"{c:>{w[i]}}" for i, c in enumerate(cells))

    lines = fit("\n".join(lines)).split("\n")     # the comments; rows whole
    lines += [line("# ", head), line("# ", unit).rstrip()]
    lines += [line("  ", b) for b in body]
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
