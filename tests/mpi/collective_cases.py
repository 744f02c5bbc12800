"""The collective test cases, run the same way on any communicator.

One suite, several communicators (the mpi4py habit): ``SocketComm`` and
``ShmComm`` ranks started by :func:`warmup_kit.launch`
(tests/test_collectives_sockets.py, tests/test_collectives_shm.py) and
``MPIComm`` ranks under ``mpiexec`` (tests/mpi/collectives.py). Each case
also says how the result is asked for: a new array, a preallocated
``out=``, in place (``out=x``), or non-blocking (``async_op=True``). Every rank
runs every case of :func:`cases` in the same order and returns one small
record per case; :func:`problems` then compares the records of all ranks.

Inputs are given by formula (rank, index) and chosen so that exact equality
with numpy is legitimate: small integers in floats for ``sum``, products of
values in {+-1, +-2, 3} for ``prod`` (|result| <= 3**6, exact even in
float16), anything for ``max``/``min`` (exact by nature), wrap-around for
integers (modular arithmetic does not depend on the order). The ``random``
cases use real-valued noise: there the check is "close to numpy" and
"bit-for-bit identical on every rank", which is the property that matters.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import zlib
from dataclasses import dataclass

import numpy as np

import warmup_kit as wk
from warmup_kit.algorithms import build
from warmup_kit.ops import OPS
from warmup_kit.schedule import traffic

INT_DTYPES = ("int8", "int16", "int32", "int64",
              "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "float32", "float64")
COMPLEX_DTYPES = ("complex64", "complex128")
DTYPES = INT_DTYPES + FLOAT_DTYPES + COMPLEX_DTYPES
BIG_BYTES = 1 << 20          # the ">= 1 MiB" length
PRIME = 1009
CALL_TIMEOUT_S = 30.0
#: collectives whose result must be the same array on every rank
SAME_ON_ALL = ("allreduce", "broadcast", "all_gather")
#: how the result is asked for
MODES = ("new", "out", "inplace", "async")
IN_PLACE = ("allreduce", "broadcast", "all_to_all")


def ops_for(dtype: str) -> tuple[str, ...]:
    """The ops defined for ``dtype`` (no max/min on complex, as in MPI;
    "avg" on floating-point and complex only, as in NCCL)."""
    kind = np.dtype(dtype).kind
    ops = ("sum", "prod") if kind == "c" else tuple(OPS)
    return ops + ("avg",) if kind in "fc" else ops


def lengths(n: int, dtype: str) -> list[int]:
    """{0, 1, N-1, N+1, a prime, >= 1 MiB}; the big one not divisible by N."""
    big = BIG_BYTES // np.dtype(dtype).itemsize + 3
    return [0, 1, max(n - 1, 0), n + 1, PRIME, big]


@dataclass(frozen=True)
class Case:
    """One collective call, identical on every rank."""

    collective: str
    algorithm: str
    dtype: str
    op: str = "sum"
    shape: tuple = ()
    root: int = 0
    values: str = "exact"          # "exact" or "random"
    layout: str = "C"              # "C", "F" (transposed view), "strided"
    ranks_per_node: int | None = None
    group: str = ""                # the pytest parameter this case reports to
    mode: str = "new"              # one of MODES
    uneven: bool = False           # all_to_all with send_counts

    @property
    def id(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        extra = f"-rpn{self.ranks_per_node}" if self.ranks_per_node else ""
        extra += "-v" if self.uneven else ""
        return (f"{self.collective}-{self.algorithm}{extra}-{self.dtype}-"
                f"{self.op}-{shape}-{self.values}-{self.layout}-r{self.root}"
                f"-{self.mode}")


# ------------------------------------------------------------------ the cases
def _turn(n: int, key: int, options: list):
    """``options[(key + n) % len]``: the variant combination ``key`` gets at
    this N. Rotating with N, consecutive N cover every variant.

    A call costs ~2 ms of CPU per rank over loopback (more on the big
    buffer) and this machine has two cores, so the full cross product
    (algorithm x dtype x op x length x N) would take many minutes. Instead
    every (algorithm, dtype, op) runs at every N, each time with another of
    the lengths {0, 1, N-1, N+1, prime, >= 1 MiB}; over N = 1..6 (sockets) or
    1..5 (MPI) each runs with every one of them.
    """
    return options[(key + n) % len(options)]


def cases(n: int) -> list[Case]:
    """Every case for ``n`` ranks, in the order every rank runs them."""
    out: list[Case] = []
    key = 0                              # rotates variants across combinations
    for a, alg in enumerate(wk.ALGORITHMS):
        for d, dt in enumerate(DTYPES):
            g = f"allreduce-{alg}-{dt}"
            for op in ops_for(dt):
                key += 1
                ln = _turn(n, key + a, lengths(n, dt))
                out.append(Case("allreduce", alg, dt, op, (ln,), group=g))
            if dt in FLOAT_DTYPES + COMPLEX_DTYPES:
                # real-valued noise: rounding differs by order, so this is
                # where "bit-identical on every rank" has teeth
                out.append(Case("allreduce", alg, dt, "sum", (PRIME,),
                                values="random", group=g))
                out.append(Case("allreduce", alg, dt, "prod", (n + 1,),
                                values="random", group=g))
        # n-d shapes and non-contiguous inputs keep their shape
        for shape in ((), (0, 4), (2, 3, n + 1)):
            key += 1
            dt = _turn(n, key, list(DTYPES))
            out.append(Case("allreduce", alg, dt, "sum", shape,
                            group=f"allreduce-{alg}-{dt}"))
        for layout in ("F", "strided"):
            key += 1
            dt = _turn(n, key, list(DTYPES))
            out.append(Case("allreduce", alg, dt, "prod", (n + 2, 3),
                            layout=layout, group=f"allreduce-{alg}-{dt}"))
    for rpn in range(1, n + 1):
        out.append(Case("allreduce", "hierarchical", "float64", "sum",
                        (_turn(n, rpn, [n + 1, PRIME]),), values="random",
                        ranks_per_node=rpn,
                        group="allreduce-hierarchical-ranks_per_node"))
    for d, dt in enumerate(DTYPES):
        ops = ops_for(dt)
        lens = lengths(n, dt)
        g = f"reduce_scatter-{dt}"
        for o, op in enumerate(ops):
            out.append(Case("reduce_scatter", "ring", dt, op,
                            (_turn(n, d + o, lens),), group=g))
        out.append(Case("reduce_scatter", "ring", dt, "sum", (n + 1, 3),
                        group=g))
        g = f"all_gather-{dt}"
        for shape in ((), (_turn(n, d, lens[:-1]),), (5, 3), (0, 2)):
            out.append(Case("all_gather", "ring", dt, shape=shape, group=g))
        if _turn(n, d, [True, False, False]):
            out.append(Case("all_gather", "ring", dt,
                            shape=(lens[-1] // n + 1,), group=g))
        g = f"broadcast-{dt}"
        for root in range(n):
            shape = _turn(n, d + root, [(), (n + 1,), (2, 3), (PRIME,)])
            out.append(Case("broadcast", "tree", dt, shape=shape, root=root,
                            group=g))
        if _turn(n, d, [True, False, False]):
            out.append(Case("broadcast", "tree", dt, shape=(lens[-1],),
                            root=n - 1, group=g))
        g = f"reduce-{dt}"
        for root in range(n):
            out.append(Case("reduce", "tree", dt, _turn(n, d + root, ops),
                            _turn(n, d + root, [(n + 1,), (), (2, 3)]),
                            root=root, group=g))
        for o, op in enumerate(ops):
            out.append(Case("reduce", "tree", dt, op,
                            (_turn(n, d + o, lens),), root=(d + o) % n,
                            group=g))
        g = f"all_to_all-{dt}"
        per = BIG_BYTES // (np.dtype(dt).itemsize * n) + 1
        for shape in ((0,), (2 * n, 3),
                      (_turn(n, d, [1, 3, PRIME, per]) * n,)):
            out.append(Case("all_to_all", "direct", dt, shape=shape, group=g))
        g = f"gather-{dt}"
        for root in range(n):
            shape = _turn(n, d + root, [(), (n + 1,), (2, 3), (PRIME,)])
            out.append(Case("gather", "tree", dt, shape=shape, root=root,
                            group=g))
        g = f"scatter-{dt}"
        for root in range(n):
            rows = _turn(n, d + root, [1, 2, PRIME])
            out.append(Case("scatter", "tree", dt, shape=(rows * n, 2),
                            root=root, group=g))
        g = f"all_to_all-{dt}"
        for rows in (0, 3, PRIME):
            out.append(Case("all_to_all", "direct", dt, shape=(rows,),
                            uneven=True, group=g))
    # every way of asking for the result, rotated over the cases
    moded = []
    for i, c in enumerate(out):
        modes = MODES if c.collective in IN_PLACE and not c.uneven else (
            "new", "out", "async")
        moded.append(dataclasses.replace(c, mode=_turn(n, i, list(modes))))
    return list({c.id: c for c in moded}.values())   # first of any duplicate


def groups(n: int) -> list[str]:
    """The distinct ``Case.group`` names, in order (one pytest id each)."""
    return list(dict.fromkeys(c.group for c in cases(n)))


# --------------------------------------------------------------------- inputs
def _salt(case: Case) -> int:
    return zlib.crc32(case.id.encode()) % 1000


#: the exact formulas below repeat with the index i (k = 7 i + c, then
#: k % 11, k % 6, (3 k + rank) % 7 or k % 1999): one period is computed and
#: tiled, the same values a 1 MiB input would get element by element, in
#: a fraction of the time (input making was 90% of a big case's time)
_PERIOD = {"sum": 462, "avg": 462, "prod": 462, "float-max-min": 1999}


def _values(case: Case, rank: int, count: int) -> np.ndarray:
    """``count`` values of ``case.dtype`` for ``rank``, by formula
    (read-only: :func:`make_input` copies it)."""
    return _values_cached(case, rank, count)


@functools.lru_cache(maxsize=64)
def _values_cached(case: Case, rank: int, count: int) -> np.ndarray:
    dt = np.dtype(case.dtype)
    period = None
    if case.values == "exact":
        period = _PERIOD.get(case.op) or (
            _PERIOD["float-max-min"] if dt.kind not in "iu" else None)
    if period is not None and count > period:
        x = np.resize(_formula(case, rank, period), count)
    else:
        x = _formula(case, rank, count)
    x.setflags(write=False)
    return x


def _formula(case: Case, rank: int, count: int) -> np.ndarray:
    dt = np.dtype(case.dtype)
    k = np.arange(count, dtype=np.int64) * 7 + rank * 13 + _salt(case)
    if case.values == "random":
        rng = np.random.default_rng([rank, count, _salt(case)])
        noise = rng.standard_normal(count)
        if dt.kind == "c":
            noise = noise + 1j * rng.standard_normal(count)
        x = 1 + 0.05 * noise if case.op == "prod" else noise
        return x.astype(dt)
    if case.op in ("sum", "avg"):
        if dt.kind == "u":
            return (k % 11).astype(dt)
        if dt.kind == "c":
            return ((k % 11 - 5) + 1j * ((k * 3 + rank) % 7 - 3)).astype(dt)
        return (k % 11 - 5).astype(dt)
    if case.op == "prod":
        if dt.kind == "u":
            return np.array([1, 2, 3, 1, 0, 1], dt)[k % 6]
        if dt.kind == "c":
            return np.array([1, -1, 1j, -1j, 1 + 1j, 1 - 1j], dt)[k % 6]
        return np.array([1, -1, 2, 1, -2, 3], dt)[k % 6]
    # max / min: spread over the whole range of integers; exact anyway
    if dt.kind in "iu":
        mixed = (k.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        return mixed.astype(dt)
    return ((k % 1999 - 999) * 0.25).astype(dt)


def make_input(case: Case, rank: int) -> np.ndarray:
    """Rank ``rank``'s input array (shape, dtype and memory layout)."""
    count = math.prod(case.shape)
    x = _values(case, rank, count).reshape(case.shape).copy()
    if case.layout == "F":            # a transposed (Fortran-order) view
        x = np.asfortranarray(x)
    elif case.layout == "strided":    # every other row of a bigger array
        big = np.zeros((2 * case.shape[0],) + case.shape[1:], x.dtype)
        big[::2] = x
        x = big[::2]
    return x


