"""Hangs become errors that name the culprit: the progress board, the
watchdog's diagnosis, the watchdog ending a real wait, and Lab 01's
``--fail hang|kill|slow`` on sockets, shared memory and MPI.

No test can hang: the lab's ranks are launched with a deadline, every
mpiexec run has one, and the watchdog itself ends the hangs."""
from __future__ import annotations

import json
import math
import os
import threading
import time

import pytest

import warmup_kit as wk
from conftest import PYTHON, ROOT, mpi_run, requires_mpi, run_command
from warmup_kit.failures.board import Board, Row
from warmup_kit.failures.lab import Demo, lines, named, run_local
from warmup_kit.failures.watchdog import (
    HangDetected, Watchdog, diagnose, refine)

DEAD_PID = 2 ** 22 + 12345            # above pid_max's default: never alive
LAB = ROOT / "labs" / "lab01.py"


def row(rank, started, done, pid=None, t=0.0, step=3, op="allreduce",
        beat=None, gave_up=False):
    """A board row; ``beat``: when its heartbeat was last written (None:
    it is beating, whatever ``now`` the test diagnoses at)."""
    return Row(rank, os.getpid() if pid is None else pid, step, started,
               done, t, op, 4096, math.inf if beat is None else beat,
               gave_up)


# ------------------------------------------------------------- diagnosis
def test_the_rank_that_never_entered_is_the_culprit():
    rows = [row(0, 7, 6, t=10.0), row(1, 7, 6, t=10.5), row(2, 6, 6),
            row(3, 7, 6, t=11.0)]
    rep = diagnose(rows, now=15.0)
    assert rep.culprits == (2,) and rep.waiting == (0, 1, 3)
    assert rep.seq == 7 and rep.waited_s == pytest.approx(5.0)
    assert rep.text.startswith("ranks 0,1,3 waiting on rank 2 for 5.0 s in "
                               "collective #7 (allreduce, 4 KiB)")
    assert "alive at step 3, outside any collective" in rep.text


def test_a_dead_culprit_is_called_dead():
    rows = [row(0, 3, 2, t=1.0), row(1, 2, 2, pid=DEAD_PID)]
    assert "is dead" in diagnose(rows, now=2.0).details[1]


def test_when_every_rank_is_inside_nobody_is_blamed():
    rows = [row(r, 5, 4, t=1.0) for r in range(4)]
    rep = diagnose(rows, now=3.0)
    assert rep.culprit is None and rep.waiting == (0, 1, 2, 3)
    assert "in the transport" in rep.text


def test_a_rank_in_an_older_collective_is_a_mismatch():
    rows = [row(0, 5, 4, t=1.0), row(1, 4, 3, t=0.5)]
    assert "disagree on the order" in diagnose(rows, now=2.0).details[1]


def test_a_frozen_rank_inside_the_same_collective_is_the_culprit():
    """SIGSTOP inside the collective: every rank is inside #5, but rank 2's
    heartbeat stopped; the others beat."""
    rows = [row(r, 5, 4, t=1.0) for r in range(4)]
    rows[2] = row(2, 5, 4, t=1.0, beat=1.2)
    rep = diagnose(rows, now=4.0)
    assert rep.culprits == (2,) and rep.waiting == (0, 1, 3)
    assert rep.causes == {2: "frozen"}
    assert rep.text.startswith("ranks 0,1,3 waiting on rank 2 for 3.0 s")
    assert ("rank 2 is frozen: its process is alive but its heartbeat "
            "stopped 2.8 s ago, inside collective #5") in rep.text
    assert "disagree" not in rep.text


def test_a_frozen_rank_in_an_older_collective_is_not_out_of_order():
    """Rank 2 stopped inside #4 after its sends; ranks 0 and 1 finished #4
    and wait in #5, rank 3 still waits in #4 for rank 2's data. Neither
    rank 3 nor rank 0 is to blame."""
    rows = [row(0, 5, 4, t=2.0), row(1, 5, 4, t=2.1),
            row(2, 4, 3, t=1.0, beat=1.1), row(3, 4, 3, t=1.0)]
    rep = diagnose(rows, now=5.0)
    assert rep.culprits == (2,) and rep.causes == {2: "frozen"}
    assert rep.waiting == (0, 1, 3) and rep.seq == 5
    assert "inside collective #4" in rep.text and "disagree" not in rep.text


