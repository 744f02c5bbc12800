"""The shared-memory transport (warmup_kit.comm.shm, warmup_kit.execute.shm).

* every collective and algorithm, N = 1..4, several dtypes, ops and lengths
  (0, 1, uneven): the zero-copy executor gives bit for bit what the generic
  executor gives on the same ranks, allreduce matches numpy, results are
  identical on every rank, and the counted traffic is traffic()'s;
* the public collectives run over ShmComm's mailboxes (messages larger than
  a mailbox slot too);
* a rank that skips the call: the others raise CollectiveTimeout naming it;
  a killed rank: the others raise PeerLost naming it;
* no /dev/shm segment and no process is left behind.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import warmup_kit as wk
from warmup_kit.algorithms import algorithms_for, build
from warmup_kit.comm.shm import SLOT, ShmComm, launch_shm
from warmup_kit.execute.exchange import run_schedule
from warmup_kit.execute.shm import run_schedule_shm
from warmup_kit.schedule import COLLECTIVES, traffic

TIMEOUT_S = 1.0
SLACK_S = 2.0
CASES = [("float64", "sum", 13), ("float32", "max", 7), ("int32", "prod", 5),
         ("int64", "sum", 0), ("float64", "min", 1)]


def _segments() -> set[str]:
    d = Path("/dev/shm")
    return {p.name for p in d.iterdir() if p.name.startswith("psm_")} \
        if d.is_dir() else set()


@pytest.fixture(scope="module", autouse=True)
def _tracker():
    """multiprocessing's resource tracker (it unlinks what a killed parent
    leaves) is a helper process that lives as long as this one: start it
    before the per-test snapshot of child processes."""
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()


@pytest.fixture
def clean_shm(no_leftover_processes):
    before = _segments()
    yield
    left = _segments() - before
    assert not left, f"shared-memory segments left behind: {sorted(left)}"


def _input(rank, n, dtype, unit):
    x = (np.arange(n * unit) * 7 + 3 * rank) % 11 + 1
    return x.astype(dtype)


def every_schedule(comm):
    """Rank function: every case, zero-copy against the generic executor."""
    bad, checked = [], 0
    for coll in COLLECTIVES:
        for alg in algorithms_for(coll):
            s = build(coll, alg, comm.size, root=comm.size - 1)
            for dtype, op, n in CASES:
                unit = 2 if coll != "allreduce" else 1
                if coll == "all_to_all":
                    n = comm.size * (n % 3)
                x = _input(comm.rank, n, dtype, unit)
                want = x.copy()
                run_schedule(s, want, comm, op=op, unit=unit, deadline=_dl())
                for mode in ("src", "inplace", "private"):
                    comm.reset_stats()
                    if mode == "private":
                        got = x.copy()
                        run_schedule_shm(s, got, comm, op=op, unit=unit,
                                         deadline=_dl())
                    else:
                        got = comm.empty(x.size, x.dtype)
                        src = None
                        if mode == "src":
                            src = comm.empty(x.size, x.dtype)
                            src[:] = x
                        else:
                            got[:] = x
                        run_schedule_shm(s, got, comm, op=op, unit=unit,
                                         deadline=_dl(), src=src)
                    tr = traffic(s, x.nbytes, itemsize=x.itemsize, unit=unit)
                    r, st = comm.rank, comm.stats
                    if (got.tobytes() != want.tobytes()
                            or st.bytes_sent != tr.bytes_sent[r]
                            or st.bytes_received != tr.bytes_received[r]
                            or st.messages_sent != tr.messages_sent[r]
                            or st.messages_received
                            != tr.messages_received[r]):
                        bad.append((coll, alg, dtype, op, n, mode))
                    checked += 1
                comm._top = 0          # reuse the segment for the next case
                comm._scratch = None
    return bad, checked


def _dl():
    return time.monotonic() + 20


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_schedule_matches_the_generic_executor(n, clean_shm):
    out = launch_shm(every_schedule, n, timeout=200)
    for bad, checked in out:
        assert checked > 100
        assert not bad, bad[:5]


def allreduce_numbers(comm, n):
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal(n)
    src, buf = comm.empty(n), comm.empty(n)
    src[:] = x
    out = {}
    for alg in algorithms_for("allreduce"):
        run_schedule_shm(build("allreduce", alg, comm.size), buf, comm,
                         src=src, deadline=_dl())
        out[alg] = buf.copy()
    return x, out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_allreduce_matches_numpy_and_is_identical_on_every_rank(n, clean_shm):
    res = launch_shm(allreduce_numbers, n, args=(100_003,), timeout=100)
    want = np.sum([x for x, _ in res], axis=0)
    for alg in algorithms_for("allreduce"):
        first = res[0][1][alg]
        np.testing.assert_allclose(first, want, rtol=1e-12, atol=1e-12)
        for _, got in res[1:]:
            assert got[alg].tobytes() == first.tobytes(), alg


def back_to_back(comm, n, calls):
    """Consecutive calls, each on new data written right before it: what
    a slow peer still reads of the previous call must not be overwritten."""
    bad = 0
    src, buf = comm.empty(n), comm.empty(n)
    for i in range(calls):
        alg = ("ring", "recursive_doubling", "rabenseifner", "tree")[i % 4]
        s = build("allreduce", alg, comm.size)
        x = np.arange(n, dtype=np.float64) * (i + 1) + comm.rank
        want = np.arange(n) * (i + 1) * comm.size + \
            comm.size * (comm.size - 1) / 2
        if i % 2:
            src[:] = x
            run_schedule_shm(s, buf, comm, src=src, deadline=_dl())
        else:
            buf[:] = x
            run_schedule_shm(s, buf, comm, deadline=_dl())
        bad += int(np.count_nonzero(buf != want))
    return bad


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [3, 4])
def test_back_to_back_calls_do_not_race(n, clean_shm):
    assert launch_shm(back_to_back, n, args=(200_001, 24),
                      timeout=100) == [0] * n


def public_collectives(comm, n):
    x = _input(comm.rank, n, np.float64, 1)
    return (wk.allreduce(x, comm, timeout=20),
            wk.all_gather(x, comm, timeout=20),
            wk.broadcast(x, comm, root=comm.size - 1, timeout=20))


@pytest.mark.timeout(120)
def test_public_collectives_over_the_mailboxes(clean_shm):
    n = 3 * SLOT // 8 + 5                    # several slots per message
    res = launch_shm(public_collectives, 3, args=(n,), timeout=100)
    xs = [_input(r, n, np.float64, 1) for r in range(3)]
    for ar, ag, bc in res:
        np.testing.assert_array_equal(ar, np.sum(xs, axis=0))
        np.testing.assert_array_equal(ag, np.concatenate(xs))
        np.testing.assert_array_equal(bc, xs[2])


def skip_one(comm, culprit, algorithm, public):
    x = comm.empty(1000)
    x[:] = 1.0
    s = build("allreduce", algorithm, comm.size)
    run_schedule_shm(s, x, comm, deadline=_dl())          # healthy
    if comm.rank == culprit:
        time.sleep(TIMEOUT_S + SLACK_S + 0.5)
        return ("skipped",)
    t0 = time.monotonic()
    try:
        if public:
            wk.allreduce(np.ones(1000), comm, algorithm=algorithm,
                         timeout=TIMEOUT_S)
        else:
            run_schedule_shm(s, x, comm,
                             deadline=time.monotonic() + TIMEOUT_S)
        return ("returned", time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - the result under test
        return (exc, time.monotonic() - t0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit,algorithm,public", [
    (2, 1, "ring", False), (4, 2, "ring", False),
    (4, 0, "recursive_doubling", False), (3, 1, "tree", True)])
def test_skipped_call_times_out_naming_the_culprit(n, culprit, algorithm,
                                                   public, clean_shm):
    out = launch_shm(skip_one, n, args=(culprit, algorithm, public),
                     timeout=30)
    assert out[culprit] == ("skipped",)
    for r, item in enumerate(out):
        if r == culprit:
            continue
        exc, dt = item
        assert isinstance(exc, wk.CollectiveTimeout), (r, exc)
        assert exc.peer == culprit, (r, str(exc))
        assert dt < TIMEOUT_S + SLACK_S


def kill_one(comm, culprit, algorithm):
    x = comm.empty(1 << 16)
    x[:] = 1.0
    s = build("allreduce", algorithm, comm.size)
    run_schedule_shm(s, x, comm, deadline=_dl())          # healthy
    if comm.rank == culprit:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        run_schedule_shm(s, x, comm, deadline=time.monotonic() + 20)
        return ("returned", time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - the result under test
        return (exc, time.monotonic() - t0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit,algorithm", [
    (2, 0, "ring"), (4, 1, "ring"), (4, 3, "rabenseifner")])
def test_killed_rank_raises_peer_lost_naming_it(n, culprit, algorithm,
                                                clean_shm):
    out = launch_shm(kill_one, n, args=(culprit, algorithm), timeout=30,
                     return_exceptions=True)
    assert isinstance(out[culprit], wk.errors.RankDied)
    for r, item in enumerate(out):
        if r == culprit:
            continue
        exc, dt = item
        assert isinstance(exc, wk.PeerLost), (r, exc)
        assert exc.peer == culprit
        assert dt < 5


def _exit_code(comm):
    return os.getpid()


@pytest.mark.timeout(60)
def test_segments_are_unlinked_and_the_buffer_is_shared(clean_shm):
    pids = launch_shm(_exit_code, 2, timeout=20)
    assert len(set(pids)) == 2
    assert ShmComm.ctrl_bytes(2) > 0
    with pytest.raises(MemoryError):
        launch_shm(lambda comm: comm.empty(1 << 20), 1, shm_bytes=4096,
                   timeout=20)
