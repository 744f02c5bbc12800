"""The training job of Chapter 7 over MPIComm (tests/mpi/train_cases.py).

Usage: mpiexec -n N python -m mpi4py tests/mpi/train.py
Rank 0 prints one JSON line: {"ranks": N, "per_rank": [run_job's dict, ...]}.
"""
import json

from mpi4py import MPI

import train_cases as tc
from warmup_kit.comm import MPIComm


def main() -> int:
    comm = MPIComm()
    mine = tc.run_job(comm)
    every = MPI.COMM_WORLD.gather(mine, root=0)
    comm.close()
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps({"ranks": len(every), "per_rank": every}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
