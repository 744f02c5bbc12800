"""Lab 01's failure demo under mpiexec with a fault the lab's command line
does not offer: ``stop`` (SIGSTOP), or any fault ``inside`` the step's
all-reduce.

Usage: mpiexec -n N python tests/mpi/stop_demo.py FAULT RANK WHERE TIMEOUT
       WATCHDOG_S
WHERE is ``inside`` or ``before`` (the all-reduce); TIMEOUT is seconds or
``none`` (the watchdog ends the hang). Every rank prints its outcome as a
JSON line (``{"rank": ...}``); a watchdog that announces a verdict prints
``{"watchdog": text}`` before it aborts the job.
"""
import sys

from warmup_kit.failures.lab import Demo
from warmup_kit.failures.lab_mpi import run_mpi_rank


def main() -> int:
    fault, rank, where, timeout, watchdog_s = sys.argv[1:6]
    demo = Demo(fault, int(rank), inside=where == "inside", steps=6,
                timeout=None if timeout == "none" else float(timeout),
                watchdog_s=float(watchdog_s))
    run_mpi_rank(demo, as_json=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
