"""Stream markers: when the communication thread reached a point.

On a GPU one records a CUDA event on the NCCL stream and reads its time
later. Here a marker is a tiny operation queued on the communicator's stream
(:meth:`warmup_kit.comm.Comm.stream`): collectives on one communicator run in
issue order, so a marker queued right before a collective returns when that
collective starts, and one queued right after, when it ends.
"""
from __future__ import annotations

import time

from warmup_kit.comm.base import Comm
from warmup_kit.comm.stream import Work


def record(comm: Comm) -> Work:
    """Queue a marker; ``wait()`` returns its ``time.perf_counter()``."""
    return comm.stream().submit(lambda deadline: time.perf_counter(), None,
                                "marker")
