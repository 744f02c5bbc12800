"""Hangs become errors that name the culprit: the progress board, the
watchdog's diagnosis, the watchdog ending a real wait, and Lab 01's
``--fail hang|kill|slow`` on sockets, shared memory and MPI.

No test can hang: the lab's ranks are launched with a deadline, every
mpiexec run has one, and the watchdog itself ends the hangs."""
from __future__ import annotations

import json
import os
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


def row(rank, started, done, pid=None, t=0.0, step=3, op="allreduce"):
    return Row(rank, os.getpid() if pid is None else pid, step, started,
               done, t, op, 4096, t)


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


# ------------------------------------------------------------- the watchdog
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
            assert 1.4 < o["waited_s"] < 1.5 + 3
        else:
            assert o["error"] == "hung"            # killed by the launcher


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
