"""Lab 01: ring all-reduce for real, bytes measured against the formula.

Run it on real MPI ranks (the venv's mpiexec comes from the mpich wheel):

    mpirun -n 4 python labs/lab01.py
    mpirun -n 4 python -m mpi4py labs/lab01.py --algorithm all

or without MPI, on 4 processes talking TCP over loopback (or shared memory):

    python labs/lab01.py --world 4 [--transport shm]

On several hosts: ``mpirun -hostfile hosts -n 8 python labs/lab01.py``, or
without MPI, one ``python -m warmup_kit.run --nnodes 2 --node-rank I
--nproc-per-node 4 --master-addr A --transport sockets|hybrid
labs/lab01.py`` per host (the ranks then come from the rendezvous).

Failures (Chapter 8): ``--fail hang|kill|slow --fail-rank K`` makes rank K
stop calling collectives, die, or run slow at step ``--fail-step``; the
output shows who names whom (``--timeout S`` for the transports'
timeouts, otherwise the watchdog ends a hang after ``--watchdog`` s):

    python labs/lab01.py --world 4 --fail hang --fail-rank 2
    mpirun -n 4 python labs/lab01.py --fail kill --fail-rank 2

It first checks every result against a reference (MPI's own Allreduce under
MPI, the exact numpy sum over sockets) and exits non-zero on any mismatch.
Then it prints, per size V and per rank: bytes sent and received as the
transport counted them, the schedule's prediction, 2(N-1)/N * V, and what the
naive algorithm would send. ``--json`` prints one JSON object instead.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap

from warmup_kit import ALGORITHMS, cliargs
from warmup_kit.comm import MPIComm, launch, launched_by_mpi
from warmup_kit.comm.rendezvous import (comm_from_env, gather_json,
                                        launched_by_run, run_info)
from warmup_kit.measure.lab import run_lab01
from warmup_kit.units import parse_size as _parse_size

DEFAULT_SIZES = (1 << 10, 1 << 20, 16 << 20)
MAX_SIZE = 1 << 30
#: what each column of :func:`table` counts (printed above it, wrapped)
LEGEND = ("sent/received: payload bytes this rank's transport counted; "
          "predicted: the schedule's traffic(); formula: 2(N-1)/N*V, the "
          "ring formula; naive: bytes the naive algorithm sent when run here; "
          "match: sent and received equal the prediction; ms: median time "
          "of a call")
#: the longest line the table prints (the book's code column, 86)
WIDTH = 86


def parse_size(text: str) -> int:
    """'64', '4K', '1M', '16MiB' -> bytes (a multiple of 8, 8 B..1 GiB)."""
    try:
        v = _parse_size(text, multiple_of=8)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 8 <= v <= MAX_SIZE:
        raise argparse.ArgumentTypeError(
            f"size {text!r} must be between 8 B and 1 GiB")
    return v


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--algorithm", default="ring",
                   help=f"one of {', '.join(ALGORITHMS)}, a comma list, "
                        "or 'all'")
    p.add_argument("--size", type=parse_size, action="append",
                   help="message size V, e.g. 1K, 1M, 16M (repeatable; "
                        "default 1K, 1M and 16M)")
    p.add_argument("--world", type=cliargs.int_range(1, 256), default=None,
                   help="run N ranks on this host without MPI (default 4 "
                        "when not under mpirun)")
    p.add_argument("--transport", default="sockets",
                   choices=["sockets", "shm"],
                   help="the transport of --world ranks")
    p.add_argument("--iters", type=cliargs.positive_int, default=3,
                   help="timed repetitions")
    p.add_argument("--timeout", type=cliargs.positive_float, default=None,
                   help="seconds before a wait names the rank it waits for "
                        "(None: 60, or with --fail no limit: the watchdog "
                        "ends a hang)")
    p.add_argument("--fail", choices=["hang", "kill", "slow"],
                   help="Chapter 8: make --fail-rank hang, die or straggle")
    p.add_argument("--fail-rank", type=cliargs.non_negative_int, default=1,
                   help="the rank that fails")
    p.add_argument("--fail-step", type=cliargs.non_negative_int, default=2,
                   help="the step at which it hangs or dies")
    p.add_argument("--steps", type=cliargs.positive_int, default=20,
                   help="steps of the failure demo")
    p.add_argument("--watchdog", type=cliargs.positive_float, default=5.0,
                   help="seconds in one collective before the watchdog "
                        "calls it a hang (with --fail)")
    p.add_argument("--json", action="store_true", help="print JSON only")
    args = p.parse_args(argv)
    names = ALGORITHMS if args.algorithm == "all" else tuple(
        a.strip() for a in args.algorithm.split(","))
    bad = [a for a in names if a not in ALGORITHMS]
    if bad:
        p.error(f"unknown algorithm(s) {bad}; choose from {list(ALGORITHMS)}")
    args.algorithms = names
    if args.fail_step >= args.steps:
        p.error(f"--fail-step {args.fail_step} is past the last step "
                f"({args.steps - 1}; --steps {args.steps})")
    args.sizes = tuple(args.size or DEFAULT_SIZES)
    if args.timeout is None and args.fail is None:
        args.timeout = 60.0
    return args


def run_mpi_ranks(args) -> list[dict] | None:
    """Every rank measures; rank 0 gathers the rows (others return None)."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    comm = MPIComm(world)

    def mpi_reference(x):
        out = x.copy()
        world.Allreduce(x, out, op=MPI.SUM)
        return out
    rows = run_lab01(comm, args.algorithms, args.sizes, iters=args.iters,
                     timeout=args.timeout, mpi_reference=mpi_reference)
    gathered = world.gather(rows, root=0)   # small result rows, not payload
    comm.close()
    return [r for per_rank in gathered for r in per_rank] if gathered else None


