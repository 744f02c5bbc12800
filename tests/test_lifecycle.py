"""Jobs die with whoever started them, and leave nothing in ``/dev/shm``.

* ``run_mpi``'s caller killed (SIGKILL) or terminated (SIGTERM): mpiexec,
  hydra's proxy and every rank end, and the job's MPICH segment goes (the
  keeper, :mod:`warmup_kit.comm.keeper`; for SIGTERM, before the caller
  itself exits);
* ``run_mpi``'s error on a dead rank quotes hydra's report naming its PID;
* a message longer than the receive buffer is a ``ProtocolError`` under
  MPI (the wait reports ``ERR_IN_STATUS``; the truncation is in a status);
* ``mpirun -n 4 python labs/lab01.py --fail kill|hang`` leaves no
  ``mpich_shm_*`` segment (the job never reaches ``MPI_Finalize``);
* the ``hybrid`` agent (``python -m warmup_kit.run``) terminated by SIGTERM
  stops its ranks and removes the node's shared-memory segments.

The job's processes and segments are found while it runs (its command
lines, its ranks' memory maps), never by comparing all of ``/dev/shm``
before and after: other jobs on the machine come and go meanwhile.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import MPICH_ENV, PYTHON, ROOT, mpi_run, mpiexec, requires_mpi
from warmup_kit.comm.mpirun import SHM_DIR, run_mpi

pytestmark = pytest.mark.skipif(
    not Path("/proc").is_dir() or not SHM_DIR.is_dir(),
    reason="needs /proc and /dev/shm")

LAB = ROOT / "labs" / "lab01.py"
ENV = {**os.environ, **MPICH_ENV}

HANG = """
import os, sys, time
import numpy as np
from mpi4py import MPI
x = np.ones(10)
MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, x)     # MPICH's segment is up now
open(sys.argv[1] + str(MPI.COMM_WORLD.Get_rank()), "w").close()
time.sleep(600)
"""


# --------------------------------------------------------------- helpers
def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in "ZX"


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text()
                   .rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def _with_arg(text: str) -> set[int]:
    """Live processes with ``text`` in their command line."""
    out = set()
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = p.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        pid = int(p.parent.name)
        if text in line and pid != os.getpid() and _alive(pid):
            out.add(pid)
    return out


def _with_env(marker: str) -> set[int]:
    """Live processes whose environment holds ``marker``."""
    out = set()
    for p in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in p.read_bytes():
                out.add(int(p.parent.name))
        except OSError:
            continue
    return out - {os.getpid()}


def own_segments(pid: int) -> set[str]:
    """The MPICH segments ``pid`` maps (names, unlinked or not)."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.split("/dev/shm/", 1)[1].split()[0]
            for line in text.splitlines() if "/dev/shm/mpich_shm_" in line}


def _until(pred, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _unlink(names) -> None:
    for n in names:
        (SHM_DIR / n).unlink(missing_ok=True)


# ------------------------------------------------- run_mpi's caller dies
@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM],
                         ids=["SIGKILL", "SIGTERM"])
def test_run_mpi_dies_with_its_caller(tmp_path, sig):
    script = tmp_path / f"hang_{uuid.uuid4().hex[:8]}.py"
    script.write_text(HANG)
    flag = str(tmp_path / "up")
    caller = subprocess.Popen(
        [PYTHON, "-c", "import warmup_kit as wk; "
         f"wk.run_mpi({str(script)!r}, 2, args=[{flag!r}], timeout=100)"],
        env=ENV, start_new_session=True, stderr=subprocess.PIPE)
    job: set[int] = set()
    segs: set[str] = set()
    try:
        assert _until(lambda: all(Path(flag + r).exists() for r in "01"),
                      30), "the job never started"
        ranks = {p for p in _with_arg(str(script)) - {caller.pid}
                 if own_segments(p)}
        job = _with_arg(str(script)) | {_ppid(p) for p in ranks} - {None}
        job -= {caller.pid}
        for p in ranks:
            segs |= own_segments(p)
        assert len(ranks) == 2 and segs, (ranks, segs)
        os.kill(caller.pid, sig)
        caller.wait(timeout=20)
        if sig == signal.SIGTERM:
            # the caller took the job down before it went
            assert caller.returncode == -signal.SIGTERM
            assert not [p for p in job if _alive(p)], "job outlived caller"
        gone = _until(lambda: not [p for p in job if _alive(p)] and not [
            s for s in segs if (SHM_DIR / s).exists()], 15)
        left = [p for p in job if _alive(p)]
        assert gone, (f"left behind: processes {left}, segments "
                      f"{[s for s in segs if (SHM_DIR / s).exists()]}")
    finally:
        if caller.poll() is None:
            caller.kill()
        caller.wait(timeout=10)
        _kill_all(job | _with_arg(str(script)))
        _unlink(segs)


