"""warmup_kit: real collectives and a validated topology model.

The package behind the collectives warm-up book. Collective algorithms are
written once as schedules (:mod:`warmup_kit.schedule`,
:mod:`warmup_kit.algorithms`), run for real over MPI or TCP sockets
(:mod:`warmup_kit.comm`), verified, costed and drawn.
"""
from warmup_kit.algorithms import ALGORITHMS, build
from warmup_kit.collectives import (
    all_gather, all_to_all, allreduce, broadcast, reduce, reduce_scatter)
from warmup_kit.comm import launch, run_mpi
from warmup_kit.errors import (
    CollectiveTimeout, PeerLost, ProtocolError, RankDied)
from warmup_kit.ops import OPS
from warmup_kit.schedule import Schedule, Transfer, traffic, verify

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "OPS", "CollectiveTimeout", "PeerLost",
           "ProtocolError", "RankDied", "Schedule", "Transfer", "all_gather",
           "all_to_all", "allreduce", "broadcast", "build", "launch",
           "reduce", "reduce_scatter", "run_mpi", "traffic", "verify"]
