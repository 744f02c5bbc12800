"""The resumable job under mpiexec (tests/test_resume.py).

Usage: mpiexec -n N python -m mpi4py tests/mpi/resume.py ROOT KILL_RANK
       KILL_STEP   (KILL_RANK -1: no fault)
Rank 0 prints one JSON line: rank 0's result of warmup_kit.failures.restart
.train (without the parameters).
"""
import json
import sys

from warmup_kit.comm import MPIComm
from warmup_kit.failures.job import JobConfig
from warmup_kit.failures.restart import train


def main() -> int:
    root, rank, step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    comm = MPIComm()
    faults = [] if rank < 0 else [{"point": "train.step", "rank": rank,
                                   "step": step, "action": "kill"}]
    out = train(comm, JobConfig(), root, faults)
    out.pop("params", None)
    if comm.rank == 0:
        print(json.dumps(out, default=str), flush=True)
    ok = out["ok"]
    comm.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