def test_a_frozen_rank_outside_the_collective_is_frozen_not_behind():
    rows = [row(0, 3, 2, t=1.0), row(1, 2, 2, step=2, beat=0.9),
            row(2, 3, 2, t=1.0)]
    rep = diagnose(rows, now=4.0)
    assert rep.culprits == (1,) and rep.causes == {1: "frozen"}
    assert ("rank 1 is frozen: its process is alive but its heartbeat "
            "stopped 3.1 s ago, at step 2, outside any collective") in rep.text


def test_each_cause_has_its_own_words():
    """Dead, behind and out of order, each beside the waiting rank 0."""
    def only(r):
        return diagnose([row(0, 5, 4, t=1.0), r], now=2.0)
    dead = only(row(1, 5, 4, t=1.0, pid=DEAD_PID))     # died inside #5
    assert dead.causes == {1: "dead"} and "is dead" in dead.text
    behind = only(row(1, 4, 4))
    assert behind.causes == {1: "behind"}
    assert "alive at step 3, outside any collective" in behind.text
    other_op = only(row(1, 5, 4, t=1.0, op="broadcast"))
    assert other_op.causes == {1: "out of order"}
    assert "inside collective #5 (broadcast) with a live heartbeat: the " \
        "ranks disagree on the order of calls" in other_op.text


def test_dead_or_frozen_ranks_outrank_the_ranks_waiting_on_them():
    """Rank 3 waits in #4 (alive, beating) only because rank 1 is frozen:
    rank 1 is the culprit, not rank 3's 'order of calls'."""
    rows = [row(0, 5, 4, t=2.0), row(1, 4, 4, beat=0.5),
            row(2, 5, 4, t=2.0), row(3, 4, 3, t=1.0)]
    rep = diagnose(rows, now=4.0)
    assert rep.culprits == (1,) and 3 in rep.waiting


def test_a_rank_that_gave_up_is_never_blamed():
    """Rank 0's own timeout ended its wait and its watchdog stopped: its
    heartbeat is stale, but it is a victim; rank 2 is behind."""
    rows = [row(0, 5, 4, t=1.0, beat=1.5, gave_up=True),
            row(1, 5, 4, t=1.0), row(2, 4, 4)]
    rep = diagnose(rows, now=5.0)
    assert rep.culprits == (2,) and rep.causes == {2: "behind"}
    assert rep.waiting == (0, 1)
    # ... even once its process has exited
    rows[0] = row(0, 5, 4, t=1.0, beat=1.5, gave_up=True, pid=DEAD_PID)
    assert diagnose(rows, now=5.0).culprits == (2,)


def test_every_rank_inside_and_beating_names_the_oldest_heartbeat():
    rows = [row(r, 5, 4, t=1.0, beat=2.9 + 0.01 * r) for r in range(3)]
    rep = diagnose(rows, now=3.0)
    assert rep.culprit is None and rep.oldest_beat[0] == 0
    assert "every rank is inside it and alive (the oldest heartbeat, " \
        "rank 0's, is 0.1 s old), none is behind" in rep.text


def test_nobody_waiting_is_no_report():
    assert diagnose([row(0, 3, 3), row(1, 3, 3)]) is None


# ------------------------------------------------------------- the board
def test_ranks_see_each_other_and_the_first_verdict_stands(tmp_path):
    path = tmp_path / "board"
    a, b = Board(path, 2, 0), Board(path, 2, 1)
    with a.collective("broadcast", 8) as seq:
        assert seq == 1
        r = b.rows()[0]
        assert r.inside and r.op == "broadcast" and r.nbytes == 8
    assert not b.rows()[0].inside and b.rows()[0].done == 1
    assert a.verdict() is None
    assert b.announce(0) == (0, 1)
    assert a.announce(1) == (0, 1)             # too late: rank 1's stands
    a.acknowledge()
    assert b.acknowledged() == {0}
    a.close(), b.close()