def run_rendezvous_ranks(args) -> list[dict] | None:
    """Ranks started by ``python -m warmup_kit.run``: every rank measures;
    rank 0 gathers the rows (others return None)."""
    comm = comm_from_env(timeout=args.timeout)
    try:
        rows = run_lab01(comm, args.algorithms, args.sizes, iters=args.iters,
                         timeout=args.timeout)
        gathered = gather_json(comm, rows, timeout=args.timeout)
    finally:
        comm.close()
    return [r for per_rank in gathered for r in per_rank] if gathered else None


def run_socket_ranks(args) -> list[dict]:
    per_rank = launch(run_lab01, args.world, args=(args.algorithms, args.sizes),
                      transport=args.transport,
                      timeout=args.timeout * (len(args.sizes) * 3 + 5),
                      shm_bytes=8 * max(args.sizes) + (16 << 20))
    return [r for rows in per_rank for r in rows]


def table(rows: list[dict]) -> str:
    """One row per (algorithm, V, rank), each column as wide as its widest
    entry plus one space (the lines stay within the book's 86 columns)."""
    n = rows[0]["ranks"]
    body = []
    for r in sorted(rows, key=lambda r: (r["algorithm"], r["nbytes"], r["rank"])):
        ok = (r["bytes_sent"] == r["predicted_sent"]
              and r["bytes_received"] == r["predicted_received"])
        ms = "-" if r["median_s"] is None else f"{r['median_s'] * 1e3:.2f}"
        body.append([r["algorithm"], r["nbytes"], r["rank"], r["bytes_sent"],
                     r["bytes_received"], r["predicted_sent"],
                     f"{r['formula_bytes']:.0f}", r["naive_sent"],
                     "yes" if ok else "NO", ms])
    names = ["algorithm", "V bytes", "rank", "sent", "received", "predicted",
             "formula", "naive", "match", "ms"]
    cols = list(zip(names, *body))
    width = [max(len(str(v)) for v in col) + 1 for col in cols]

    def line(values) -> str:
        first, *rest = values
        return f"{first!s:<{width[0]}}" + "".join(
            f"{v!s:>{w}}" for v, w in zip(rest, width[1:]))

    head = line(names)
    lines = [f"N = {n} ranks", textwrap.fill(LEGEND, WIDTH), head,
             "-" * len(head)] + [line(b) for b in body]
    lines += ["", summary(rows)]
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    """One line per algorithm: bytes per rank over 2(N-1)/N V, and time."""
    out = ["per algorithm, largest V: max bytes sent by a rank / "
           "(2(N-1)/N V), median time"]
    for alg in dict.fromkeys(r["algorithm"] for r in rows):
        mine = [r for r in rows if r["algorithm"] == alg]
        v = max(r["nbytes"] for r in mine)
        top = [r for r in mine if r["nbytes"] == v]
        ratio = max(r["bytes_sent"] for r in top) / max(
            top[0]["formula_bytes"], 1)
        ms = max((r["median_s"] or 0) for r in top) * 1e3
        out.append(f"  {alg:<19} V = {v:>10} B   {ratio:6.2f} x the ring "
                   f"formula   {ms:9.2f} ms")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.world is not None and (launched_by_mpi() or launched_by_run()):
        print("lab01: --world starts its own ranks; under mpirun or "
              "warmup_kit.run leave it out (they set the ranks)",
              file=sys.stderr)
        return 2
    if args.fail is not None and launched_by_run():
        print("lab01: --fail runs under mpirun or --world, not under "
              "warmup_kit.run", file=sys.stderr)
        return 2
    if args.world is not None and args.world < 1:
        print("--world must be >= 1", file=sys.stderr)
        return 2
    if args.fail is not None:
        from warmup_kit.failures.lab_cli import cli
        return cli(args, under_mpi=args.world is None and launched_by_mpi())
    if args.world is not None:
        rows = run_socket_ranks(args)
        transport = args.transport
    elif launched_by_run():
        info = run_info()
        transport = (f"{info['transport']} across "
                     f"{len(set(info['nodes']))} nodes")
        rows = run_rendezvous_ranks(args)
        if rows is None:           # not rank 0
            return 0
    elif launched_by_mpi():
        rows = run_mpi_ranks(args)
        transport = "mpi"
        if rows is None:           # not rank 0
            return 0
    else:
        args.world = 4
        print(f"not under mpirun: running 4 {args.transport} ranks "
              "(--world 4)", file=sys.stderr)
        rows = run_socket_ranks(args)
        transport = args.transport
    wrong = [r for r in rows if not r["correct"]]
    mismatched = [r for r in rows if r["bytes_sent"] != r["predicted_sent"]
                  or r["bytes_received"] != r["predicted_received"]]
    if args.json:
        print(json.dumps({"transport": transport, "ranks": rows[0]["ranks"],
                          "correct": not wrong,
                          "bytes_match": not mismatched, "rows": rows}))
    else:
        if not wrong:
            print(f"correct: every result equals the reference ({transport})")
        print(table(rows))
    if wrong:
        print(f"WRONG RESULT on {len(wrong)} (rank, algorithm, size) rows: "
              f"{[(r['rank'], r['algorithm'], r['nbytes']) for r in wrong][:5]}",
              file=sys.stderr)
        return 1
    if mismatched:
        print("measured bytes differ from the schedule's prediction",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
