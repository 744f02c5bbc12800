"""traffic(): the bytes each rank sends and receives, against closed forms.

The ring's headline result (book, Chapter 3) is that the ranks together send
exactly 2(N-1) V, each 2(N-1)/N V when the chunks are equal; the other
algorithms get their own per-rank formulas. Uneven chunks are exact too:
chunk sizes follow numpy.array_split.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from warmup_kit.algorithms import REGISTRY, build, default_ranks_per_node
from warmup_kit.algorithms.hierarchical import hierarchical_allreduce
from warmup_kit.schedule import chunk_sizes, traffic

WORLDS = range(1, 65)
ITEMSIZES = (1, 8)


def counts(n: int) -> list[int]:
    """Element counts: empty, fewer than N, around N, multiples, a prime."""
    return sorted({0, 1, max(n - 1, 0), n, n + 1, 2 * n, 3 * n + 2, 1009,
                   1024, 64 * n})


def sizes(count: int, chunks: int) -> list[int]:
    return [len(p) for p in np.array_split(np.empty(count), chunks)]


def log2_floor(n: int) -> int:
    return n.bit_length() - 1


# -------------------------------------------------------------------- ring
@pytest.mark.parametrize("n", WORLDS)
def test_ring_total_is_exactly_2_n_minus_1_v(n):
    s = build("allreduce", "ring", n)
    for itemsize in ITEMSIZES:
        for count in counts(n):
            v = count * itemsize
            t = traffic(s, v, itemsize=itemsize)
            assert t.total_bytes == 2 * (n - 1) * v
            assert sum(t.bytes_received) == 2 * (n - 1) * v


@pytest.mark.parametrize("n", WORLDS)
def test_ring_per_rank_is_2_n_minus_1_over_n_v_when_n_divides(n):
    s = build("allreduce", "ring", n)
    for itemsize in (1, 8):
        for count in (n, 7 * n, 1024 * n):
            v = count * itemsize
            t = traffic(s, v, itemsize=itemsize)
            per_rank = 2 * (n - 1) * v // n        # exact: n divides count
            assert 2 * (n - 1) * v % n == 0
            assert t.bytes_sent == [per_rank] * n
            assert t.bytes_received == [per_rank] * n
            assert t.messages_sent == [2 * (n - 1)] * n


@pytest.mark.parametrize("n", WORLDS)
def test_ring_per_rank_exact_with_uneven_chunks(n):
    """Rank i sends every chunk but its own in the reduce-scatter and every
    chunk but chunk i+1 in the all-gather; it receives what i-1 sends."""
    s = build("allreduce", "ring", n)
    for count in counts(n):
        sz = chunk_sizes(count, n)
        t = traffic(s, 8 * count, itemsize=8)
        for i in range(n):
            assert t.bytes_sent[i] == 8 * (2 * count - sz[i] - sz[(i + 1) % n])
            assert t.bytes_received[i] == 8 * (2 * count - sz[i - 1] - sz[i])
            nonempty = [c for c in range(n) if sz[c]]
            assert t.messages_sent[i] == (
                sum(1 for c in nonempty if c != i)
                + sum(1 for c in nonempty if c != (i + 1) % n))


@pytest.mark.parametrize("n", WORLDS)
def test_ring_total_with_rows(n):
    """Chunks cut on row boundaries (reduce_scatter of 2-d arrays): the
    total is still exactly 2(N-1) V."""
    s = build("allreduce", "ring", n)
    for unit in (1, 3, 5):
        for rows in (0, 1, n + 1, 17):
            v = rows * unit * 4
            t = traffic(s, v, itemsize=4, unit=unit)
            assert t.total_bytes == 2 * (n - 1) * v
            per_rank = [4 * unit * (2 * rows - a - b) for a, b in zip(
                sizes(rows, n), np.roll(sizes(rows, n), -1))]
            assert t.bytes_sent == per_rank


def test_nbytes_must_be_whole_rows():
    s = build("allreduce", "ring", 4)
    with pytest.raises(ValueError, match="whole number of rows"):
        traffic(s, 10, itemsize=4)
    with pytest.raises(ValueError, match="whole number of rows"):
        traffic(s, 24, itemsize=4, unit=4)


# ------------------------------------------------------------------- naive
@pytest.mark.parametrize("n", WORLDS)
def test_naive_sends_n_minus_1_v_per_rank(n):
    s = build("allreduce", "naive", n)
    for count in counts(n):
        v = 4 * count
        t = traffic(s, v, itemsize=4)
        assert t.bytes_sent == [(n - 1) * v] * n
        assert t.bytes_received == [(n - 1) * v] * n
        assert t.messages_sent == [(n - 1) * (v > 0)] * n
        if count % n == 0 and n > 1 and count:
            ring = traffic(build("allreduce", "ring", n), v, itemsize=4)
            # the naive algorithm moves N/2 times the ring's bytes
            assert 2 * t.total_bytes == n * ring.total_bytes


# ------------------------------------------------------------------- trees
def heap_children(i: int, n: int) -> int:
    return sum(1 for c in (2 * i + 1, 2 * i + 2) if c < n)


@pytest.mark.parametrize("n", WORLDS)
def test_tree_per_rank_by_heap_layout(n):
    """Each non-root sends V up once; each parent sends V to each child."""
    s = build("allreduce", "tree", n)
    for v in (0, 8, 8 * 1009):
        t = traffic(s, v, itemsize=8)
        for r in range(n):
            deg = heap_children(r, n) + (r > 0)
            assert t.bytes_sent[r] == deg * v
            assert t.bytes_received[r] == deg * v
        assert t.total_bytes == 2 * (n - 1) * v


@pytest.mark.parametrize("n", WORLDS)
def test_double_tree_per_rank(n):
    """Tree A over ranks 0..N-1 carries chunk 0, the mirrored tree B (rank r
    at position N-1-r) carries chunk 1."""
    s = build("allreduce", "double_tree", n)
    for count in counts(n):
        c0, c1 = chunk_sizes(count, 2)
        t = traffic(s, 4 * count, itemsize=4)
        for r in range(n):
            b = n - 1 - r
            want = 4 * (c0 * (heap_children(r, n) + (r > 0))
                        + c1 * (heap_children(b, n) + (b > 0)))
            assert t.bytes_sent[r] == want
            assert t.bytes_received[r] == want
        assert t.total_bytes == 2 * (n - 1) * 4 * count


@pytest.mark.parametrize("n", range(3, 65))
def test_double_tree_relieves_the_interior_ranks(n):
    """No rank is interior in both trees, so none sends more than about 2V,
    where a binary tree's interior ranks send 3V."""
    v = 8 * 2 * 1024
    double = traffic(build("allreduce", "double_tree", n), v, itemsize=8)
    tree = traffic(build("allreduce", "tree", n), v, itemsize=8)
    assert max(double.bytes_sent) <= 2 * v
    assert max(tree.bytes_sent) == (3 * v if n >= 5 else 2 * v)


