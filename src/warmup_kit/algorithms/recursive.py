"""Recursive doubling and Rabenseifner's algorithm (book, Chapter 4).

Both work on the largest power of two p <= N. The N - p extra ranks first
fold their buffer into a partner (the first 2(N - p) ranks pair up, odd into
even) and get the result back at the end: the usual MPICH treatment of
non-powers of two (Thakur, Rabenseifner and Gropp 2005, section 4).

* recursive doubling: log2 p rounds, partners r and r XOR 2^k swap and add
  their whole buffers. Few rounds, V per round: good for short messages.
* Rabenseifner: reduce-scatter by recursive halving (each round halves the
  range a rank is responsible for), then all-gather by recursive doubling.
  2 log2 p rounds and about 2V per rank: good for long messages.
"""
from __future__ import annotations

from warmup_kit.schedule import Schedule, Transfer


def _fold(n: int, chunks: tuple[int, ...]):
    """(p, active ranks by virtual rank, fold rounds, unfold rounds)."""
    p = 1 << (n.bit_length() - 1)
    rem = n - p
    active = [2 * i for i in range(rem)] + list(range(2 * rem, n))
    fold = [[Transfer(2 * i + 1, 2 * i, chunks, reduce=True)
             for i in range(rem)]] if rem else []
    unfold = [[Transfer(2 * i, 2 * i + 1, chunks)
               for i in range(rem)]] if rem else []
    return p, active, fold, unfold


def recursive_doubling_allreduce(n: int) -> Schedule:
    """Recursive-doubling all-reduce on the whole buffer."""
    p, active, fold, unfold = _fold(n, (0,))
    rounds, mask = [], 1
    while mask < p:
        rounds.append([Transfer(active[v], active[v ^ mask], (0,), reduce=True)
                       for v in range(p)])
        mask <<= 1
    return Schedule(name="recursive_doubling", collective="allreduce", ranks=n,
                    chunks=1, rounds=fold + rounds + unfold)


def rabenseifner_allreduce(n: int) -> Schedule:
    """Reduce-scatter by recursive halving, all-gather by recursive doubling."""
    p, active, fold, unfold = _fold(n, tuple(range(1 << (n.bit_length() - 1))))
    lo = [0] * p           # each virtual rank's range [lo, lo + size)
    halving = []
    mask = p >> 1
    while mask:
        rnd = []
        for v in range(p):
            keep_upper = bool(v & mask)
            send_lo = lo[v] if keep_upper else lo[v] + mask
            rnd.append(Transfer(active[v], active[v ^ mask],
                                tuple(range(send_lo, send_lo + mask)),
                                reduce=True))
        for v in range(p):
            if v & mask:
                lo[v] += mask
        halving.append(rnd)
        mask >>= 1
    doubling = []
    mask = 1
    while mask < p:
        rnd = [Transfer(active[v], active[v ^ mask],
                        tuple(range(lo[v], lo[v] + mask))) for v in range(p)]
        for v in range(p):
            lo[v] = min(lo[v], lo[v ^ mask])
        doubling.append(rnd)
        mask <<= 1
    return Schedule(name="rabenseifner", collective="allreduce", ranks=n,
                    chunks=p, rounds=fold + halving + doubling + unfold)
