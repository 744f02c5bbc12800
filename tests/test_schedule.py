"""Schedules, symbolically: every registered schedule computes its collective
for N = 1..64, and verify() rejects schedules that do not."""
from __future__ import annotations

import math

import numpy as np
import pytest

from warmup_kit.algorithms import (ALGORITHMS, REGISTRY, algorithms_for, build,
                                   default_ranks_per_node)
from warmup_kit.algorithms.hierarchical import hierarchical_allreduce
from warmup_kit.schedule import (COLLECTIVES, Schedule, ScheduleError,
                                 Transfer, chunk_bounds, chunk_sizes,
                                 simulate_contents, verify)

WORLDS = range(1, 65)
REGISTERED = [(col, alg) for col in REGISTRY for alg in REGISTRY[col]]
ROOTED = ("broadcast", "reduce")


def _roots(n: int) -> list[int]:
    """All roots for small N, a spread of them for large N."""
    return list(range(n)) if n <= 16 else sorted({0, 1, n // 2, n - 2, n - 1})


# ------------------------------------------------------------- the registry
def test_registry_names_the_books_algorithms():
    required = {"naive", "ring", "tree", "double_tree", "recursive_doubling",
                "rabenseifner", "hierarchical"}
    assert required <= set(ALGORITHMS)
    assert set(REGISTRY) == set(COLLECTIVES)
    for col in COLLECTIVES:
        assert algorithms_for(col), f"no algorithm for {col}"


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("collective,algorithm", REGISTERED,
                         ids=[f"{c}-{a}" for c, a in REGISTERED])
def test_every_schedule_verifies(collective, algorithm, n):
    roots = _roots(n) if collective in ROOTED else [0]
    for root in roots:
        s = build(collective, algorithm, n, root=root)
        assert (s.ranks, s.collective, s.name) == (n, collective, algorithm)
        if collective in ROOTED:
            assert s.root == root
        verify(s)


@pytest.mark.parametrize("n", range(1, 25))
def test_hierarchical_verifies_for_every_group_size(n):
    for rpn in range(1, n + 1):
        s = hierarchical_allreduce(n, rpn)
        assert s.ranks == n
        verify(s)
        assert build("allreduce", "hierarchical", n, ranks_per_node=rpn) \
            .rounds == s.rounds


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 7, 8, 12, 16, 30, 64])
def test_hierarchical_larger_group_than_world_is_one_ring(n):
    verify(hierarchical_allreduce(n, n + 3))


@pytest.mark.parametrize("n", WORLDS)
def test_default_ranks_per_node_divides_n(n):
    g = default_ranks_per_node(n)
    assert n % g == 0
    # largest divisor <= sqrt(N), or N itself when there is none but 1
    divisors = [d for d in range(2, math.isqrt(n) + 1) if n % d == 0]
    assert g == (max(divisors) if divisors else n)


# ------------------------------------------------------------ round counts
def _log2_floor(n: int) -> int:
    return n.bit_length() - 1


def _extra(n: int) -> int:
    """Fold and unfold rounds of the power-of-two algorithms."""
    return 0 if n == 1 << _log2_floor(n) else 2


STEPS = {
    "naive": lambda n: int(n > 1),
    "ring": lambda n: 2 * (n - 1),
    "tree": lambda n: 2 * _log2_floor(n),
    "double_tree": lambda n: 2 * _log2_floor(n),
    "recursive_doubling": lambda n: _log2_floor(n) + _extra(n),
    "rabenseifner": lambda n: 2 * _log2_floor(n) + _extra(n),
}


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("algorithm", sorted(STEPS))
def test_allreduce_round_count_by_formula(algorithm, n):
    assert build("allreduce", algorithm, n).steps == STEPS[algorithm](n)


@pytest.mark.parametrize("n", WORLDS)
def test_other_collectives_round_counts(n):
    assert build("reduce_scatter", "ring", n).steps == n - 1
    assert build("all_gather", "ring", n).steps == n - 1
    assert build("all_to_all", "direct", n).steps == int(n > 1)
    for root in _roots(n):
        assert build("broadcast", "tree", n, root=root).steps == \
            math.ceil(math.log2(n))
        assert build("reduce", "tree", n, root=root).steps == \
            math.ceil(math.log2(n))


@pytest.mark.parametrize("n", [4, 6, 9, 12, 16, 20, 24])
def test_hierarchical_round_count(n):
    g = default_ranks_per_node(n)
    groups = n // g
    s = build("allreduce", "hierarchical", n)
    # ring reduce-scatter and all-gather inside (g-1 each) and a ring
    # all-reduce across (2(G-1)), phases that are empty disappear
    assert s.steps == 2 * (g - 1) + 2 * (groups - 1)