@pytest.mark.parametrize("n", WORLDS)
def test_binomial_broadcast_and_reduce_move_each_byte_once_per_rank(n):
    for root in sorted({0, n // 2, n - 1}):
        bc = traffic(build("broadcast", "tree", n, root=root), 80, itemsize=8)
        rd = traffic(build("reduce", "tree", n, root=root), 80, itemsize=8)
        for r in range(n):
            assert bc.bytes_received[r] == (0 if r == root else 80)
            assert rd.bytes_sent[r] == (0 if r == root else 80)
        assert bc.total_bytes == rd.total_bytes == (n - 1) * 80
        # the reduce is the broadcast backwards
        assert rd.bytes_received == bc.bytes_sent


# ------------------------------------------------- recursive (power of two)
def folded(n: int) -> tuple[int, set[int], set[int]]:
    """(p, ranks that fold into a partner, the partners)."""
    p = 1 << log2_floor(n)
    rem = n - p
    return p, {2 * i + 1 for i in range(rem)}, {2 * i for i in range(rem)}


@pytest.mark.parametrize("n", WORLDS)
def test_recursive_doubling_per_rank(n):
    s = build("allreduce", "recursive_doubling", n)
    p, out, partners = folded(n)
    for v in (0, 8, 8 * 1009):
        t = traffic(s, v, itemsize=8)
        for r in range(n):
            if r in out:
                want = v
            else:
                want = log2_floor(p) * v + (v if r in partners else 0)
            assert t.bytes_sent[r] == want
            assert t.bytes_received[r] == want


@pytest.mark.parametrize("n", WORLDS)
def test_rabenseifner_per_rank_when_p_divides(n):
    """2(p-1)/p V per active rank, like the ring on p ranks, plus V each way
    for the fold into a partner."""
    s = build("allreduce", "rabenseifner", n)
    p, out, partners = folded(n)
    for count in (p, 3 * p, 1024 * p):
        v = 4 * count
        t = traffic(s, v, itemsize=4)
        for r in range(n):
            if r in out:
                want = v
            else:
                want = 2 * (p - 1) * v // p + (v if r in partners else 0)
            assert t.bytes_sent[r] == want
            assert t.bytes_received[r] == want


@pytest.mark.parametrize("n", WORLDS)
def test_rabenseifner_total_with_uneven_chunks(n):
    """Halving sends p/2 + p/4 + ... = p - 1 chunks per active rank, and so
    does doubling: over all active ranks that is 2(p-1) V in total."""
    s = build("allreduce", "rabenseifner", n)
    p, out, partners = folded(n)
    for count in counts(n):
        v = 2 * count
        t = traffic(s, v, itemsize=2)
        assert t.total_bytes == 2 * (p - 1) * v + 2 * len(out) * v


# --------------------------------------------------------------- hierarchical
def _split(s, n: int, g: int, v: int, itemsize: int):
    """Bytes each rank sends inside its group and across groups."""
    sz = chunk_sizes(v // itemsize, s.chunks)
    inside, across = [0] * n, [0] * n
    for rnd in s.rounds:
        for t in rnd:
            b = itemsize * sum(sz[c] for c in t.chunks)
            (inside if t.src // g == t.dst // g else across)[t.src] += b
    return inside, across


@pytest.mark.parametrize("n,g", [(n, g) for n in range(1, 33)
                                 for g in range(1, n + 1) if n % g == 0])
def test_hierarchical_crosses_groups_with_2_g_minus_1_over_g_v_over_rpn(n, g):
    """G groups of g ranks: 2(g-1)/g V per rank inside a group and only
    2(G-1)/G V/g across groups (DESIGN, Chapter 6)."""
    groups = n // g
    s = hierarchical_allreduce(n, g)
    count = 8 * n
    v = 4 * count
    inside, across = _split(s, n, g, v, 4)
    assert inside == [2 * (g - 1) * v // g] * n
    assert across == [2 * (groups - 1) * v // (groups * g)] * n
    t = traffic(s, v, itemsize=4)
    assert t.bytes_sent == [a + b for a, b in zip(inside, across)]


@pytest.mark.parametrize("n", WORLDS)
def test_hierarchical_default_is_a_two_level_split(n):
    g = default_ranks_per_node(n)
    s = build("allreduce", "hierarchical", n)
    assert s.rounds == hierarchical_allreduce(n, g).rounds
    v = 8 * n * 4
    t = traffic(s, v, itemsize=8)
    groups = n // g
    want = 2 * (g - 1) * v // g + 2 * (groups - 1) * v // (groups * g)
    assert t.bytes_sent == [want] * n


# ---------------------------------------------------- the other collectives
@pytest.mark.parametrize("n", WORLDS)
def test_reduce_scatter_all_gather_all_to_all_per_rank(n):
    rs = build("reduce_scatter", "ring", n)
    ag = build("all_gather", "ring", n)
    a2a = build("all_to_all", "direct", n)
    for count in counts(n):
        sz = chunk_sizes(count, n)
        v = 2 * count
        trs, tag, ta2a = (traffic(s, v, itemsize=2) for s in (rs, ag, a2a))
        for i in range(n):
            assert trs.bytes_sent[i] == 2 * (count - sz[i])
            assert trs.bytes_received[i] == 2 * (count - sz[i - 1])
            assert tag.bytes_sent[i] == 2 * (count - sz[(i + 1) % n])
            assert tag.bytes_received[i] == 2 * (count - sz[i])
            assert ta2a.bytes_sent[i] == 2 * (count - sz[i])
            assert ta2a.bytes_received[i] == 2 * (n - 1) * sz[i]
        if count % n == 0:
            assert trs.bytes_sent == tag.bytes_sent == ta2a.bytes_sent == \
                [(n - 1) * v // n] * n


# --------------------------------------------------------- every schedule
REGISTERED = [(c, a) for c in REGISTRY for a in REGISTRY[c]]


@pytest.mark.parametrize("collective,algorithm", REGISTERED,
                         ids=[f"{c}-{a}" for c, a in REGISTERED])
def test_traffic_is_conserved_and_empty_transfers_send_nothing(collective,
                                                               algorithm):
    for n in (1, 2, 3, 5, 8, 13, 32):
        s = build(collective, algorithm, n, root=n - 1)
        for count in (0, 1, n - 1, n + 1, 1009):
            t = traffic(s, 8 * count, itemsize=8)
            assert sum(t.bytes_sent) == sum(t.bytes_received)
            assert sum(t.messages_sent) == sum(t.messages_received)
            assert min(t.bytes_sent + t.bytes_received) >= 0
            if count == 0:
                assert t.total_bytes == 0 and sum(t.messages_sent) == 0
            # bytes scale with the item size, messages do not
            t2 = traffic(s, 2 * 8 * count, itemsize=16)
            assert t2.bytes_sent == [2 * b for b in t.bytes_sent]
            assert t2.messages_sent == t.messages_sent
            # a message is sent only when it carries something
            per_msg = [b / m for b, m in zip(t.bytes_sent, t.messages_sent)
                       if m]
            assert all(x >= 8 for x in per_msg)
        assert math.isclose(traffic(s, 0).total_bytes, 0)
