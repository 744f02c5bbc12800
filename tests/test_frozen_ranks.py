"""A rank stuck *inside* the collective, and a rank stopped by SIGSTOP, on
real ranks: over sockets, shared memory and MPI.

* every rank inside (rank K hangs after entering the all-reduce, its
  heartbeat still going: a kernel that never returns): nobody is behind,
  the watchdog says so and still ends every rank's wait;
* rank K stops (SIGSTOP, before or inside the all-reduce): its heartbeat
  stops, and every survivor names K as frozen, not its own neighbour.

No test can hang: the local ranks run under the launcher's deadline (which
SIGKILLs the stopped rank once the others have failed), every mpiexec run
has a deadline and its whole process group is killed (SIGKILL ends a
stopped process too) and reaped by ``run_command``."""
from __future__ import annotations

import json
import time

import pytest

from conftest import TESTS, mpi_run, requires_mpi
from warmup_kit.failures.lab import Demo, lines, named, run_local

WORLD = 4
SCRIPT = TESTS / "mpi" / "stop_demo.py"


def others(k: int) -> str:
    return ",".join(str(r) for r in range(WORLD) if r != k)


# ------------------------------------------------------ sockets and shm
@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_every_rank_inside_the_watchdog_ends_every_wait(
        transport, no_leftover_processes):
    t0 = time.monotonic()
    res = run_local(Demo("hang", 2, inside=True, watchdog_s=1.5, steps=6),
                    WORLD, transport)
    assert time.monotonic() - t0 < 1.5 + 12
    text = "\n".join(lines(res))
    assert res["report"].startswith("ranks 0,1,2,3 waiting for "), text
    assert "every rank is inside it and alive" in res["report"], text
    for o in res["ranks"]:              # rank 2 too: it is inside as well
        assert o["error"] == "HangDetected" and o["peer"] is None, text
        assert 0 < o["waited_s"] < 1.5 + 3, text
    # the verdict comes 1.5 s after the first rank entered; a rank that
    # entered later (a loaded machine: 0.2 s later) has waited less
    assert max(o["waited_s"] for o in res["ranks"]) > 1.4, text


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport,k,inside", [
    ("sockets", 2, True), ("shm", 1, True), ("sockets", 3, False)])
def test_a_stopped_rank_is_named_frozen_by_the_watchdog(
        transport, k, inside, no_leftover_processes):
    res = run_local(Demo("stop", k, inside=inside, watchdog_s=1.5, steps=6),
                    WORLD, transport)
    text = "\n".join(lines(res))
    assert named(res), text
    assert res["report"].startswith(f"ranks {others(k)} waiting on rank {k}"
                                    ), text
    assert f"rank {k} is frozen: its process is alive but its heartbeat " \
        "stopped" in res["report"], text
    assert ("inside collective #3" if inside else "at step 2, outside any "
            "collective") in res["report"], text
    assert res["ranks"][k]["error"] == "hung"       # SIGKILLed, stopped


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_with_a_timeout_a_stopped_rank_is_named(no_leftover_processes):
    """A guard, not a fix: over sockets the ranks' own wait-for graph
    already names the stopped rank; the board must not spoil it."""
    res = run_local(Demo("stop", 1, inside=True, timeout=1.5, steps=6),
                    WORLD, "sockets")
    text = "\n".join(lines(res))
    assert named(res), text
    assert all(o["error"] == "CollectiveTimeout" for o in res["ranks"]
               if o["rank"] != 1), text


# ------------------------------------------------------ under MPI
def mpi_demo(fault: str, k: int, where: str, timeout: str,
             watchdog_s: float = 2.0):
    run = mpi_run(SCRIPT, WORLD, [fault, k, where, timeout, watchdog_s],
                  timeout=40, mpi4py_runner=False)
    outs = [json.loads(x) for x in run.stdout.splitlines()
            if x.startswith("{")]
    return run, outs


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpi_every_rank_inside_the_watchdog_aborts_the_job():
    run, outs = mpi_demo("hang", 2, "inside", "none")
    said = [o["watchdog"] for o in outs if "watchdog" in o]
    assert run.returncode != 0 and len(said) == 1, run.describe()
    assert said[0].startswith("ranks 0,1,2,3 waiting for ") and \
        "none is behind" in said[0], run.describe()


#: SIGSTOP on each of ranks 1..3, before or inside the all-reduce, ended by
#: the transports' timeouts (refined from the board) or by the watchdog:
#: 10 runs
STOPS = ([("timeout", k, where) for k in (1, 2, 3)
          for where in ("inside", "before")]
         + [("watchdog", k, "inside") for k in (1, 2, 3)]
         + [("watchdog", 2, "before")])


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("ends,k,where", STOPS)
def test_mpi_a_stopped_rank_is_named_not_its_neighbour(ends, k, where):
    # the watchdog (after 2 s) or the timeouts (2 s; the watchdog is then
    # set far enough away not to abort the job before they report)
    run, outs = mpi_demo("stop", k, where, "2" if ends == "timeout" else
                         "none", 2.0 if ends == "watchdog" else 20.0)
    assert run.returncode != 0, run.describe()
    if ends == "watchdog":
        said = [o["watchdog"] for o in outs if "watchdog" in o]
        assert len(said) == 1, run.describe()
        assert said[0].startswith(f"ranks {others(k)} waiting on rank {k} "
                                  ), run.describe()
        assert f"rank {k} is frozen" in said[0], run.describe()
        return
    ranks = [o for o in outs if "rank" in o]
    assert sorted(o["rank"] for o in ranks) == [
        r for r in range(WORLD) if r != k], run.describe()
    for o in ranks:
        assert o["error"] == "CollectiveTimeout", run.describe()
        assert o["peer"] == k, run.describe()
        if "the board:" in o["message"]:    # the transport named another
            assert f"rank {k} is frozen" in o["message"], run.describe()
