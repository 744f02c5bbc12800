"""Every rank called the same collective alike, or every rank raises.

A collective whose ranks pass different arguments (a root, an op, a length,
a dtype, the collective itself) must not return: a broadcast whose ranks
disagree on the root would hand some ranks the wrong array, and a root that
only sends never even hears of it. The fingerprint in every message's tag
(:mod:`warmup_kit.comm.base`) catches a rank that *receives* a message of
another call, but it cannot help a rank that receives nothing, and its
peers then wait for a message that never comes.

So each call starts with a small agreement, on by default: ceil(log2 N)
rounds of one fixed-size message each way (a dissemination, as in
:meth:`~warmup_kit.comm.Comm.barrier`). Each message carries a two-entry
summary of the call descriptors its sender has heard of, itself included:
the lowest rank and its descriptor, and the lowest rank whose descriptor
differs from that one. Merging two summaries is exact (the lowest rank of
the union is one of the two lowest; the lowest that differs from it is one
of the four entries), so after the last round every rank holds the same
summary of all N descriptors. If it names a differing rank, every rank
raises the same :class:`~warmup_kit.CallMismatch`, at the same point, having
sent no payload: the communicator stays in step and the next call works.

The messages have one size and one tag whatever the call, so ranks that
called different things still match each other's agreement messages and
never wait for a message that will not come. Their bytes count as control
traffic (``stats.control_*``), apart from the payload the schedule
predicts. A transport that can share the descriptors more cheaply does
(``comm.share_call``): MPI in one ``MPI_Allgather``; shared memory with no
message at all: each rank publishes its descriptor in the control segment and reads every
other's, one wait per peer. ``comm.check_calls = False`` (or
``WARMUP_KIT_CHECK=0`` before the communicator is made; every rank must
choose alike) skips it.
"""
from __future__ import annotations

import numpy as np

from warmup_kit.comm.base import TAG_MAX, Comm
from warmup_kit.errors import CallMismatch

#: (name, bytes) of a descriptor's fields: text padded to ``bytes``, or an
#: integer where ``bytes`` is 0
FIELDS = (("collective", 24), ("algorithm", 24), ("op", 8), ("dtype", 8),
          ("count", 0), ("unit", 0), ("root", 0), ("ranks_per_node", 0))
WORDS = sum(max(1, b // 8) for _, b in FIELDS)
CHECK_TAG = TAG_MAX - 4
_NONE = -1


def describe(**fields) -> np.ndarray:
    """A call's descriptor: :data:`FIELDS` packed in int64 words."""
    out = np.zeros(WORDS, np.int64)
    raw = out.view(np.uint8)
    at = 0
    for name, width in FIELDS:
        v = fields[name]
        if width:
            b = str(v if v is not None else "").encode()[:width]
            raw[at:at + len(b)] = np.frombuffer(b, np.uint8)
            at += width
        else:
            out[at // 8] = int(v if v is not None else 0)
            at += 8
    return out


def decode(words: np.ndarray) -> dict:
    """The fields of a :func:`describe`d descriptor."""
    raw = np.ascontiguousarray(words, np.int64).view(np.uint8)
    out, at = {}, 0
    for name, width in FIELDS:
        if width:
            out[name] = bytes(raw[at:at + width]).rstrip(b"\0").decode(
                errors="replace")
            at += width
        else:
            out[name] = int(raw[at:at + 8].view(np.int64)[0])
            at += 8
    return out


def _merge(state: np.ndarray, got: np.ndarray) -> None:
    """Fold ``got``'s summary into ``state`` (both: ref rank, ref
    descriptor, other rank, other descriptor)."""
    w = WORDS + 1
    if (got[w] == _NONE and state[w] == _NONE
            and np.array_equal(got[1:w], state[1:w])):
        state[0] = min(state[0], got[0])           # the common case
        return
    cands = [(int(a[i]), a[i + 1:i + w]) for a in (state, got)
             for i in (0, w) if a[i] != _NONE]
    ref = min(cands, key=lambda c: c[0])
    other = min((c for c in cands if not np.array_equal(c[1], ref[1])),
                key=lambda c: c[0], default=None)
    new = np.full(2 * w, _NONE, np.int64)
    new[0], new[1:w] = ref
    if other is not None:
        new[w], new[w + 1:] = other
    state[:] = new


def check_call(comm: Comm, mine: np.ndarray, deadline: float | None
               ) -> None:
    """Agree on ``mine`` (a :func:`describe`d descriptor) with every rank
    of ``comm``; raise :class:`~warmup_kit.CallMismatch` on every rank if
    any rank's differs."""
    n = comm.size
    if n == 1:
        return
    table = comm.share_call(mine, deadline)
    if table is not None:              # every descriptor at once
        raw = table.tobytes()          # all alike: the common case, cheap
        if raw == raw[:len(raw) // n] * n:
            return
        other = next((p for p in range(1, n)
                      if not np.array_equal(table[p], table[0])), None)
        if other is not None:
            raise mismatch(0, table[0], other, table[other], comm.rank)
        return
    w = WORDS + 1
    state = np.full(2 * w, _NONE, np.int64)
    state[0], state[1:w] = comm.rank, mine
    sent, got = np.empty_like(state), np.empty_like(state)
    dist = 1
    with comm.control():
        while dist < n:
            sent[:] = state
            comm.sendrecv(sent, (comm.rank + dist) % n, got,
                          (comm.rank - dist) % n, CHECK_TAG,
                          deadline=deadline)
            _merge(state, got)
            dist <<= 1
    if state[w] != _NONE:
        raise mismatch(int(state[0]), state[1:w], int(state[w]),
                       state[w + 1:], comm.rank)


def mismatch(a: int, da, b: int, db, rank: int) -> CallMismatch:
    """The error every rank raises: rank ``a`` called with ``da``, rank
    ``b`` with ``db``."""
    fa, fb = decode(da), decode(db)
    diff = tuple(k for k, _ in FIELDS if fa[k] != fb[k])
    shown = ", ".join(f"{k}={fa[k]!r} on rank {a} but {fb[k]!r} on rank {b}"
                      for k in diff)
    what = ("different collectives" if "collective" in diff else
            f"{fa['collective']} with different arguments")
    return CallMismatch(
        f"rank {rank}: ranks called {what}: {shown} (every rank must pass "
        "the same; nothing was sent, the communicator is still usable)",
        fields=diff, ranks=(a, b),
        values=(tuple(fa[k] for k in diff), tuple(fb[k] for k in diff)))


__all__ = ["FIELDS", "CHECK_TAG", "describe", "decode", "check_call",
           "mismatch"]
