"""Faults around a job: a stopped rank, a killed launcher, an interrupted
``run_mpi``, and timeouts that are not numbers.

* a rank stopped mid-job (SIGSTOP) is the one every survivor names, on
  sockets and shared memory, 10 runs out of 10;
* a launcher killed by SIGTERM, SIGHUP or SIGKILL leaves no rank running;
* ``run_mpi`` interrupted (a notebook's stop button) kills mpiexec and its
  ranks and removes the segments MPICH leaves in /dev/shm;
* ``timeout=inf`` means no timeout; NaN and non-numbers are refused.
"""
from __future__ import annotations

import _thread
import math
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import warmup_kit as wk
from conftest import PYTHON, ROOT, requires_mpi
from warmup_kit.comm.deadlines import check_timeout
from warmup_kit.comm.mpirun import mpich_segments, own_segments


# ------------------------------------------------------- a stopped rank
def stop_one(comm, culprit, at_step, timeout):
    """Every rank runs a loop of all-reduces; at ``at_step`` the culprit
    stops itself (SIGSTOP) and stays stopped (the launcher's reaping
    SIGKILL ends it)."""
    x = np.ones(1000)
    for step in range(at_step + 5):
        if step == at_step and comm.rank == culprit:
            os.kill(os.getpid(), signal.SIGSTOP)
        wk.allreduce(x, comm, timeout=timeout)


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_a_stopped_rank_is_named_by_every_survivor_every_time(
        transport, no_leftover_processes):
    n, runs, named = 4, 10, []
    for run in range(runs):
        culprit, at_step = run % n, 1 + run % 3
        out = wk.launch(stop_one, n, args=(culprit, at_step, 1.0),
                        transport=transport, timeout=30, grace=4,
                        return_exceptions=True)
        survivors = [getattr(out[r], "peer", out[r]) for r in range(n)
                     if r != culprit]
        named.append(all(p == culprit for p in survivors))
        assert named[-1], (f"run {run}: culprit {culprit}, survivors named "
                           f"{survivors}")
    assert sum(named) == runs


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_the_launcher_does_not_wait_out_its_grace_for_a_stopped_rank(
        transport, no_leftover_processes):
    """A stopped rank cannot report until it is continued: once every
    other rank has, the launch ends (it had waited the whole grace)."""
    t0 = time.monotonic()
    out = wk.launch(stop_one, 3, args=(1, 1, 1.0), transport=transport,
                    timeout=90, grace=60, return_exceptions=True)
    took = time.monotonic() - t0
    assert took < 20, f"the launch took {took:.1f} s (grace 60 s)"
    assert [getattr(out[r], "peer", None) for r in (0, 2)] == [1, 1], out
    assert "stopped (SIGSTOP)" in str(out[1]), out[1]


def late_reporter(comm, late_s):
    """Rank 1 fails at once; rank 0 reports ``late_s`` later (a verdict
    slowed by a loaded machine); rank 2 never reports."""
    if comm.rank == 1:
        raise RuntimeError("rank 1 fails first")
    time.sleep(late_s if comm.rank == 0 else 600)
    return "late"


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("pending,max_grace,rank0", [
    (None, 10.0, "killed after another rank failed"),  # the plain grace
    (lambda r: r == 0, 10.0, "late"),        # still sure to report: waited
    (lambda r: r == 0, 0.5, "killed after another rank failed"),  # bounded
    (lambda r: 1 / 0, 10.0, "killed after another rank failed"),  # broken
])
def test_a_rank_still_pending_is_waited_for_past_the_grace(
        pending, max_grace, rank0, no_leftover_processes):
    t0 = time.monotonic()
    out = wk.launch(late_reporter, 3, args=(1.5,), transport="shm",
                    timeout=30, grace=0.2, pending=pending,
                    max_grace=max_grace, return_exceptions=True)
    took = time.monotonic() - t0
    assert "rank 1 fails first" in str(out[1])
    assert rank0 in str(out[0]), out
    # rank 2 is never pending: nobody waits on it to the 10 s bound, nor
    # to the 30 s timeout
    assert "killed after another rank failed" in str(out[2]), out
    assert took < 5, f"took {took:.1f} s"


