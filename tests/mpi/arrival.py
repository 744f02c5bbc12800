"""A blocking exchange checks what it received (MPIComm, no deadline).

Each pair of ranks does one ``sendrecv`` with the right tag and size, then
one where the peer sends another tag, then one with another size, then a
right one again: the wrong ones raise ProtocolError on the receiving rank,
naming what came and what was expected; the right ones after them return
the peer's bytes (the status the calls share holds nothing stale). Rank 0
prints {"ranks": N, "records": [...]}, one record per rank.
"""
from __future__ import annotations

import json

import numpy as np
from mpi4py import MPI

import warmup_kit as wk
from warmup_kit.comm.mpi import MPIComm


def main() -> None:
    comm = MPIComm(MPI.COMM_WORLD.Dup())
    me, peer = comm.rank, comm.rank ^ 1
    even = me % 2 == 0
    rec = {"rank": me, "calls": []}
    mine = np.full(4, float(me))
    # (case, tag this rank uses, elements it sends): "tag": the even rank
    # sends and expects 6, its peer 5; "size": the even rank sends 3 of 4
    cases = [("right", 5, 4), ("tag", 6 if even else 5, 4),
             ("size", 5, 3 if even else 4), ("right", 5, 4)]
    for case, tag, count in cases if peer < comm.size else []:
        got = np.full(4, -1.0)
        try:
            comm.sendrecv(mine[:count], peer, got, peer, tag)
            rec["calls"].append({"case": case, "kind": "returned",
                                 "got": got.tolist()})
        except wk.ProtocolError as exc:
            rec["calls"].append({"case": case, "kind": "ProtocolError",
                                 "message": str(exc)})
    out = MPI.COMM_WORLD.gather(rec, root=0)
    if me == 0:
        print(json.dumps({"ranks": comm.size, "records": out}))
    comm.close()


if __name__ == "__main__":
    main()
