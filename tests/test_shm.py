"""The shared-memory transport (warmup_kit.comm.shm, warmup_kit.execute.shm).

What only this transport has: buffers in the ranks' segments read by peers
with no copy, counters numbered across calls, mailboxes for point-to-point,
and segments that leave nothing in /dev/shm. (Every collective's results and
byte counts: tests/test_collectives_shm.py; every schedule against the
reference executor: tests/test_executors.py; timeouts and killed ranks:
tests/test_failures.py.)
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

import warmup_kit as wk
from warmup_kit.algorithms import algorithms_for
from warmup_kit.comm.keeper import shm_mappers
from warmup_kit.comm.shm import (SLOT, STEPS, TAG_ENV, Segment, ctrl_bytes,
                                  segment_prefix)

pytestmark = pytest.mark.multiproc


def _segments() -> set[str]:
    """This worker's segments (conftest tags them) and multiprocessing's."""
    d = Path("/dev/shm")
    return {p.name for p in d.iterdir()
            if p.name.startswith(("psm_", segment_prefix()))
            } if d.is_dir() else set()


@pytest.fixture
def clean_shm(no_leftover_processes):
    before = _segments()
    yield
    # a segment another test's live job maps (another pytest-xdist worker's
    # launch, whose names exist until its ranks have mapped them) is not a
    # leftover of this one
    left = (_segments() - before) - shm_mappers().keys()
    assert not left, f"shared-memory segments left behind: {sorted(left)}"


def _input(rank, n):
    return ((np.arange(n) * 7 + 3 * rank) % 11 + 1).astype(np.float64)


def zero_copy(comm, n):
    """Buffers from comm.empty(): peers read them in place; what each rank
    read out of its peers' segments is what it counts."""
    src, out = comm.empty(n), comm.empty(n)
    src[:] = _input(comm.rank, n)
    results = {}
    for alg in algorithms_for("allreduce"):
        comm.reset_stats()
        wk.allreduce(src, comm, out=out, algorithm=alg, timeout=20)
        results[alg] = (out.copy(), comm.stats.bytes_received,
                        comm.stats.bytes_sent)
    return results


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_zero_copy_allreduce_matches_numpy_on_every_rank(n, clean_shm):
    count = 100_003
    res = wk.launch(zero_copy, n, args=(count,), transport="shm", timeout=100)
    want = np.sum([_input(r, count) for r in range(n)], axis=0)
    for alg in algorithms_for("allreduce"):
        tr = wk.traffic(wk.build("allreduce", alg, n), count * 8, itemsize=8)
        for r in range(n):
            got, received, sent = res[r][alg]
            assert got.tobytes() == want.tobytes(), (alg, r)
            assert (received, sent) == (tr.bytes_received[r],
                                        tr.bytes_sent[r]), (alg, r)


def back_to_back(comm, n, calls):
    """Consecutive calls, each on new data written right before it: what
    a slow peer still reads of the previous call must not be overwritten."""
    bad = 0
    src, buf = comm.empty(n), comm.empty(n)
    for i in range(calls):
        alg = ("ring", "recursive_doubling", "rabenseifner", "tree")[i % 4]
        x = np.arange(n, dtype=np.float64) * (i + 1) + comm.rank
        want = np.arange(n) * (i + 1) * comm.size + \
            comm.size * (comm.size - 1) / 2
        if i % 2:
            src[:] = x
            wk.allreduce(src, comm, out=buf, algorithm=alg, timeout=20)
        else:
            buf[:] = x
            wk.allreduce(buf, comm, out=buf, algorithm=alg, timeout=20)
        bad += int(np.count_nonzero(buf != want))
    return bad


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [3, 4])
def test_back_to_back_calls_do_not_race(n, clean_shm):
    assert wk.launch(back_to_back, n, args=(200_001, 24), transport="shm",
                     timeout=100) == [0] * n


def mailboxes(comm, n):
    """Point-to-point through the per-pair mailboxes, messages of several
    slots; what crosses is counted on both ends."""
    nxt, prv = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    x = _input(comm.rank, n)
    got = np.empty(n)
    reqs = [comm.irecv(got, prv, tag=9), comm.isend(x, nxt, tag=9)]
    comm.waitall(reqs, time.monotonic() + 20)
    return got, comm.stats.bytes_sent, comm.stats.bytes_received


