"""Failures turn into exceptions that name a rank, never into hangs.

* a rank that skips a collective: every other rank raises CollectiveTimeout
  naming it within timeout + 2 s + the blame window (sockets, shared
  memory; under MPI each names a rank it waits for);
* a killed rank: the others raise PeerLost naming it;
* launch() re-raises a rank's exception with the rank named and leaves no
  process behind.
"""
from __future__ import annotations

import os
import signal
import threading
import time
import multiprocessing

import numpy as np
import pytest

import warmup_kit as wk
from conftest import MPI_SCRIPTS, mpi_run, requires_mpi
from warmup_kit.comm.sockets import BLAME_S
from warmup_kit.errors import RankDied

TIMEOUT_S = 1.0
SLACK_S = 2.0 + BLAME_S       # within timeout + 2 s, plus the blame window


# ------------------------------------------------ rank functions (picklable)
def skip_one(comm, culprit, timeout, algorithm, warmup, done):
    """Every rank but ``culprit`` calls allreduce; the culprit stays alive
    but never calls, until the others are through (``done``, a
    multiprocessing barrier inherited through fork) or past the deadline."""
    x = np.arange(10, dtype=np.float64)
    for _ in range(warmup):
        wk.allreduce(x, comm, algorithm=algorithm, timeout=30)
    if comm.rank == culprit:
        _wait(done, timeout + SLACK_S + 1)
        return ("skipped",)
    t0 = time.monotonic()
    try:
        wk.allreduce(x, comm, algorithm=algorithm, timeout=timeout)
        out = ("returned", time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - the result under test
        out = (exc, time.monotonic() - t0)
    _wait(done, timeout + SLACK_S + 1)
    return out


def _wait(barrier, timeout):
    try:
        barrier.wait(timeout)
    except threading.BrokenBarrierError:
        pass


def kill_one(comm, culprit, algorithm, nbytes):
    """The culprit SIGKILLs itself instead of calling allreduce.

    The healthy first call is inside the ``try`` too: a rank that finished it
    early may already have sent the culprit frames of the second call, and a
    process killed with unread data makes its kernel reset the connection
    (RST), which discards what a slower rank had not yet read of the first
    call. That rank then loses the culprit during the first call, and must
    name it all the same.
    """
    x = np.ones(nbytes // 8)
    t0 = time.monotonic()
    try:
        wk.allreduce(x, comm, algorithm=algorithm, timeout=30)   # healthy
        if comm.rank == culprit:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        wk.allreduce(x, comm, algorithm=algorithm, timeout=20)
    except Exception as exc:  # noqa: BLE001 - the result under test
        return (exc, time.monotonic() - t0)
    return ("returned", time.monotonic() - t0)


class Boom(ValueError):
    pass


class TwoArgError(Exception):
    """Pickles, but cannot be rebuilt from its args alone."""

    def __init__(self, what, where):
        super().__init__(f"{what} at {where}")


def raise_on(comm, culprit, exc_kind):
    if comm.rank == culprit:
        if exc_kind == "two-arg":
            raise TwoArgError("bad thing", "step 3")
        raise Boom(f"boom from rank {comm.rank}")
    # the others are inside a collective when the culprit fails
    return wk.allreduce(np.ones(4), comm, timeout=20).tolist()


def hang_on(comm, culprit):
    if comm.rank == culprit:
        time.sleep(120)
    return comm.rank


# ------------------------------------------------------------- skip: sockets
def _barrier(n):
    # launch() forks its ranks by default, so they inherit the barrier
    return multiprocessing.get_context("fork").Barrier(n)


def _check_skip(outcomes, culprit, timeout, named_exactly=True):
    assert outcomes[culprit] == ("skipped",)
    for r, out in enumerate(outcomes):
        if r == culprit:
            continue
        exc, elapsed = out
        assert isinstance(exc, wk.CollectiveTimeout), \
            f"rank {r} got {exc!r}, not CollectiveTimeout"
        assert isinstance(exc, TimeoutError)
        assert elapsed <= timeout + SLACK_S, f"rank {r} took {elapsed:.2f}s"
        assert isinstance(exc.peer, int) and 0 <= exc.peer < len(outcomes)
        assert exc.peer != r, f"rank {r} blames itself"
        assert f"rank {exc.peer}" in str(exc), str(exc)
        if named_exactly:
            assert exc.peer == culprit, f"rank {r}: {exc}"


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
@pytest.mark.parametrize("n,culprit,algorithm,warmup", [
    (2, 1, "ring", 0),
    (3, 0, "tree", 1),
    (4, 3, "recursive_doubling", 0),
    (4, 2, "ring", 0),
    (5, 2, "ring", 2),
    (5, 0, "rabenseifner", 0),
])
def test_skipped_call_times_out_naming_the_culprit(
        transport, n, culprit, algorithm, warmup, no_leftover_processes):
    """Inside a schedule most ranks wait on someone who waits on the
    culprit: every rank still names the culprit, following the chain of
    waits the others report."""
    outcomes = wk.launch(skip_one, n, args=(culprit, TIMEOUT_S, algorithm,
                                            warmup, _barrier(n)),
                         transport=transport, timeout=40)
    _check_skip(outcomes, culprit, TIMEOUT_S)


# ----------------------------------------------------------------- skip: MPI
@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit,algorithm,warmup", [
    (2, 0, "ring", 0),
    (3, 1, "tree", 1),
    (4, 3, "ring", 0),
    (5, 0, "rabenseifner", 1),
])
def test_skipped_call_times_out_naming_a_culprit_mpi(n, culprit, algorithm,
                                                     warmup):
    """Each survivor names a rank it waits for, then the job aborts at exit
    (MPI_Abort) instead of hanging in MPI_Finalize on sends that will never
    be received."""
    t0 = time.monotonic()
    run = mpi_run(MPI_SCRIPTS / "failures.py", n,
                  [culprit, TIMEOUT_S, algorithm, warmup], timeout=45)
    assert run.returncode != 0, run.describe()     # aborted, not finalized
    assert "aborting the MPI job after" in run.stderr, run.describe()
    assert time.monotonic() - t0 < 30
    result = run.json()
    assert result["ranks"] == n
    for r, out in enumerate(result["outcomes"]):
        assert out["rank"] == r
        if r == culprit:
            assert out["kind"] == "skipped"
            continue
        assert out["kind"] == "CollectiveTimeout" and out["is_timeout"], out
        assert out["elapsed_s"] <= TIMEOUT_S + SLACK_S, out
        peer = out["peer"]
        assert isinstance(peer, int) and 0 <= peer < n and peer != r, out
        assert f"rank {peer}" in out["message"], out