# ------------------------------------------------- verify() catches bad ones
def _with_rounds(s: Schedule, rounds) -> Schedule:
    return Schedule(s.name, s.collective, s.ranks, s.chunks,
                    [list(r) for r in rounds], root=s.root)


def _transfers(s: Schedule):
    for k, rnd in enumerate(s.rounds):
        for i, _ in enumerate(rnd):
            yield k, i


def _mutation_params():
    out = []
    for col, alg in REGISTERED:
        for n in (2, 3, 4, 5, 7, 8):
            out.append(pytest.param(col, alg, n, id=f"{col}-{alg}-N{n}"))
    return out


@pytest.mark.parametrize("collective,algorithm,n", _mutation_params())
def test_dropping_any_transfer_is_caught(collective, algorithm, n):
    """Every transfer of every schedule is needed: drop one, verify fails."""
    s = build(collective, algorithm, n, root=n - 1)
    assert any(s.rounds), "nothing to drop"
    for k, i in _transfers(s):
        rounds = [list(r) for r in s.rounds]
        del rounds[k][i]
        with pytest.raises(ScheduleError):
            verify(_with_rounds(s, rounds))


@pytest.mark.parametrize("collective,algorithm,n", _mutation_params())
def test_duplicating_any_transfer_is_caught(collective, algorithm, n):
    """A reduce sent twice counts a contribution twice; a copy sent twice
    writes a slot twice in one round. Both are rejected."""
    s = build(collective, algorithm, n, root=0)
    for k, i in _transfers(s):
        rounds = [list(r) for r in s.rounds]
        rounds[k].append(rounds[k][i])
        with pytest.raises(ScheduleError, match="twice"):
            verify(_with_rounds(s, rounds))


def test_double_counting_reduce_in_a_later_round_is_caught():
    s = build("allreduce", "ring", 3)
    # after the ring, rank 1 holds everything; adding rank 0's chunk again
    # would count contributions twice
    bad = _with_rounds(s, list(s.rounds) + [[Transfer(0, 1, (0,), reduce=True)]])
    with pytest.raises(ScheduleError, match="twice"):
        verify(bad)


def test_send_of_an_empty_slot_is_caught():
    # all-gather: rank 0 holds only chunk 0 at first, so it cannot send chunk 1
    s = Schedule("bad", "all_gather", 2, 2, [[Transfer(0, 1, (1,))]])
    with pytest.raises(ScheduleError, match="before it holds anything"):
        verify(s)


def test_broadcast_from_a_non_root_is_caught():
    s = Schedule("bad", "broadcast", 3, 1,
                 [[Transfer(1, 2, (0,))], [Transfer(0, 1, (0,))]], root=0)
    with pytest.raises(ScheduleError, match="before it holds anything"):
        verify(s)


def test_two_copies_into_one_slot_in_one_round_are_caught():
    s = Schedule("bad", "broadcast", 3, 1,
                 [[Transfer(0, 1, (0,))],
                  [Transfer(0, 2, (0,)), Transfer(1, 2, (0,))]], root=0)
    with pytest.raises(ScheduleError, match="written twice"):
        verify(s)


def test_copy_and_reduce_into_one_slot_in_one_round_are_caught():
    for first, second in ((False, True), (True, False)):
        s = Schedule("bad", "allreduce", 3, 1,
                     [[Transfer(0, 2, (0,), reduce=first),
                       Transfer(1, 2, (0,), reduce=second)]])
        with pytest.raises(ScheduleError):
            simulate_contents(s)


def test_an_incomplete_allreduce_names_the_missing_contribution():
    # one ring round short: the last all-gather step is missing
    s = build("allreduce", "ring", 4)
    bad = _with_rounds(s, s.rounds[:-1])
    with pytest.raises(ScheduleError, match=r"ends wrong \(missing"):
        verify(bad)


def test_reduce_scatter_must_leave_each_rank_its_own_chunk():
    # correct as an all-reduce's first half, but shifted by one rank
    s = build("reduce_scatter", "ring", 4)
    rounds = [[Transfer((t.src + 1) % 4, (t.dst + 1) % 4, t.chunks, True)
               for t in rnd] for rnd in s.rounds]
    with pytest.raises(ScheduleError, match="ends wrong"):
        verify(_with_rounds(s, rounds))