def test_a_verdict_that_blames_nobody_still_stands(tmp_path):
    """Every rank inside: the verdict is 'no rank', and it is a verdict
    (it was stored as 'no verdict yet', and the watchdog crashed on it)."""
    path = tmp_path / "board"
    a, b = Board(path, 2, 0), Board(path, 2, 1)
    assert b.announce(None) == (None, 1)
    assert a.verdict() == (None, 1)
    assert a.announce(0) == (None, 1)          # the first one stands
    with pytest.raises(ValueError, match="culprit must be a rank"):
        a.announce(2)
    a.close(), b.close()


def test_a_collective_that_raised_is_marked_given_up(tmp_path):
    path = tmp_path / "board"
    a = Board(path, 1, 0)
    with pytest.raises(wk.CollectiveTimeout):
        with a.collective("allreduce"):
            raise wk.CollectiveTimeout("x", peer=0, rank=0)
    r = a.rows()[0]
    assert r.inside and r.gave_up
    with a.collective("allreduce"):
        assert not a.rows()[0].gave_up        # a new collective, a new wait
    a.close()


# ------------------------------------------------------------- the watchdog
def blocked(seconds=6.0):
    """Stand for a wait with no timeout (the watchdog's signal ends it)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)


class Beating:
    """Another rank's heartbeat, written by a thread of this process."""

    def __init__(self, board):
        self.board, self.done = board, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.wait(0.02):
            self.board.beat()

    def stop(self):
        self.done.set()
        self.thread.join(2)


def test_every_rank_inside_the_watchdog_still_ends_the_wait(tmp_path):
    """Rank 1 is inside the same collective and beating (a kernel that
    never returns): nobody is behind, and the wait ends anyway, naming
    nobody (the watchdog thread used to die on this verdict)."""
    path = tmp_path / "board"
    me, other = Board(path, 2, 0), Board(path, 2, 1)
    other.enter("allreduce", 64)
    beat = Beating(other)
    t0 = time.monotonic()
    try:
        with pytest.raises(HangDetected) as info:
            with Watchdog(me, hang_s=0.5):
                with me.collective("allreduce", 64):
                    blocked()
    finally:
        beat.stop()
    assert time.monotonic() - t0 < 3
    assert info.value.peer is None and info.value.rank == 0
    assert "every rank is inside it and alive" in str(info.value)
    assert "none is behind" in str(info.value)
    assert me.verdict() == (None, 0) and me.acknowledged() == {0}
    me.close(), other.close()


def test_a_frozen_rank_inside_the_collective_is_named(tmp_path):
    """Rank 1 entered the collective, then its heartbeat stopped (as under
    SIGSTOP): the watchdog names it frozen."""
    path = tmp_path / "board"
    me, other = Board(path, 2, 0), Board(path, 2, 1)
    other.enter("allreduce", 64)
    with pytest.raises(HangDetected) as info:
        with Watchdog(me, hang_s=1.0):
            with me.collective("allreduce", 64):
                blocked()
    assert info.value.peer == 1
    assert "waiting on rank 1" in str(info.value)
    assert "rank 1 is frozen" in str(info.value)
    me.close(), other.close()


def test_a_failing_watchdog_reports_itself_and_ends_the_wait(
        tmp_path, monkeypatch, capfd):
    from warmup_kit.failures import watchdog

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the diagnosis")
    monkeypatch.setattr(watchdog, "diagnose", broken)
    path = tmp_path / "board"
    me, other = Board(path, 2, 0), Board(path, 2, 1)
    t0 = time.monotonic()
    with pytest.raises(HangDetected) as info:
        with Watchdog(me, hang_s=0.3) as wd:
            with me.collective("allreduce", 64):
                blocked()
    assert time.monotonic() - t0 < 3
    assert info.value.peer is None
    assert "the watchdog failed (RuntimeError: a bug in the diagnosis)" \
        in str(info.value) and wd.error in str(info.value)
    assert "a bug in the diagnosis" in capfd.readouterr().err
    me.close(), other.close()


def test_a_failing_watchdog_calls_the_action_without_a_report(
        tmp_path, monkeypatch):
    from warmup_kit.failures import watchdog
    monkeypatch.setattr(watchdog, "diagnose", lambda *a, **k: 1 / 0)
    path = tmp_path / "board"
    me, other = Board(path, 2, 0), Board(path, 2, 1)
    got = []
    wd = Watchdog(me, hang_s=0.2, action=lambda rep, mine: got.append(
        (rep, mine)))
    me.enter("allreduce", 8)
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    wd.stop()
    assert got == [(None, True)] and "ZeroDivisionError" in wd.error
    me.close(), other.close()


