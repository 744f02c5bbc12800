"""A small job for tests/test_multihost.py, run by every rank under
``python -m warmup_kit.run``: an all-reduce on the whole group and on a
split of it; (``fail R``) rank R exiting with 3 before it joins; (``die
R``) rank R dying once joined, the other rank of its node printing what it
raised; (``hold DIR``) every rank writing its pid to DIR, then sleeping. Rank 0 prints
one JSON line: every rank's view."""
import json
import os
import sys

import numpy as np

from warmup_kit.collectives import allreduce
from warmup_kit.comm.rendezvous import comm_from_env, gather_json, run_info

info = run_info()
if sys.argv[1:2] == ["fail"] and info["rank"] == int(sys.argv[2]):
    sys.exit(3)
comm = comm_from_env(timeout=60)
if sys.argv[1:2] == ["hold"]:                # joined; then wait to be killed
    with open(f"{sys.argv[2]}/{comm.rank}.pid", "w") as f:
        f.write(str(os.getpid()))
    import time
    time.sleep(120)
    sys.exit(0)
if sys.argv[1:2] == ["die"]:       # rank R dies; its node's other rank says
    if comm.rank == int(sys.argv[2]):
        os._exit(5)
    try:
        allreduce(np.ones(1 << 16), comm, algorithm="ring", timeout=60)
        got = {"error": None}
    except Exception as exc:                 # noqa: BLE001 - reported
        got = {"error": type(exc).__name__, "peer": getattr(exc, "peer",
                                                            None)}
    if comm.rank == int(sys.argv[2]) ^ 1:
        print(json.dumps(got), flush=True)
    sys.exit(0)
x = np.full(1 << 15, comm.rank + 1.0)          # 256 KiB
comm.reset_stats()
y = allreduce(x, comm, algorithm="ring", timeout=60)
sent = comm.stats.bytes_sent
tiers = ([comm.intra.stats.bytes_sent if comm.intra else 0,
          comm.inter.stats.bytes_sent] if hasattr(comm, "inter") else None)
sub = comm.split(comm.rank % 2, key=comm.rank)
z = allreduce(np.full(4, comm.rank + 1.0), sub, timeout=60)
view = {"rank": comm.rank, "size": comm.size, "type": type(comm).__name__,
        "node": info["node_rank"], "sum": float(y[0]), "sent": sent,
        "tiers": tiers, "sub_size": sub.size, "sub_sum": float(z[0]),
        "local": [p for p in range(comm.size) if getattr(
            comm, "is_local", lambda q: False)(p)]}
every = gather_json(comm, view, timeout=60)
sub.close()
comm.close()
if every:
    print(json.dumps(every), flush=True)
