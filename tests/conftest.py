"""Shared helpers: run programs under mpiexec (or plain Python) as
subprocesses with a deadline, and look for processes left behind.

Multi-process tests never run ranks inside the pytest process: socket ranks
are children made by :func:`warmup_kit.launch`, MPI ranks are children of an
``mpiexec`` subprocess started in its own session, so that on a deadline the
whole process group is killed and reaped.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from warmup_kit.comm import shm
from warmup_kit.comm.mpirun import Kept

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
MPI_SCRIPTS = TESTS / "mpi"
PYTHON = sys.executable

# the shared case table (tests/mpi/collective_cases.py) is imported by the
# socket tests here and by the MPI scripts under mpiexec
if str(MPI_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(MPI_SCRIPTS))

#: oversubscribed MPICH ranks must yield the CPU (2 cores, up to 6 ranks)
MPICH_ENV = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
             "MPIR_CVAR_POLLS_BEFORE_YIELD": "100"}


def mpiexec() -> str:
    """The venv's mpiexec (from the mpich wheel), else one on PATH."""
    from warmup_kit.comm import find_mpiexec
    return find_mpiexec()


def have_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
        mpiexec()
    except (ImportError, FileNotFoundError):
        return False
    return True


requires_mpi = pytest.mark.skipif(not have_mpi(),
                                  reason="mpi4py or mpiexec not installed")


@dataclass
class Run:
    """What a subprocess did."""

    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float

    def json(self) -> dict:
        """The last line of stdout that is a JSON object."""
        for line in reversed(self.stdout.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
        raise AssertionError(f"no JSON line in the output of {self.cmd}:\n"
                             f"{self.describe()}")

    def describe(self) -> str:
        return (f"$ {' '.join(self.cmd)}\nexit code {self.returncode} after "
                f"{self.elapsed_s:.1f}s\n--- stdout (tail)\n"
                f"{self.stdout[-3000:]}\n--- stderr (tail)\n"
                f"{self.stderr[-5000:]}")


def run_command(cmd: list[str], *, timeout: float, env: dict | None = None,
                cwd: Path = ROOT) -> Run:
    """Run ``cmd`` under the keeper (:class:`warmup_kit.comm.mpirun.Kept`):
    when it ends, or on ``timeout`` (which fails the test), every process
    it started (mpiexec, hydra's proxy, every rank) is killed and reaped,
    and the MPICH segments they mapped are removed, never those of a job
    another test (another pytest-xdist worker) is running."""
    full_env = {**os.environ, **MPICH_ENV, **(env or {})}
    t0 = time.monotonic()
    job = Kept(cmd, env=full_env, cwd=cwd)
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = job.stop()
        run = Run(cmd, job.returncode, out, err, time.monotonic() - t0)
        pytest.fail(f"ran past its {timeout}s deadline (the job was "
                    f"killed):\n{run.describe()}", pytrace=False)
    finally:
        if job.returncode is None:      # e.g. KeyboardInterrupt, test timeout
            job.stop()
        job.close()
    return Run(cmd, job.returncode, out, err, time.monotonic() - t0)


def mpi_run(target: str | Path, n: int, args=(), *, timeout: float,
            module: bool = False, mpi4py_runner: bool = True,
            env: dict | None = None) -> Run:
    """``mpiexec -n N python [-m mpi4py] target args`` as a subprocess.

    ``-m mpi4py`` makes an uncaught exception abort the whole job instead of
    leaving the other ranks waiting.
    """
    cmd = [mpiexec(), "-n", str(n), PYTHON]
    if mpi4py_runner:
        cmd += ["-m", "mpi4py"]
    cmd += (["-m", str(target)] if module else [str(target)])
    cmd += [str(a) for a in args]
    return run_command(cmd, timeout=timeout, env=env)


def mpi_script(name: str, n: int, args=(), *, timeout: float) -> dict:
    """Run ``tests/mpi/<name>.py`` on N ranks; its JSON result (exit 0)."""
    run = mpi_run(MPI_SCRIPTS / f"{name}.py", n, args, timeout=timeout)
    assert run.returncode == 0, run.describe()
    return run.json()


# ------------------------------------------------------------ leftover procs
def child_pids(parent: int | None = None) -> set[int]:
    """Live (non-zombie) processes whose parent is ``parent`` (this one),
    read from /proc: no psutil needed."""
    parent = os.getpid() if parent is None else parent
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces or parentheses
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z":
            found.add(int(entry.name))
    return found


def leftovers(before: set[int], settle_s: float = 5.0) -> set[int]:
    """Children that appeared since ``before`` and are still alive after
    up to ``settle_s`` seconds (the launcher joins with a short wait)."""
    deadline = time.monotonic() + settle_s
    while True:
        extra = child_pids() - before
        extra |= {p.pid for p in multiprocessing.active_children()} - before
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.05)


@pytest.fixture(scope="session", autouse=True)
def _resource_tracker():
    """multiprocessing's resource tracker (it unlinks what a killed parent
    leaves in /dev/shm; the shared-memory launcher starts it) is a helper
    process that lives as long as this one: start it first, so that it is
    not taken for a rank left behind."""
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()


@pytest.fixture
def no_leftover_processes():
    """Fail the test if it leaves a child process alive."""
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc")
    before = child_pids()
    yield
    extra = leftovers(before)
    for pid in extra:                 # do not let one test poison the next
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not extra, f"processes left behind: {sorted(extra)}"


SPAWNING_MARKS = {"mpi", "multiproc", "slow"}


def pytest_sessionstart(session):
    """Build matplotlib's font cache before any test runs: on a fresh
    machine its first import runs ``fc-list``, which the guard below would
    blame on whichever unmarked test happened to draw first. Tag the
    worker's shared-memory segments."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.font_manager  # noqa: F401  (builds the cache)
    # every shared-memory segment this worker's jobs create carries its
    # name (tests/test_shm.py's leftover check looks only at its own: a
    # segment another worker's agent made for ranks still starting is
    # mapped by nobody for a moment, and is not a leftover of this worker)
    os.environ[shm.TAG_ENV] = os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(autouse=True)
def _spawning_tests_are_marked(request, monkeypatch):
    """A test that starts a process must say so (``multiproc``, ``mpi`` or
    ``slow``), so that ``make unit`` (which deselects them) stays fast:
    an unmarked test that spawns fails here, naming itself."""
    if SPAWNING_MARKS & {m.name for m in request.node.iter_markers()}:
        yield
        return

    def refuse(*args, **kwargs):
        raise AssertionError(
            f"{request.node.nodeid} starts a process: mark it "
            "pytest.mark.multiproc (or mpi, slow)")
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    yield


# ------------------------------------------------------------ pytest-xdist
#: files whose tests assert on wall time (a watchdog's deadline, a timeout
#: plus slack, a straggler's slowdown): under ``make test`` they run one
#: after another on one worker, so that at most one of them competes with
#: the other workers for the 2 cores
TIMING_FILES = {"test_failures.py", "test_watchdog.py", "test_frames.py",
                "test_straggler.py", "test_faults.py", "test_bad_input.py",
                "test_partition.py", "test_frozen_ranks.py"}


def xdist_scope(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker: a whole test file (its
    tests share launches cached in the worker: one launch per N for every
    collective case, module fixtures, ``lru_cache``), and every timing file
    together as one unit."""
    path = nodeid.split("::", 1)[0]
    return "timing" if Path(path).name in TIMING_FILES else path


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the timing files as one unit. (pytest-xdist
    3.8's ``--dist loadgroup`` does not group under pytest 9: it renames
    ``item._nodeid``, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return FileScheduling(config, log)
