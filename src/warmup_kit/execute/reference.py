"""The reference executor: a schedule, round by round, as Chapter 3 tells it.

For each round: copy out what this rank sends (every send of a round reads
the buffer as it was when the round began), exchange the messages with the
peers, then land what arrived, reducing in ascending rank order. No plan,
no slicing, no out-of-place tricks: short enough to read in one sitting,
and the executor every fast one is tested against, bit for bit.
"""
from __future__ import annotations

import numpy as np

from warmup_kit.comm.base import Comm
from warmup_kit.execute.land import reduce_ordered
from warmup_kit.ops import reduce_ufunc
from warmup_kit.schedule import Schedule, chunk_bounds


def run_reference(s: Schedule, buf: np.ndarray, comm: Comm, *,
                  op: str = "sum", unit: int = 1, tag: int = 0,
                  deadline: float | None = None) -> np.ndarray:
    """Execute ``s`` in place on this rank's 1-d ``buf``; return ``buf``.

    ``buf`` holds ``count`` rows of ``unit`` elements, cut into
    ``s.chunks`` chunks like :func:`numpy.array_split`.
    """
    ufunc = reduce_ufunc(op, buf.dtype)
    bounds = [slice(a * unit, b * unit)
              for a, b in chunk_bounds(buf.size // unit, s.chunks)]
    me = comm.rank
    for rnd in s.rounds:
        sends = [(t.dst, np.concatenate([buf[bounds[c]] for c in t.chunks]))
                 for t in rnd if t.src == me]
        incoming = [t for t in rnd if t.dst == me]
        recvs = [(t.src, np.empty(sum(buf[bounds[c]].size for c in t.chunks),
                                  buf.dtype)) for t in incoming]
        comm.exchange([(p, a) for p, a in sends if a.size],
                      [(p, a) for p, a in recvs if a.size],
                      tag=tag, deadline=deadline)
        landing: dict[int, list] = {}     # chunk -> [(rank, values, reduce)]
        for t, (_, data) in zip(incoming, recvs):
            off = 0
            for c, d in zip(t.chunks, t.targets):
                n = buf[bounds[d]].size
                landing.setdefault(d, []).append((t.src, data[off:off + n],
                                                  t.reduce))
                off += n
        for d, items in landing.items():
            out = buf[bounds[d]]
            if not items[0][2]:                       # a copy
                out[...] = items[0][1]
                continue
            reduce_ordered([(r, v) for r, v, _ in items] + [(me, out)], out,
                           ufunc, own=me)
    return buf
