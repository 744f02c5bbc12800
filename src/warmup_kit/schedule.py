"""Schedules: one data structure per collective algorithm (book, Chapter 3).

A :class:`Schedule` says, round by round, which rank sends which chunks of its
buffer to which rank, and whether the receiver *reduces* them into its own
chunks or *copies* them over. The same object is executed on a real
communicator (:mod:`warmup_kit.execute.exchange`), verified symbolically
(:func:`verify`), costed on a topology (:mod:`warmup_kit.model.simulate`) and drawn
(:mod:`warmup_kit.viz.plots`).

Semantics of a round (the executor and :func:`verify` both follow them):

* every send of a round reads the buffer as it was at the start of the round;
* a copy overwrites the destination chunk; a chunk may be copied into at most
  once per round, and not copied and reduced in the same round;
* several reduces into one chunk in one round are combined in ascending order
  of the rank they come from, with the receiver's own value keyed by its own
  rank. Every rank that computes the same chunk therefore applies the
  operator to the same operands in the same order: results are bit-for-bit
  identical across ranks.

The buffer of ``count`` elements (or rows) is cut into ``chunks`` contiguous
pieces like :func:`numpy.array_split`: the first ``count % chunks`` pieces are
one element longer.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Iterable, Sequence

COLLECTIVES = ("allreduce", "reduce_scatter", "all_gather", "broadcast",
               "reduce", "gather", "scatter", "all_to_all")
#: collectives with a root rank
ROOTED = ("broadcast", "reduce", "gather", "scatter")


class Transfer(tuple):
    """One message: ``src`` sends its chunks ``chunks`` to ``dst``.

    ``dst_chunks`` (same length) names where they land on ``dst``; by default
    the same chunk indices. ``reduce`` combines them into what ``dst`` holds
    instead of overwriting it. Immutable and hashable: a tuple underneath,
    because a ring on 1,024 ranks holds two million of them.
    """

    __slots__ = ()

    def __new__(cls, src: int, dst: int, chunks, reduce: bool = False,
                dst_chunks=None) -> "Transfer":
        if chunks.__class__ is not tuple:
            chunks = (chunks,) if isinstance(chunks, int) else tuple(chunks)
        if dst_chunks is not None:
            dst_chunks = tuple(dst_chunks)
            if len(dst_chunks) != len(chunks):
                raise ValueError("dst_chunks must be as long as chunks")
            if dst_chunks == chunks:
                dst_chunks = None
        if src == dst:
            raise ValueError(f"transfer from rank {src} to itself")
        if not chunks:
            raise ValueError("a transfer carries at least one chunk")
        return tuple.__new__(cls, (src, dst, chunks, bool(reduce), dst_chunks))

    src = property(itemgetter(0), doc="sending rank")
    dst = property(itemgetter(1), doc="receiving rank")
    chunks = property(itemgetter(2), doc="chunk indices sent")
    reduce = property(itemgetter(3), doc="reduce into the receiver's chunks")
    dst_chunks = property(itemgetter(4), doc="where they land, if elsewhere")

    @property
    def targets(self) -> tuple[int, ...]:
        """Chunk indices written on the receiver."""
        return self[4] if self[4] is not None else self[2]

    def __getnewargs__(self):
        return tuple(self)

    def __repr__(self) -> str:
        extra = f", dst_chunks={self[4]}" if self[4] is not None else ""
        return (f"Transfer(src={self[0]}, dst={self[1]}, chunks={self[2]}, "
                f"reduce={self[3]}{extra})")


class LazyRounds(Sequence):
    """A schedule's rounds, made on first use (Chapter 3's ring on 1,024
    ranks is two million transfers, seconds to build as tuples).

    ``arrays()`` gives the simulator the same transfers as flat arrays
    (``round_of, src, dst, reduce, chunk``: one chunk per transfer, no
    ``dst_chunks``) without building them; anything that iterates, indexes
    or compares the rounds gets the tuples, built once.
    """

    __slots__ = ("_n", "_make", "_arrays", "_rounds")

    def __init__(self, n_rounds: int, make, arrays) -> None:
        self._n, self._make, self._arrays = n_rounds, make, arrays
        self._rounds = None

    def _get(self) -> tuple:
        if self._rounds is None:
            self._rounds = tuple(tuple(r) for r in self._make())
        return self._rounds

    def arrays(self):
        return self._arrays()

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        return self._get()[i]

    def __iter__(self):
        return iter(self._get())

    def __eq__(self, other) -> bool:
        return tuple(self._get()) == tuple(other)

    def __add__(self, other):
        return self._get() + tuple(other)

    def __radd__(self, other):
        return tuple(other) + self._get()

    def __hash__(self) -> int:
        return hash(self._get())

    def __repr__(self) -> str:
        return f"LazyRounds({self._n} rounds)"


@dataclass(frozen=True)
class Schedule:
    """A collective algorithm as rounds of transfers.

    Immutable (rounds are stored as tuples): built schedules are cached and
    shared by every caller.

    Attributes:
        name: algorithm name, e.g. ``"ring"``.
        collective: one of :data:`COLLECTIVES`.
        ranks: number of ranks N.
        chunks: number of pieces the buffer is cut into.
        rounds: the rounds, each a tuple of :class:`Transfer` (any iterable
            of iterables is accepted and frozen).
        root: root rank for broadcast and reduce, else ``None``.
    """

    name: str
    collective: str
    ranks: int
    chunks: int
    rounds: tuple[tuple[Transfer, ...], ...] = ()
    root: int | None = None

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {self.collective!r}")
        if self.ranks < 1 or self.chunks < 1:
            raise ValueError("a schedule needs ranks >= 1 and chunks >= 1")
        if isinstance(self.rounds, LazyRounds):
            return          # made by a trusted builder; verify() checks it
        object.__setattr__(self, "rounds",
                           tuple(tuple(rnd) for rnd in self.rounds))
        for k, rnd in enumerate(self.rounds):
            if not rnd:
                continue
            src, dst, chunks, _, moved_to = zip(*rnd)
            ranks = src + dst
            if min(ranks) < 0 or max(ranks) >= self.ranks:
                raise ValueError(f"round {k}: rank out of range "
                                 f"[0, {self.ranks})")
            flat = list(chain.from_iterable(chunks))
            flat += chain.from_iterable(d for d in moved_to if d is not None)
            if min(flat) < 0 or max(flat) >= self.chunks:
                raise ValueError(f"round {k}: chunk out of range "
                                 f"[0, {self.chunks})")

    @property
    def steps(self) -> int:
        """Number of rounds (the latency term counts these)."""
        return len(self.rounds)

    def describe(self, rank: int | None = None) -> list[str]:
        """Human-readable lines, ``[round k] send chunk 3 -> rank 1``."""
        out = []
        for k, rnd in enumerate(self.rounds):
            for t in rnd:
                if rank is not None and rank not in (t.src, t.dst):
                    continue
                verb = "reduce" if t.reduce else "copy"
                ch = ",".join(map(str, t.chunks))
                out.append(f"[round {k}] rank {t.src} -> rank {t.dst}: "
                           f"{verb} chunk {ch}")
        return out


# ----------------------------------------------------------------- chunking
def chunk_bounds(count: int, chunks: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each chunk, :func:`numpy.array_split` style."""
    base, extra = divmod(count, chunks)
    bounds, start = [], 0
    for c in range(chunks):
        stop = start + base + (1 if c < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def chunk_sizes(count: int, chunks: int) -> list[int]:
    """Number of elements in each chunk."""
    return [b - a for a, b in chunk_bounds(count, chunks)]


# ------------------------------------------------------------- verification
class ScheduleError(AssertionError):
    """A schedule does not compute its collective."""


# A slot's value is the set of contributions ``(origin_rank, origin_chunk)``
# it holds. Every schedule moves whole chunks, so a slot nearly always holds
# contributions of one origin chunk: stored as ``(chunk, mask of ranks)``,
# whose union and overlap are two integer operations. A slot that mixes
# origin chunks (only a wrong schedule reduces chunk a into chunk b) is a
# frozenset of the pairs; ``None`` is an empty slot.


def _pairs(v) -> frozenset:
    """The contributions ``{(origin_rank, origin_chunk)}`` of a value."""
    if v is None:
        return frozenset()
    if isinstance(v, frozenset):
        return v
    j, mask = v
    return frozenset((r, j) for r in range(mask.bit_length())
                     if mask >> r & 1)


def _value(pairs: frozenset):
    """The value holding exactly ``pairs``."""
    chunks = {j for _, j in pairs}
    if not chunks:
        return None
    if len(chunks) > 1:
        return frozenset(pairs)
    return (chunks.pop(), sum(1 << r for r, _ in pairs))


def _initial_state(s: Schedule) -> list[list]:
    """What each (rank, chunk) slot holds before the first round (``None``:
    nothing meaningful yet)."""
    n, c = s.ranks, s.chunks
    if s.collective in ("allreduce", "reduce_scatter", "reduce", "all_to_all"):
        return [[(j, 1 << r) for j in range(c)] for r in range(n)]
    if s.collective in ("all_gather", "gather"):
        return [[(j, 1 << r) if j == r else None for j in range(c)]
                for r in range(n)]
    # broadcast, scatter: only the root's buffer is meaningful
    return [[(j, 1 << r) if r == s.root else None for j in range(c)]
            for r in range(n)]


def _expected(s: Schedule, rank: int, chunk: int):
    """The value slot (rank, chunk) must hold at the end; ``False`` = don't
    care."""
    col = s.collective
    everyone = (chunk, (1 << s.ranks) - 1)
    if col == "allreduce":
        return everyone
    if col == "reduce_scatter":
        return everyone if chunk == rank else False
    if col == "reduce":
        return everyone if rank == s.root else False
    if col == "all_gather":
        return (chunk, 1 << chunk)
    if col == "gather":
        return (chunk, 1 << chunk) if rank == s.root else False
    if col == "scatter":
        return (chunk, 1 << s.root) if chunk == rank else False
    if col == "broadcast":
        return (chunk, 1 << s.root)
    # all_to_all: rank j's slot r holds rank r's chunk j
    return (rank, 1 << chunk)


def _check_collective_shape(s: Schedule) -> None:
    if s.collective in ("reduce_scatter", "all_gather", "all_to_all",
                        "gather", "scatter"):
        if s.chunks != s.ranks:
            raise ScheduleError(f"{s.collective} needs one chunk per rank")
    if s.collective in ROOTED:
        if s.root is None or not 0 <= s.root < s.ranks:
            raise ScheduleError(f"{s.collective} needs a root in range")


def _combine(cur, val, k: int, slot: tuple[int, int]):
    """``cur`` reduced with ``val``; raises if they share a contribution."""
    if type(cur) is tuple and type(val) is tuple and cur[0] == val[0]:
        if cur[1] & val[1]:
            twice = _pairs((cur[0], cur[1] & val[1]))
        else:
            return (cur[0], cur[1] | val[1])
    else:
        a, b = _pairs(cur), _pairs(val)
        twice = a & b
        if not twice:
            return _value(a | b)
    raise ScheduleError(f"round {k}: rank {slot[0]} chunk {slot[1]} would "
                        f"count {sorted(twice)} twice")


def _simulate(s: Schedule) -> list[list]:
    """Each slot's final value (as encoded above) after running ``s``."""
    _check_collective_shape(s)
    state = _initial_state(s)
    for k, rnd in enumerate(s.rounds):
        # every send of a round reads the slots as they were before it:
        # writes wait in ``written`` until the round ends (no copy of the
        # whole state per round)
        written: dict[tuple[int, int], object] = {}
        copied: set[tuple[int, int]] = set()
        for t in rnd:
            row, into, reduce = state[t.src], state[t.dst], t.reduce
            for c_src, c_dst in zip(t.chunks, t.targets):
                val = row[c_src]
                if val is None:
                    raise ScheduleError(
                        f"round {k}: rank {t.src} sends chunk {c_src} "
                        "before it holds anything")
                slot = (t.dst, c_dst)
                if reduce:
                    if slot in copied:
                        raise ScheduleError(f"round {k}: slot {slot} "
                                            "copied and reduced")
                    cur = written.get(slot, into[c_dst])
                    written[slot] = val if cur is None else \
                        _combine(cur, val, k, slot)
                else:
                    if slot in written:
                        raise ScheduleError(f"round {k}: slot {slot} "
                                            "written twice in one round")
                    written[slot] = val
                    copied.add(slot)
        for (r, c), val in written.items():
            state[r][c] = val
    return state


def simulate_contents(s: Schedule) -> list[list[frozenset]]:
    """Run the schedule symbolically; return each slot's final contributions
    (a set of ``(origin_rank, origin_chunk)``; empty: nothing meaningful).

    Raises:
        ScheduleError: a send of an empty slot, a contribution counted twice,
            or two writes to one slot in one round.
    """
    return [[_pairs(v) for v in row] for row in _simulate(s)]


def verify(s: Schedule) -> None:
    """Prove that ``s`` computes its collective, for its N and chunk count.

    Every rank must end with every contribution exactly once (all-reduce),
    or the reduce-scatter / all-gather / broadcast / reduce / all-to-all
    equivalent. Raises :class:`ScheduleError` with the first bad slot.
    """
    state = _simulate(s)
    for r in range(s.ranks):
        row = state[r]
        for c in range(s.chunks):
            want = _expected(s, r, c)
            if want is not False and row[c] != want:
                have, want = _pairs(row[c]), _pairs(want)
                missing = sorted(want - have)
                extra = sorted(have - want)
                raise ScheduleError(
                    f"{s.name} {s.collective} N={s.ranks}: rank {r} chunk {c}"
                    f" ends wrong (missing {missing[:4]}, extra {extra[:4]})")


# ------------------------------------------------------------------ traffic
@dataclass
class Traffic:
    """Payload each rank sends and receives (bytes and messages)."""

    bytes_sent: list[int]
    bytes_received: list[int]
    messages_sent: list[int]
    messages_received: list[int]

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_sent)