def test_the_watchdog_keeps_beating_after_it_acted(tmp_path):
    """A rank whose wait was ended is alive: its heartbeat goes on until
    the watchdog stops, so no other rank takes it for frozen."""
    path = tmp_path / "board"
    me, other = Board(path, 2, 0), Board(path, 2, 1)
    got = []
    wd = Watchdog(me, hang_s=0.2, action=lambda rep, mine: got.append(1))
    me.enter("allreduce", 8)
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)
    age = time.monotonic() - me.rows()[0].beat_s
    wd.stop()
    assert got and age < 0.5
    me.close(), other.close()


def test_the_watchdog_ends_a_real_wait_naming_the_culprit(tmp_path):
    """This process is rank 0, blocked (a sleep stands for a wait with no
    timeout) in a collective that rank 1 never enters."""
    path = tmp_path / "board"
    me, other = Board(path, 2, 0), Board(path, 2, 1)
    t0 = time.monotonic()
    with pytest.raises(HangDetected) as info:
        with Watchdog(me, hang_s=0.3):
            with me.collective("allreduce", 64):
                time.sleep(30)
    assert time.monotonic() - t0 < 5
    assert info.value.peer == 1 and info.value.rank == 0
    assert isinstance(info.value, wk.CollectiveTimeout)
    assert "waiting on rank 1" in str(info.value)
    me.close(), other.close()


def test_a_callable_action_gets_the_report(tmp_path):
    path = tmp_path / "board"
    me, other = Board(path, 2, 0), Board(path, 2, 1)
    got = []
    wd = Watchdog(me, hang_s=0.2, action=lambda rep, mine: got.append(
        (rep.culprit, mine)))
    me.enter("allreduce", 8)
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    wd.stop()
    assert got == [(1, True)]
    me.close(), other.close()


def test_refine_names_the_rank_behind(tmp_path):
    path = tmp_path / "board"
    boards = [Board(path, 3, r) for r in range(3)]
    boards[0].enter("allreduce")
    boards[1].enter("allreduce")                 # rank 2 never does
    exc = refine(wk.CollectiveTimeout("rank 0: timed out waiting for rank 1",
                                      peer=1, rank=0), boards[0])
    assert exc.peer == 2 and "the board" in str(exc)
    same = wk.CollectiveTimeout("x", peer=2, rank=0)
    assert refine(same, boards[0]) is same
    for b in boards:
        b.close()


def test_refine_names_a_frozen_rank_not_the_neighbour(tmp_path):
    """Under MPI rank 0 times out on its ring neighbour, rank 1, which is
    waiting too; rank 2 entered the collective and was stopped there (its
    heartbeat is stale). Every rank is inside: the board used to know no
    better, and rank 1 stayed blamed."""
    path = tmp_path / "board"
    boards = [Board(path, 3, r) for r in range(3)]
    for b in boards:
        b.enter("allreduce")
    time.sleep(0.3)
    boards[0].beat(), boards[1].beat()              # rank 2 is stopped
    exc = refine(wk.CollectiveTimeout("rank 0: timed out waiting for rank 1",
                                      peer=1, rank=0), boards[0], stale_s=0.2)
    assert exc.peer == 2 and "rank 2 is frozen" in str(exc)
    for b in boards:
        b.close()


