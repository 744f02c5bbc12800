"""``labs/lab01.py --fail hang|kill|slow``: the failure demo from the command
line (Chapter 8), on ``--world`` local ranks or under ``mpirun``."""
from __future__ import annotations

import json
import sys

from warmup_kit.failures.lab import Demo, lines, named, run_local
from warmup_kit.failures.lab_mpi import run_mpi_rank


def cli(args, under_mpi: bool) -> int:
    """``labs/lab01.py --fail ...``: run the demo, print its outcome.

    Exit status: 0 when the demo did what it shows (the culprit named, or
    the straggler found), 1 otherwise.
    """
    demo = Demo(args.fail, args.fail_rank, fail_step=args.fail_step,
                steps=args.steps, timeout=args.timeout,
                watchdog_s=args.watchdog)
    if under_mpi:
        run_mpi_rank(demo, args.json)
        return 0
    world = args.world or 4
    if not 0 <= demo.rank < world:
        print(f"lab01: --fail-rank {demo.rank} is not a rank of {world}",
              file=sys.stderr)
        return 2
    res = run_local(demo, world, args.transport)
    if args.json:
        print(json.dumps(res))
    else:
        print("\n".join(lines(res)))
    return 0 if named(res) else 1
