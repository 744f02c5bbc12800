"""Chapter 9's jobs over MPIComm (tests/mpi/serving_cases.py).

Usage: mpiexec -n N python -m mpi4py tests/mpi/serving.py
Rank 0 prints one JSON line: {"ranks": N, "per_rank": [run_all's dict, ...]}.
"""
import json

from mpi4py import MPI

import serving_cases as sc
from warmup_kit.comm import MPIComm


def main() -> int:
    comm = MPIComm()
    mine = sc.run_all(comm)
    every = MPI.COMM_WORLD.gather(mine, root=0)
    comm.close()
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps({"ranks": len(every), "per_rank": every}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