# ------------------------------------------------------------- Lab 01, live
def check_named(res, k):
    assert named(res), "\n".join(lines(res))
    for o in res["ranks"]:
        if o["rank"] != k:
            assert f"rank {k}" in o["message"] or o["peer"] == k


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
@pytest.mark.parametrize("k", [0, 2])
def test_a_hang_without_timeout_is_ended_by_the_watchdog(
        transport, k, no_leftover_processes):
    t0 = time.monotonic()
    res = run_local(Demo("hang", k, watchdog_s=1.5, steps=6), 4, transport)
    assert time.monotonic() - t0 < 1.5 + 12
    check_named(res, k)
    others = ",".join(str(r) for r in range(4) if r != k)
    assert res["report"].startswith(f"ranks {others} waiting on rank {k}")
    for o in res["ranks"]:
        if o["rank"] != k:
            assert o["error"] == "HangDetected"
            assert 0 < o["waited_s"] < 1.5 + 3
        else:
            assert o["error"] == "hung"            # killed by the launcher
    # the verdict comes 1.5 s after the first rank entered; one that
    # entered later (a loaded machine) has waited less
    assert max(o["waited_s"] for o in res["ranks"] if o["rank"] != k) > 1.4


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_with_a_timeout_every_survivor_names_the_culprit(
        transport, no_leftover_processes):
    res = run_local(Demo("hang", 3, timeout=1.0, steps=6), 4, transport)
    check_named(res, 3)
    for o in res["ranks"][:3]:
        assert o["error"] == "CollectiveTimeout" and o["waited_s"] < 1 + 4


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_a_killed_rank_is_named_by_every_peer(transport,
                                              no_leftover_processes):
    res = run_local(Demo("kill", 1, steps=6), 4, transport)
    check_named(res, 1)
    assert res["ranks"][1]["error"] == "died"
    assert all(o["error"] == "PeerLost" for o in res["ranks"] if o["rank"]
               != 1)


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_a_slow_rank_completes_and_is_named(no_leftover_processes):
    res = run_local(Demo("slow", 2, slow_factor=6), 4, "sockets")
    assert all(o["ok"] for o in res["ranks"])
    assert res["stragglers"]["ranks"] == [2], res["stragglers"]["text"]
    assert res["stragglers"]["cost_s"] > 0


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_lab_cli_hang_and_json():
    run = run_command([PYTHON, LAB, "--world", "4", "--fail", "hang",
                       "--fail-rank", "2", "--watchdog", "1.5", "--steps",
                       "6"], timeout=45)
    assert run.returncode == 0, run.describe()
    assert "watchdog: ranks 0,1,3 waiting on rank 2" in run.stdout
    run = run_command([PYTHON, LAB, "--world", "3", "--fail", "kill",
                       "--fail-rank", "1", "--json"], timeout=45)
    res = json.loads(run.stdout)
    assert run.returncode == 0 and named(res)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_the_lab_cli_refuses_a_rank_that_does_not_exist():
    run = run_command([PYTHON, LAB, "--world", "4", "--fail", "hang",
                       "--fail-rank", "4"], timeout=25)
    assert run.returncode == 2 and "not a rank of 4" in run.stderr


# ------------------------------------------------------------- under MPI
@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpi_hang_without_timeout_the_watchdog_aborts_the_job():
    t0 = time.monotonic()
    run = mpi_run(LAB, 4, ["--fail", "hang", "--fail-rank", "2",
                           "--watchdog", "1.5", "--steps", "6"], timeout=45,
                  mpi4py_runner=False)
    assert time.monotonic() - t0 < 30
    assert run.returncode != 0, run.describe()
    assert ("watchdog: ranks 0,1,3 waiting on rank 2" in run.stdout
            and "aborting the MPI job" in run.stdout), run.describe()


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpi_with_a_timeout_every_survivor_names_the_culprit():
    run = mpi_run(LAB, 4, ["--fail", "hang", "--fail-rank", "2", "--timeout",
                           "1", "--steps", "6", "--json"], timeout=45,
                  mpi4py_runner=False)
    outs = [json.loads(x) for x in run.stdout.splitlines()
            if x.startswith('{"rank"')]
    assert sorted(o["rank"] for o in outs) == [0, 1, 3], run.describe()
    assert all(o["error"] == "CollectiveTimeout" and o["peer"] == 2
               for o in outs), outs


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpi_kill_the_launcher_ends_the_job():
    run = mpi_run(LAB, 4, ["--fail", "kill", "--fail-rank", "2"],
                  timeout=45, mpi4py_runner=False)
    assert run.returncode != 0
    assert "rank 2: SIGKILL to itself at step 2" in run.stdout
    assert "BAD TERMINATION" in run.stdout + run.stderr, run.describe()


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpi_slow_rank_is_named():
    run = mpi_run(LAB, 3, ["--fail", "slow", "--fail-rank", "1"],
                  timeout=45, mpi4py_runner=False)
    assert run.returncode == 0, run.describe()
    assert "straggler: rank 1 " in run.stdout, run.describe()
