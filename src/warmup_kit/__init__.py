"""warmup_kit: real collectives and a validated topology model.

The package behind the collectives warm-up book. Collective algorithms are
written once as schedules (:mod:`warmup_kit.schedule`,
:mod:`warmup_kit.algorithms`), run for real over MPI, TCP sockets or shared
memory (:mod:`warmup_kit.comm`, :mod:`warmup_kit.execute`), verified,
costed (:mod:`warmup_kit.model`) and drawn (:mod:`warmup_kit.viz`).
"""
from warmup_kit.algorithms import ALGORITHMS, build
from warmup_kit.collectives import (
    all_gather, all_to_all, allreduce, broadcast, gather, reduce,
    reduce_scatter, scatter)
from warmup_kit.comm import Comm, MPIComm, ShmComm, SocketComm, launch, \
    run_mpi
from warmup_kit.comm.stream import Work
from warmup_kit.errors import (
    CallMismatch, CollectiveTimeout, PeerLost, ProtocolError, RankDied)
from warmup_kit.ops import OPS, REDUCE_OPS
from warmup_kit.schedule import Schedule, Transfer, traffic, verify

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "OPS", "REDUCE_OPS", "CallMismatch",
           "CollectiveTimeout", "Comm",
           "MPIComm", "PeerLost", "ProtocolError", "RankDied", "Schedule",
           "ShmComm", "SocketComm", "Transfer", "Work", "all_gather",
           "all_to_all", "allreduce", "broadcast", "build", "gather",
           "launch", "reduce", "reduce_scatter", "run_mpi", "scatter",
           "traffic", "verify"]