def test_all_to_all_with_wrong_destination_slot_is_caught():
    s = build("all_to_all", "direct", 3)
    rounds = [[Transfer(t.src, t.dst, t.chunks) for t in rnd]   # no dst_chunks
              for rnd in s.rounds]
    with pytest.raises(ScheduleError):
        verify(_with_rounds(s, rounds))


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather",
                                        "all_to_all"])
def test_collectives_with_one_chunk_per_rank_check_the_chunk_count(collective):
    with pytest.raises(ScheduleError, match="one chunk per rank"):
        verify(Schedule("bad", collective, 3, 2, []))


@pytest.mark.parametrize("collective", ROOTED)
def test_rooted_collectives_need_a_root(collective):
    with pytest.raises(ScheduleError, match="root"):
        verify(Schedule("bad", collective, 3, 1, [], root=None))
    with pytest.raises(ScheduleError, match="root"):
        verify(Schedule("bad", collective, 3, 1, [], root=3))


def test_an_empty_schedule_is_only_right_for_one_rank():
    verify(Schedule("noop", "allreduce", 1, 1, []))
    with pytest.raises(ScheduleError):
        verify(Schedule("noop", "allreduce", 2, 1, []))


# ------------------------------------------------ data structure validation
def test_transfer_rejects_nonsense():
    with pytest.raises(ValueError, match="itself"):
        Transfer(1, 1, (0,))
    with pytest.raises(ValueError, match="at least one chunk"):
        Transfer(0, 1, ())
    with pytest.raises(ValueError, match="as long as"):
        Transfer(0, 1, (0, 1), dst_chunks=(0,))
    assert Transfer(0, 1, 3).chunks == (3,)
    assert Transfer(0, 1, (2,), dst_chunks=(2,)).dst_chunks is None
    assert Transfer(0, 1, (2,), dst_chunks=(5,)).targets == (5,)


def test_schedule_rejects_out_of_range_ranks_and_chunks():
    with pytest.raises(ValueError, match="unknown collective"):
        Schedule("x", "gossip", 2, 1, [])
    with pytest.raises(ValueError, match="ranks >= 1"):
        Schedule("x", "allreduce", 0, 1, [])
    with pytest.raises(ValueError, match="rank.* out of range"):
        Schedule("x", "allreduce", 2, 1, [[Transfer(0, 2, (0,))]])
    with pytest.raises(ValueError, match="chunk.* out of range"):
        Schedule("x", "allreduce", 2, 1, [[Transfer(0, 1, (1,))]])


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4"])
def test_build_rejects_bad_world_sizes(bad):
    with pytest.raises(ValueError):
        build("allreduce", "ring", bad)


def test_build_checks_its_arguments_before_its_cache():
    """2.0 == 2 and True == 1 hash alike: a cached int schedule must not
    answer a float or a bool (failed when another test had built N=2)."""
    build("allreduce", "ring", 2)
    for bad in (2.0, True):
        with pytest.raises(ValueError, match="must be an int"):
            build("allreduce", "ring", bad)
    build("broadcast", "tree", 4, root=1)
    with pytest.raises(ValueError, match="root must be an int"):
        build("broadcast", "tree", 4, root=1.0)


def test_build_rejects_unknown_names_and_roots():
    with pytest.raises(ValueError, match="unknown allreduce algorithm 'bogus'"):
        build("allreduce", "bogus", 4)
    with pytest.raises(ValueError, match="unknown collective"):
        build("gossip", "ring", 4)
    with pytest.raises(ValueError, match="root 4 out of range"):
        build("broadcast", "tree", 4, root=4)
    with pytest.raises(ValueError, match="ranks_per_node"):
        build("allreduce", "hierarchical", 4, ranks_per_node=0)


def test_describe_lists_each_transfer_once():
    s = build("allreduce", "ring", 3)
    lines = s.describe()
    assert len(lines) == sum(len(r) for r in s.rounds)
    assert lines[0].startswith("[round 0] rank 0 -> rank 1: reduce chunk")
    mine = s.describe(rank=1)
    assert all("rank 1" in line for line in mine)
    # rank 1 sends one chunk and receives one each round
    assert len(mine) == 2 * s.steps


