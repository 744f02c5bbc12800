"""``warmup-bench`` flags: the nccl-tests ones, plus ours."""
from __future__ import annotations

import argparse
import sys

from warmup_kit.algorithms import algorithms_for
from warmup_kit.bench.harness import Options
from warmup_kit.ops import OPS
from warmup_kit.units import parse_size

BENCHED = ("allreduce", "reduce_scatter", "all_gather", "broadcast",
           "reduce", "all_to_all")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="warmup-bench",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="nccl-tests-style sweeps of warmup_kit's public "
                    "collectives (and, under MPI, the library's own, as "
                    "'mpi'), every result checked before it is timed.",
        epilog="Under MPI: mpiexec -n 4 python -m mpi4py -m warmup_kit.bench "
               "-b 8 -e 64M -f 2. Without MPI: python -m warmup_kit.bench "
               "--world 4 [--transport shm].")
    p.add_argument("--collective", default="allreduce", choices=BENCHED)
    p.add_argument("--algorithms", default="",
                   help="comma list of algorithms and/or 'mpi', or 'all'; "
                        "empty: the collective's default algorithm, plus "
                        "'mpi' under mpiexec; an algorithm with '+nocheck' "
                        "appended (ring+nocheck) is timed without the "
                        "default argument agreement, beside the same "
                        "algorithm with it")
    p.add_argument("-b", "--minbytes", type=_size, default=8,
                   help="smallest size")
    p.add_argument("-e", "--maxbytes", type=_size, default=64 << 20,
                   help="largest size (64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2,
                   help="multiply the size by this each step")
    p.add_argument("-i", "--stepbytes", type=_size, default=0,
                   help="add this many bytes each step instead (0: use -f)")
    p.add_argument("-n", "--iters", type=int, default=20,
                   help="timed iterations per size and pass")
    p.add_argument("-w", "--warmup_iters", type=int, default=5,
                   help="untimed iterations first")
    p.add_argument("--passes", type=int, default=1,
                   help="sweep the sizes this many times (-n and -w per "
                        "pass); the median is over all passes")
    p.add_argument("-c", "--check", type=int, default=1, choices=[0, 1],
                   help="check every result before timing")
    p.add_argument("-d", "--datatype", default="float64")
    p.add_argument("-o", "--op", default="sum", choices=list(OPS))
    p.add_argument("-r", "--root", type=int, default=0,
                   help="root of broadcast and reduce")
    p.add_argument("--world", type=int, default=None,
                   help="run N ranks on this host without MPI (not under "
                        "mpiexec); default 2 when not under mpiexec")
    p.add_argument("--transport", default="sockets",
                   choices=["sockets", "shm"],
                   help="the transport of --world ranks")
    p.add_argument("--timeout", type=float, default=None,
                   help="per-call deadline in seconds (none: the library "
                        "has none)")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--json", help="also write header and rows (with every "
                                  "iteration's time) to this JSON file")
    p.add_argument("--progress", action="store_true", default=None,
                   help="progress bar on stderr (default: if a terminal)")
    return p.parse_args(argv)


def options(args: argparse.Namespace) -> Options:
    """The sweep the flags ask for.

    Raises:
        ValueError: an empty sweep, or iterations below 1.
    """
    if args.algorithms == "all":
        algs = algorithms_for(args.collective) + ("mpi",)
    else:
        algs = tuple(a.strip() for a in args.algorithms.split(",") if a)
    progress = (sys.stderr.isatty() if args.progress is None
                else args.progress)
    if args.iters < 1 or args.warmup_iters < 0 or args.passes < 1:
        raise ValueError("-n and --passes must be >= 1, -w >= 0")
    opts = Options(args.collective, algs, args.minbytes, args.maxbytes,
                   args.stepfactor, args.stepbytes, args.iters,
                   args.warmup_iters, bool(args.check), args.datatype,
                   args.op, args.root, args.timeout, progress,
                   passes=args.passes)
    opts.sweep()                 # refuse an empty or inverted range now
    return opts