# ------------------------------------------------------------ killed: sockets
@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
@pytest.mark.parametrize("n,culprit,algorithm,nbytes", [
    (2, 1, "ring", 800),
    (3, 0, "tree", 800),
    (4, 3, "ring", 8 << 10),
    (4, 1, "naive", 8 << 10),
    (5, 2, "double_tree", 8 << 10),
    (4, 1, "naive", 8 << 20),
])
def test_killed_rank_raises_peer_lost_naming_it(transport, n, culprit,
                                                algorithm, nbytes,
                                                no_leftover_processes):
    """Every other rank raises PeerLost naming the dead rank. With frames
    larger than the socket buffers (8 MiB), a rank that gives up while
    half-way through sending a frame to another cannot pass a notice on that
    connection: the receiver sees it close and names it instead. Then every
    rank still raises PeerLost, and the dead rank is named by some."""
    big = nbytes > 1 << 20
    outcomes = wk.launch(kill_one, n, args=(culprit, algorithm, nbytes),
                         transport=transport, timeout=40,
                         return_exceptions=True)
    died = outcomes[culprit]
    assert isinstance(died, RankDied), died
    assert died.rank == culprit and died.exitcode == -signal.SIGKILL
    for r, out in enumerate(outcomes):
        if r == culprit:
            continue
        exc, elapsed = out
        assert isinstance(exc, wk.PeerLost), f"rank {r} got {exc!r}"
        assert isinstance(exc, ConnectionError)
        assert f"rank {exc.peer}" in str(exc) and exc.peer != r
        if not big:
            assert exc.peer == culprit, f"rank {r}: {exc}"
        assert elapsed < 10, f"rank {r} took {elapsed:.1f}s to notice"
    named = [out[0].peer for r, out in enumerate(outcomes) if r != culprit]
    assert culprit in named


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_raises_rank_died_for_a_killed_rank(no_leftover_processes):
    with pytest.raises(RankDied) as info:
        wk.launch(kill_one, 3, args=(1, "ring", 800), timeout=40)
    assert info.value.rank == 1
    assert "rank 1" in str(info.value)


# ------------------------------------------------------------------- launch
@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit", [(1, 0), (3, 2), (4, 0)])
def test_launch_reraises_the_root_cause_with_the_rank_named(
        n, culprit, no_leftover_processes):
    with pytest.raises(Boom, match=f"boom from rank {culprit}") as info:
        wk.launch(raise_on, n, args=(culprit, "boom"), timeout=40)
    exc = info.value
    assert exc.rank == culprit
    notes = "\n".join(getattr(exc, "__notes__", []))
    assert f"raised on rank {culprit} of {n}" in notes
    assert "Traceback" in notes and "raise_on" in notes


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_reports_an_exception_that_cannot_be_rebuilt(
        no_leftover_processes):
    with pytest.raises(Exception) as info:
        wk.launch(raise_on, 3, args=(1, "two-arg"), timeout=40)
    exc = info.value
    assert "TwoArgError" in str(exc) and "bad thing at step 3" in str(exc)
    assert getattr(exc, "rank", None) == 1


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_return_exceptions_gives_every_rank_outcome(
        no_leftover_processes):
    outcomes = wk.launch(raise_on, 3, args=(1, "boom"), timeout=40,
                         return_exceptions=True)
    assert isinstance(outcomes[1], Boom)
    for r in (0, 2):
        # the others were inside the collective when rank 1 gave up
        assert isinstance(outcomes[r], (wk.PeerLost, wk.CollectiveTimeout)), \
            outcomes[r]
        assert outcomes[r].peer == 1


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_timeout_kills_a_hung_rank(no_leftover_processes):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="rank 2"):
        wk.launch(hang_on, 3, args=(2,), timeout=2.0)
    assert time.monotonic() - t0 < 2.0 + 8


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_launch_returns_results_in_rank_order(no_leftover_processes):
    assert wk.launch(hang_on, 4, args=(-1,), timeout=30) == [0, 1, 2, 3]


@pytest.mark.parametrize("world", [0, -1, 1.5, "2"])
def test_launch_rejects_a_bad_world(world):
    with pytest.raises(ValueError, match="world"):
        wk.launch(hang_on, world, args=(-1,))