@functools.lru_cache(maxsize=4)
def _reduced(case: Case, n: int) -> np.ndarray:
    """numpy's reduction of every rank's input (read-only: cached, a case
    asks for it more than once)."""
    xs = np.stack([make_input(case, r) for r in range(n)])
    if case.op == "avg":
        out = np.add.reduce(xs, axis=0, dtype=xs.dtype) / xs.dtype.type(n)
    else:
        out = OPS[case.op].reduce(xs, axis=0, dtype=xs.dtype)
    out = np.asarray(out)
    out.setflags(write=False)
    return out


def send_counts(case: Case, n: int, rank: int) -> list[int]:
    """Rows ``rank`` sends each rank in an uneven all-to-all: a skewed,
    rank-dependent split of its rows (some zero), as top-1 routing gives."""
    rows = case.shape[0]
    w = [((rank * 5 + j * 3) % 7) * (j != (rank + 1) % n) for j in range(n)]
    total = sum(w) or 1
    counts = [rows * x // total for x in w]
    counts[rank] += rows - sum(counts)
    return counts


def expected(case: Case, n: int, rank: int):
    """What ``rank`` must get, by numpy (None: nothing, on reduce's non-roots)."""
    col = case.collective
    if col == "allreduce":
        return _reduced(case, n)
    if col == "reduce":
        return _reduced(case, n) if rank == case.root else None
    if col == "reduce_scatter":
        return np.array_split(_reduced(case, n), n)[rank]
    if col == "all_gather":
        return np.concatenate([make_input(case, r).reshape(
            (-1,) + case.shape[1:]) for r in range(n)])
    if col == "broadcast":
        return make_input(case, case.root)
    if col == "gather":
        return np.concatenate([make_input(case, r).reshape(
            (-1,) + case.shape[1:]) for r in range(n)]) \
            if rank == case.root else None
    if col == "scatter":
        return np.split(make_input(case, case.root), n)[rank]
    if col == "all_to_all" and case.uneven:
        parts = []
        for r in range(n):
            c = np.cumsum([0] + send_counts(case, n, r))
            parts.append(make_input(case, r)[c[rank]:c[rank + 1]])
        return np.concatenate(parts)
    if col == "all_to_all":
        return np.concatenate([np.split(make_input(case, r), n)[rank]
                               for r in range(n)])
    raise ValueError(col)


# ------------------------------------------------------------------- one call
def call(case: Case, x: np.ndarray, comm):
    """The public call under test, asked for the way ``case.mode`` says."""
    kw = {"timeout": CALL_TIMEOUT_S, "algorithm": case.algorithm}
    col = case.collective
    n, rank = comm.size, comm.rank
    if case.mode == "async":
        kw["async_op"] = True
    if case.mode == "inplace":
        kw["out"] = x
    elif case.mode == "out":
        want = expected(case, n, rank)
        if want is not None:
            kw["out"] = np.empty(want.shape, want.dtype)
    if col in ("allreduce", "reduce_scatter", "reduce"):
        kw["op"] = case.op
    if col in ("broadcast", "reduce", "gather", "scatter"):
        kw["root"] = case.root
    if case.ranks_per_node:
        kw["ranks_per_node"] = case.ranks_per_node
    if case.uneven:
        kw["send_counts"] = send_counts(case, n, rank)
        if case.mode == "out":
            kw["recv_counts"] = [send_counts(case, n, r)[rank]
                                 for r in range(n)]
    y = getattr(wk, col)(x, comm, **kw)
    return y.wait() if case.mode == "async" else y


def predicted(case: Case, x: np.ndarray, n: int, rank: int) -> list[int]:
    """[bytes sent, bytes received, messages sent, messages received] that
    ``traffic()`` predicts for this rank."""
    col = case.collective
    if case.uneven:
        row = x.nbytes // max(len(x), 1) if len(x) else 0
        sent = [c for p, c in enumerate(send_counts(case, n, rank))
                if p != rank and c]
        got = [send_counts(case, n, r)[rank] for r in range(n)
               if r != rank and send_counts(case, n, r)[rank]]
        return [sum(sent) * row, sum(got) * row, len(sent), len(got)]
    s = build(col, case.algorithm, n, root=case.root,
              ranks_per_node=case.ranks_per_node)
    rows = x.reshape((-1,) + x.shape[1:]) if x.ndim else x.reshape(1)
    unit = math.prod(rows.shape[1:]) if col in (
        "reduce_scatter", "all_gather", "all_to_all", "gather",
        "scatter") else 1
    nbytes = x.nbytes * (n if col in ("all_gather", "gather") else 1)
    t = traffic(s, nbytes, itemsize=x.itemsize, unit=unit)
    return [t.bytes_sent[rank], t.bytes_received[rank],
            t.messages_sent[rank], t.messages_received[rank]]


def digest(y) -> str | None:
    if y is None:
        return None
    y = np.ascontiguousarray(y)
    h = hashlib.blake2b(f"{y.dtype.str}{y.shape}".encode(), digest_size=12)
    h.update(y.tobytes())
    return h.hexdigest()


def _compare(case: Case, got, want) -> str | None:
    """None if ``got`` is right, else a short description."""
    if want is None:
        return None if got is None else f"expected None, got {type(got)}"
    if not isinstance(got, np.ndarray):
        return f"expected an ndarray, got {type(got).__name__}"
    if got.shape != want.shape or got.dtype != want.dtype:
        return (f"shape/dtype {got.shape} {got.dtype}, expected "
                f"{want.shape} {want.dtype}")
    if case.values == "random":
        tol = {"e": 1e-2, "f": 1e-5, "F": 1e-5}.get(got.dtype.char, 1e-12)
        ok = np.allclose(got, want, rtol=tol, atol=tol)
    else:
        ok = np.array_equal(got, want)
    if ok:
        return None
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    i = int(bad[0]) if bad.size else 0
    return (f"{bad.size} of {got.size} elements differ; first at flat index "
            f"{i}: got {got.reshape(-1)[i]!r}, expected {want.reshape(-1)[i]!r}")


def run_case(case: Case, comm, mpi_reference=None) -> dict:
    """Run one case on this rank; a small JSON-able record."""
    n, rank = comm.size, comm.rank
    x = make_input(case, rank)
    if case.mode == "inplace" and not x.flags.c_contiguous:
        x = x.copy(order="C")
    before = x.copy()
    # MPI's own answer first: it is a collective every rank must enter
    ref = mpi_reference(case, x) if mpi_reference is not None else None
    comm.reset_stats()
    rec: dict = {"id": case.id}
    try:
        y = call(case, x, comm)
    except Exception as exc:  # noqa: BLE001 - reported, then the run stops
        rec["error"] = f"{type(exc).__name__}: {exc}"
        return rec
    st = comm.stats
    rec["stats"] = [st.bytes_sent, st.bytes_received, st.messages_sent,
                    st.messages_received]
    rec["predicted"] = predicted(case, x, n, rank)
    rec["wrong"] = _compare(case, y, expected(case, n, rank))
    rec["untouched"] = bool(case.mode == "inplace" or (
        np.array_equal(x, before) and x.shape == before.shape))
    if case.mode == "inplace" and y is not x:
        rec["wrong"] = "in place: the result is not the input array"
    rec["digest"] = digest(y)
    if mpi_reference is not None:
        rec["mpi_wrong"] = _compare(case, y, ref)
    return rec


def run_all(comm, n_expected: int | None = None, mpi_reference=None,
            any_failed=None) -> list[dict]:
    """Run every case of :func:`cases` on this rank, in order.

    After the first exception the remaining cases are not run (the other
    ranks would only wait for this one): they are reported as not run.
    ``any_failed(flag) -> bool``, if given, is called after every case with
    this rank's flag and must return whether any rank failed (under MPI, so
    that all ranks stop together instead of entering different collectives).
    """
    n = comm.size
    if n_expected is not None and n != n_expected:
        raise RuntimeError(f"expected {n_expected} ranks, got {n}")
    records = []
    stopped = None
    for case in cases(n):
        if stopped is not None:
            records.append({"id": case.id, "error": f"not run ({stopped})"})
            continue
        rec = run_case(case, comm, mpi_reference)
        records.append(rec)
        failed = "error" in rec
        if any_failed is not None:
            failed = any_failed(failed)
        if failed:
            stopped = f"after {case.id} failed"
    return records


# -------------------------------------------------------------- the verdicts
def problems(n: int, per_rank: list[list[dict]]) -> dict[str, list[str]]:
    """Case id -> what is wrong with it over all ranks (empty: correct)."""
    if len(per_rank) != n:
        raise AssertionError(f"{len(per_rank)} rank reports for {n} ranks")
    by_id = {c.id: c for c in cases(n)}
    out: dict[str, list[str]] = {}
    for i, first in enumerate(per_rank[0]):
        case = by_id[first["id"]]
        recs = [rank_recs[i] for rank_recs in per_rank]
        found = []
        for r, rec in enumerate(recs):
            if rec["id"] != case.id:
                found.append(f"rank {r} ran {rec['id']} instead")
                continue
            if "error" in rec:
                found.append(f"rank {r} raised {rec['error']}")
                continue
            if rec["wrong"]:
                found.append(f"rank {r}: {rec['wrong']}")
            if rec.get("mpi_wrong"):
                found.append(f"rank {r} differs from MPI's own: "
                             f"{rec['mpi_wrong']}")
            if not rec["untouched"]:
                found.append(f"rank {r}: the input array was modified")
            if rec["stats"] != rec["predicted"]:
                found.append(f"rank {r}: measured [sent, received, msgs sent, "
                             f"msgs received] {rec['stats']} != traffic() "
                             f"{rec['predicted']}")
        if case.collective in SAME_ON_ALL and all("digest" in r for r in recs):
            digests = {r["digest"] for r in recs}
            if len(digests) != 1:
                found.append(f"results not bit-identical across ranks "
                             f"({len(digests)} distinct)")
        out[case.id] = found
    return out


def report(n: int, per_rank: list[list[dict]]) -> dict[str, dict]:
    """Group -> {case id -> problems}, for the pytest side."""
    by_id = {c.id: c for c in cases(n)}
    out: dict[str, dict] = {}
    for cid, found in problems(n, per_rank).items():
        out.setdefault(by_id[cid].group, {})[cid] = found
    return out


@functools.lru_cache(maxsize=None)
def case_count(n: int) -> int:
    return len(cases(n))
