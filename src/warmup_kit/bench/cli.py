"""``warmup-bench`` flags: the nccl-tests ones, plus ours."""
from __future__ import annotations

import argparse
import sys

from warmup_kit.algorithms import algorithms_for
from warmup_kit.bench.harness import Options
from warmup_kit import cliargs
from warmup_kit.ops import OPS, check_dtype

BENCHED = ("allreduce", "reduce_scatter", "all_gather", "broadcast",
           "reduce", "all_to_all")


#: the largest -b, -e or -i: each rank holds a few buffers of this size
MAX_BYTES = 1 << 30
_size = cliargs.byte_size(0, MAX_BYTES)


def _dtype(text: str) -> str:
    """A numpy dtype name the collectives support (float64, int32, ...)."""
    try:
        check_dtype(text)
    except TypeError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a numeric numpy dtype (e.g. float64, float32, "
            f"int32): {exc}") from None
    return text


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
    p.add_argument("-f", "--stepfactor", type=cliargs.int_range(1, 1 << 20),
                   default=2,
                   help="multiply the size by this each step")
    p.add_argument("-i", "--stepbytes", type=_size, default=0,
                   help="add this many bytes each step instead (0: use -f)")
    p.add_argument("-n", "--iters", type=cliargs.positive_int, default=20,
                   help="timed iterations per size and pass")
    p.add_argument("-w", "--warmup_iters", type=cliargs.non_negative_int,
                   default=5,
                   help="untimed iterations first")
    p.add_argument("--passes", type=cliargs.positive_int, default=1,
                   help="sweep the sizes this many times (-n and -w per "
                        "pass); the median is over all passes")
    p.add_argument("-c", "--check", type=int, default=1, choices=[0, 1],
                   help="check every result before timing")
    p.add_argument("-d", "--datatype", type=_dtype, default="float64")
    p.add_argument("-o", "--op", default="sum", choices=list(OPS))
    p.add_argument("-r", "--root", type=cliargs.non_negative_int, default=0,
                   help="root of broadcast and reduce")
    p.add_argument("--world", type=cliargs.int_range(1, 256), default=None,
                   help="run N ranks on this host without MPI (not under "
                        "mpiexec); default 2 when not under mpiexec")
    p.add_argument("--transport", default="sockets",
                   choices=["sockets", "shm"],
                   help="the transport of --world ranks")
    p.add_argument("--timeout", type=cliargs.positive_float, default=None,
                   help="per-call deadline in seconds (none: the library "
                        "has none)")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--json", help="also write header and rows (with every "
                                  "iteration's time) to this JSON file")
    p.add_argument("--progress", action="store_true", default=None,
                   help="progress bar on stderr (default: if a terminal)")
    args = p.parse_args(argv)
    try:
        options(args)            # an empty sweep is refused here, not after
    except ValueError as exc:    # the ranks have started
        p.error(str(exc))
    if args.world is not None and args.root >= args.world:
        p.error(f"-r {args.root} is not a rank of --world {args.world}")
    return args


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
    sizes = opts.sweep()         # refuse an empty or inverted range now
    item = check_dtype(opts.dtype).itemsize
    if not any(s >= item for s in sizes):
        raise ValueError(f"no size from -b {opts.minbytes} to -e "
                         f"{opts.maxbytes} holds one {opts.dtype} element "
                         f"({item} bytes): nothing to measure")
    return opts