# ------------------------------------------------------- a killed launcher
LAUNCHER = """
import os, sys, time
import warmup_kit as wk

def sleeper(comm):
    print(f"rank-pid {os.getpid()}", flush=True)
    time.sleep(600)

wk.launch(sleeper, 3, transport=sys.argv[1], timeout=600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _default_dispositions() -> None:
    """The launcher as a terminal starts it: a test run started under
    ``nohup`` or in the background inherits SIGHUP (and SIGINT) ignored, and
    a launcher that ignores the signal is not killed by it."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP,
                                 signal.SIGKILL])
def test_a_killed_launcher_leaves_no_rank_running(sig, transport, tmp_path):
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    proc = subprocess.Popen([PYTHON, str(script), transport], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=_default_dispositions)
    pids = []
    try:
        deadline = time.monotonic() + 30
        while len(pids) < 3 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            pids += [int(p) for p in re.findall(r"rank-pid (\d+)", line)]
        assert len(pids) == 3, "the ranks did not start"
        proc.send_signal(sig)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in pids if _alive(p)]
        assert not left, f"ranks {left} outlived their launcher ({sig!r})"
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


# ---------------------------------------------------- run_mpi interrupted
HANG = """
import time
import numpy as np
from mpi4py import MPI
x = np.ones(10)
MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, x)     # MPICH's segment is up now
print("up", flush=True)
time.sleep(600)
"""


def _watch_segments(script):
    """The MPICH segments the job running ``script`` maps, recorded from
    its ranks' memory maps while it runs, and a function that stops the
    recording (other jobs on the machine, e.g.
    another pytest-xdist worker's, come and go meanwhile: comparing all of
    /dev/shm before and after would count theirs)."""
    seen: set[str] = set()
    done = threading.Event()

    def watch():
        while not done.wait(0.05):
            for line in subprocess.run(["pgrep", "-f", str(script)],
                                       capture_output=True,
                                       text=True).stdout.split():
                seen.update(own_segments(int(line)))
    t = threading.Thread(target=watch, daemon=True)
    t.start()

    def stop():          # and wait for the watcher's last pgrep, whose own
        done.set()       # command line names the script too
        t.join(10)
    return seen, stop


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_an_interrupted_run_mpi_leaves_nothing_behind(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    seen, stop = _watch_segments(script)
    # a kernel's interrupt button raises KeyboardInterrupt; a test run
    # started in the background has SIGINT ignored, and interrupt_main()
    # then does nothing, so install Python's handler for the test
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(4.0, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            wk.run_mpi(str(script), 2, timeout=100)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, handler)
        stop()
    assert time.monotonic() - t0 < 30
    left = subprocess.run(["pgrep", "-f", str(script)], capture_output=True,
                          text=True).stdout.split()
    assert not left, f"processes left: {left}"
    assert seen, "the job's segment was never seen (did MPICH make one?)"
    assert not (seen & mpich_segments()), "MPICH segments left in /dev/shm"


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_run_mpi_past_its_timeout_kills_the_job(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    seen, stop = _watch_segments(script)
    try:
        with pytest.raises(TimeoutError, match="ran past"):
            wk.run_mpi(str(script), 2, timeout=5)
    finally:
        stop()
    assert seen, "the job's segment was never seen (did MPICH make one?)"
    assert not (seen & mpich_segments())


# ----------------------------------------------------------- timeouts
@pytest.mark.parametrize("value,want", [(None, None), (math.inf, None),
                                        (0, 0.0), (2.5, 2.5), (3, 3.0),
                                        (np.float32(1.5), 1.5)])
def test_timeout_values(value, want):
    assert check_timeout(value) == want


@pytest.mark.parametrize("value,error", [
    (math.nan, ValueError), (-1, ValueError), ("10", TypeError),
    ([1], TypeError), (True, TypeError), (1j, TypeError)])
def test_bad_timeouts_are_refused(value, error):
    with pytest.raises(error, match="timeout"):
        check_timeout(value)


def _inf_timeout(comm):
    x = np.full(5, comm.rank + 1.0)
    y = wk.allreduce(x, comm, timeout=math.inf)
    with pytest.raises(ValueError, match="nan"):
        wk.allreduce(x, comm, timeout=math.nan)
    with pytest.raises(TypeError, match="timeout"):
        wk.allreduce(x, comm, timeout="5")
    return y.tolist()


@pytest.mark.multiproc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_an_infinite_timeout_is_no_timeout(transport):
    out = wk.launch(_inf_timeout, 3, transport=transport, timeout=30)
    assert out == [[6.0] * 5] * 3