def transfer_elements(t: Transfer, sizes: Sequence[int]) -> int:
    """Elements carried by one transfer, given per-chunk sizes."""
    return sum(sizes[c] for c in t.chunks)


def traffic(s: Schedule, nbytes: int, *, itemsize: int = 1,
            unit: int = 1) -> Traffic:
    """Bytes each rank sends and receives for a buffer of ``nbytes``.

    Exact with uneven chunks: the buffer holds ``nbytes // (itemsize*unit)``
    rows cut like :func:`chunk_bounds`. Empty transfers (chunks of zero
    elements) send no message, as the executor skips them too.
    """
    row = itemsize * unit
    if nbytes % row:
        raise ValueError(f"nbytes={nbytes} is not a whole number of rows "
                         f"of {row} bytes")
    sizes = chunk_sizes(nbytes // row, s.chunks)
    n = s.ranks
    out = Traffic([0] * n, [0] * n, [0] * n, [0] * n)
    for rnd in s.rounds:
        for t in rnd:
            b = transfer_elements(t, sizes) * row
            if b == 0:
                continue
            out.bytes_sent[t.src] += b
            out.bytes_received[t.dst] += b
            out.messages_sent[t.src] += 1
            out.messages_received[t.dst] += 1
    return out


def concat_rounds(*phases: Iterable[Sequence[Transfer]]
                  ) -> list[list[Transfer]]:
    """Rounds of several phases, one after the other (empty rounds dropped)."""
    return [list(r) for ph in phases for r in ph if r]


def merge_rounds(*parallel: Sequence[list[Transfer]]) -> list[list[Transfer]]:
    """Rounds of independent sub-schedules that run side by side."""
    depth = max((len(p) for p in parallel), default=0)
    out = []
    for k in range(depth):
        rnd: list[Transfer] = []
        for p in parallel:
            if k < len(p):
                rnd.extend(p[k])
        out.append(rnd)
    return out