@pytest.mark.timeout(120)
def test_messages_larger_than_a_mailbox_slot(clean_shm):
    n = 3 * SLOT // 8 + 5
    res = wk.launch(mailboxes, 3, args=(n,), transport="shm", timeout=100)
    for r, (got, sent, received) in enumerate(res):
        np.testing.assert_array_equal(got, _input((r - 1) % 3, n))
        assert sent == received == n * 8


def streams(comm, sizes):
    """Every rank sends several messages to every other rank at once, each
    posted before any is waited for: larger than the whole mailbox FIFO,
    smaller than one slot, and empty; the FIFO keeps them in order."""
    reqs, got = [], {}
    for p in range(comm.size):
        if p == comm.rank:
            continue
        for i, n in enumerate(sizes):
            got[p, i] = np.empty(n)
            reqs.append(comm.irecv(got[p, i], p, tag=i))
    mine = [_input(comm.rank, n) + i for i, n in enumerate(sizes)]
    for p in range(comm.size):
        if p != comm.rank:
            reqs += [comm.isend(x, p, tag=i) for i, x in enumerate(mine)]
    comm.waitall(reqs, time.monotonic() + 30)
    return {k: v.copy() for k, v in got.items()}


@pytest.mark.timeout(120)
def test_mailbox_fifo_keeps_many_messages_in_order(clean_shm):
    sizes = [STEPS * SLOT // 8 * 2 + 3, 5, 0, SLOT // 8, 3 * SLOT // 8 + 1]
    res = wk.launch(streams, 3, args=(sizes,), transport="shm", timeout=100)
    for r, got in enumerate(res):
        for (p, i), arr in got.items():
            np.testing.assert_array_equal(arr, _input(p, sizes[i]) + i)
        assert len(got) == 2 * len(sizes)


def _pid(comm):
    return os.getpid()


@pytest.mark.timeout(60)
def test_segments_are_unlinked_and_memory_is_bounded(clean_shm):
    pids = wk.launch(_pid, 2, transport="shm", timeout=20)
    assert len(set(pids)) == 2
    assert ctrl_bytes(2) > 0
    with pytest.raises(MemoryError, match="shm_bytes"):
        wk.launch(lambda comm: comm.empty(1 << 20), 1, transport="shm",
                  shm_bytes=4096, timeout=20)


def test_segment_names_carry_the_environments_tag(monkeypatch):
    monkeypatch.setenv(TAG_ENV, "gw3")
    seg = Segment.create(4096)
    try:
        assert seg.name.startswith("wk_gw3_") and len(seg.name) == 23
    finally:
        seg.unlink()
    monkeypatch.delenv(TAG_ENV)
    assert segment_prefix() == "wk_"
    for bad in ("../x", "a b", "x" * 17, "gw\u00e9"):
        monkeypatch.setenv(TAG_ENV, bad)
        with pytest.raises(ValueError, match=TAG_ENV):
            segment_prefix()


def _member_fails(comm):
    """Rank 1 fails to map the segment its split's leader (rank 0) made
    and leaves: rank 0's exchange fails on the lost member, and the
    segment's name must go with it."""
    if comm.rank == 1:
        def refuse(name):
            raise RuntimeError(f"rank 1 does not map {name}")
        Segment.attach = staticmethod(refuse)      # in rank 1's process only
    try:
        comm.split(0)
    except Exception as e:
        return type(e).__name__
    return "split"


@pytest.mark.timeout(90)
def test_failed_split_unlinks_its_segment(clean_shm):
    out = wk.launch(_member_fails, 2, transport="shm", timeout=60,
                    return_exceptions=True)
    assert out == ["PeerLost", "RuntimeError"], out


def _split_sum(comm):
    sub = comm.split(comm.rank % 2, key=-comm.rank)
    y = wk.allreduce(np.full(3, comm.rank + 1.0), sub, timeout=20)
    return sub.rank, sub.size, y[0]


@pytest.mark.timeout(60)
def test_split_makes_its_own_control_segment_and_unlinks_it(clean_shm):
    out = wk.launch(_split_sum, 4, transport="shm", timeout=30)
    # colors {0, 2} and {1, 3}; key -rank reverses the order
    assert out == [(1, 2, 4.0), (1, 2, 6.0), (0, 2, 4.0), (0, 2, 6.0)]