# --------------------------------------------- run_mpi names the dead PID
DIE = """
import os, signal, sys, time
from mpi4py import MPI
rank = MPI.COMM_WORLD.Get_rank()
with open(f"{sys.argv[1]}.{rank}", "w") as f:
    f.write(str(os.getpid()))
MPI.COMM_WORLD.Barrier()
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_run_mpi_error_quotes_hydras_report(tmp_path, no_leftover_processes):
    script = tmp_path / "die.py"
    script.write_text(DIE)
    pid_file = tmp_path / "pid"
    with pytest.raises(RuntimeError) as err:
        run_mpi(str(script), 2, args=[pid_file], timeout=40)
    msg = str(err.value)
    # Hydra's box names the first exit it reaped: rank 1, which killed
    # itself, or rank 0, which Hydra killed while cleaning up (CI saw both).
    # Either way it is a PID of this job, with signal 9 as the exit string.
    pids = {Path(f"{pid_file}.{r}").read_text().strip() for r in (0, 1)}
    assert "BAD TERMINATION" in msg, msg
    assert any(f"PID {pid} " in msg for pid in pids), (pids, msg)
    assert "EXIT CODE: 9" in msg and "Killed (signal 9)" in msg, msg


# ------------------------------------------ a truncated message under MPI
TRUNCATE = """
import json, time
import numpy as np
from warmup_kit.comm import MPIComm
from warmup_kit.errors import ProtocolError
comm = MPIComm()
out = {}
for mode in ("one request", "two requests", "with a deadline"):
    if comm.rank == 0:
        comm.send(np.ones(4), 1, tag=5)             # 32 bytes
        if mode != "one request":
            comm.recv(np.empty(1), 1, tag=6)
    else:
        reqs = [comm.irecv(np.empty(2), 0, tag=5)]  # room for 16
        if mode != "one request":
            reqs.append(comm.isend(np.ones(1), 0, tag=6))
        try:
            comm.waitall(reqs, time.monotonic() + 20
                         if mode == "with a deadline" else None)
            out[mode] = "no error"
        except Exception as e:
            out[mode] = [type(e).__name__, str(e)]
    comm.comm.Barrier()
if comm.rank == 1:
    print(json.dumps(out), flush=True)
"""


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mpi_truncated_message_is_a_protocol_error(tmp_path):
    script = tmp_path / "truncate.py"
    script.write_text(TRUNCATE)
    run = mpi_run(script, 2, timeout=45)
    assert run.returncode == 0, run.describe()
    for mode, got in run.json().items():
        assert got[0] == "ProtocolError", (mode, got)
        assert "rank(s) [0]" in got[1] and "longer" in got[1], (mode, got)


# ----------------------------------------------- Lab 01's failure demos
@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault,extra,says", [
    ("kill", ["--fail-step", "4", "--steps", "6"], "BAD TERMINATION"),
    ("hang", ["--watchdog", "1.5", "--steps", "6"], "aborting the MPI job")])
def test_lab01_failure_leaves_no_mpich_segment(fault, extra, says):
    marker = f"WK_LIFECYCLE_{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [mpiexec(), "-n", "4", PYTHON, str(LAB), "--fail", fault,
         "--fail-rank", "2", *extra], cwd=ROOT, env={**ENV, marker: "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    segs: set[str] = set()
    seen: set[int] = set()
    try:
        end = time.monotonic() + 40
        while proc.poll() is None and time.monotonic() < end:
            for pid in _with_env(marker):
                seen.add(pid)
                segs |= own_segments(pid)
            time.sleep(0.02)
        assert proc.poll() is not None, "the demo ran past 40 s"
        out = proc.stdout.read().decode(errors="replace")
        assert proc.returncode != 0 and says in out, out
        assert segs, "never saw the job's MPICH segment"
        # the ranks are gone (hydra killed them before mpiexec exited)
        assert _until(lambda: not [p for p in seen if _alive(p)], 10)
        left = [s for s in segs if (SHM_DIR / s).exists()]
        assert not left, f"{fault}: segments left in /dev/shm: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
        _kill_all(seen | _with_env(marker))
        _unlink(segs)


# ------------------------------------------------- the hybrid agent
RANK = """
import json, os, sys, time
from warmup_kit.comm.rendezvous import run_info
info = run_info()
path = os.path.join(sys.argv[1], "shm%d" % info["local_rank"])
open(path + ".new", "w").write(json.dumps(info["shm"]))
os.rename(path + ".new", path)
time.sleep(60)                      # never meshes: the names stay
"""


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_hybrid_agent_terminated_removes_its_segments(tmp_path):
    script = tmp_path / f"rank_{uuid.uuid4().hex[:8]}.py"
    script.write_text(RANK)
    agent = subprocess.Popen(
        [PYTHON, "-m", "warmup_kit.run", "-n", "2", "--transport", "hybrid",
         "--grace", "2", str(script), str(tmp_path)], cwd=ROOT, env=ENV,
        start_new_session=True, stderr=subprocess.PIPE)
    names: list[str] = []
    ranks: set[int] = set()
    try:
        assert _until(lambda: all((tmp_path / f"shm{i}").exists()
                                  for i in range(2)), 30), "no rank started"
        info = json.loads((tmp_path / "shm0").read_text())
        names = [info["ctrl"], *info["data"]]
        ranks = _with_arg(str(script)) - {agent.pid}
        assert len(ranks) == 2 and all((SHM_DIR / n).exists()
                                       for n in names)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=20)
        err = agent.stderr.read().decode(errors="replace")
        assert agent.returncode == 128 + signal.SIGTERM, (agent.returncode,
                                                          err)
        assert "stopped by SIGTERM" in err, err
        assert not [n for n in names if (SHM_DIR / n).exists()]
        assert _until(lambda: not [p for p in ranks if _alive(p)], 5)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
        agent.stderr.close()
        _kill_all(ranks | _with_arg(str(script)))
        _unlink(names)