# ------------------------------------------------------------------ chunking
@pytest.mark.parametrize("chunks", [1, 2, 3, 7, 8, 64])
def test_chunk_bounds_cut_like_array_split(chunks):
    for count in list(range(0, 3 * chunks + 2)) + [1009, 4096]:
        pieces = np.array_split(np.arange(count), chunks)
        want = [(int(p[0]), int(p[-1]) + 1) if p.size else None
                for p in pieces]
        got = chunk_bounds(count, chunks)
        assert [b - a for a, b in got] == [p.size for p in pieces]
        assert chunk_sizes(count, chunks) == [p.size for p in pieces]
        assert all(w is None or w == g for w, g in zip(want, got))
        assert got[-1][1] == count and got[0][0] == 0


# ----------------------------------- the packed simulation equals the plain one
def _reference_contents(s: Schedule) -> list[list[frozenset]]:
    """The plain reading of the round semantics, a set of (rank, chunk)
    pairs per slot; simulate_contents packs them, and must agree."""
    n, c = s.ranks, s.chunks
    if s.collective in ("allreduce", "reduce_scatter", "reduce", "all_to_all"):
        state = [[frozenset({(r, j)}) for j in range(c)] for r in range(n)]
    elif s.collective in ("all_gather", "gather"):
        state = [[frozenset({(r, j)}) if j == r else frozenset()
                  for j in range(c)] for r in range(n)]
    else:
        state = [[frozenset({(r, j)}) if r == s.root else frozenset()
                  for j in range(c)] for r in range(n)]
    for k, rnd in enumerate(s.rounds):
        new = [row[:] for row in state]
        for t in rnd:
            for a, b in zip(t.chunks, t.targets):
                val = state[t.src][a]
                if not val:
                    raise ScheduleError("empty send")
                if t.reduce:
                    if new[t.dst][b] & val:
                        raise ScheduleError("twice")
                    new[t.dst][b] = new[t.dst][b] | val
                else:
                    new[t.dst][b] = val
        state = new
    return state


def _same_outcome(s: Schedule) -> None:
    try:
        want = _reference_contents(s)
    except ScheduleError:
        want = ScheduleError
    try:
        got = simulate_contents(s)
    except ScheduleError:
        got = ScheduleError
    if want is ScheduleError:
        assert got is ScheduleError, s.name
    else:
        # the packed run also rejects two writes to a slot in one round,
        # which the plain reading lets the later one win
        assert got is ScheduleError or got == want, s.name


@pytest.mark.parametrize("collective,algorithm", REGISTERED,
                         ids=[f"{c}-{a}" for c, a in REGISTERED])
def test_packed_contents_equal_the_plain_reading(collective, algorithm):
    for n in range(1, 11):
        s = build(collective, algorithm, n, root=n - 1)
        assert simulate_contents(s) == _reference_contents(s)
        # and on the schedule with each transfer dropped in turn
        for k, i in list(_transfers(s))[:40]:
            rounds = [list(r) for r in s.rounds]
            del rounds[k][i]
            _same_outcome(_with_rounds(s, rounds))


def test_a_slot_that_mixes_origin_chunks_is_held_exactly():
    # rank 0 reduces its chunk 0 into rank 1's chunk 1: chunk 1 then holds
    # (1, 1) and (0, 0), which no all-reduce may end with
    s = Schedule("bad", "allreduce", 2, 2,
                 [[Transfer(0, 1, (0,), reduce=True, dst_chunks=(1,))]])
    assert simulate_contents(s)[1][1] == {(1, 1), (0, 0)}
    assert simulate_contents(s) == _reference_contents(s)
    with pytest.raises(ScheduleError):
        verify(s)
    # a reduce-scatter right but for chunk 0 reduced into rank 1's chunk 1
    rs = Schedule("bad", "reduce_scatter", 2, 2,
                  [[Transfer(0, 1, (1,), reduce=True),
                    Transfer(1, 0, (0,), reduce=True)],
                   [Transfer(0, 1, (0,), reduce=True, dst_chunks=(1,))]])
    assert simulate_contents(rs) == _reference_contents(rs)
    with pytest.raises(ScheduleError, match=r"rank 1 chunk 1 ends wrong "
                       r"\(missing \[\], extra \[\(0, 0\), \(1, 0\)\]\)"):
        verify(rs)
    # reducing the mixed slot again counts (0, 0) twice
    again = Schedule("bad", "allreduce", 3, 2,
                     [[Transfer(0, 1, (0,), reduce=True, dst_chunks=(1,)),
                       Transfer(0, 2, (0,))],
                      [Transfer(2, 1, (0,), reduce=True, dst_chunks=(1,))]])
    with pytest.raises(ScheduleError, match=r"count \[\(0, 0\)\] twice"):
        simulate_contents(again)
