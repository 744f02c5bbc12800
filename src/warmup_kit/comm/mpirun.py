"""MPI programs under the venv's ``mpiexec``, from Python or a notebook.

:func:`run_mpi` runs a script or module under ``mpiexec`` as a subprocess
and returns the JSON object it prints, so a notebook can show a real MPI run.
The whole job is killed if it runs past its timeout or the caller is
interrupted (a notebook's stop button), and the shared-memory segments a
killed MPICH job leaves in ``/dev/shm`` are removed.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

#: environment that makes oversubscribed MPICH ranks yield the CPU
MPICH_YIELD_ENV = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
                   "MPIR_CVAR_POLLS_BEFORE_YIELD": "100"}
#: variables the common launchers set in every rank
MPI_ENV = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID")
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "mpich_shm_"


def launched_by_mpi() -> bool:
    """True in a process started by ``mpiexec``/``mpirun``."""
    return any(v in os.environ for v in MPI_ENV)


def find_mpiexec() -> str:
    """The ``mpiexec`` beside this Python (the venv's, from the mpich wheel)."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise FileNotFoundError("mpiexec not found: run `make venv` (the "
                                "mpich wheel ships it)")
    return found


def mpi_command(target: str, n: int, args: Sequence[str] = ()) -> list[str]:
    """``mpiexec -n N python -m mpi4py TARGET ARGS`` (a script or -m module)."""
    run = [target] if target.endswith(".py") else ["-m", target]
    return [find_mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py",
            *run, *map(str, args)]


def mpich_segments() -> set[str]:
    """Names of MPICH's shared-memory segments in ``/dev/shm``."""
    if not SHM_DIR.is_dir():
        return set()
    return {p.name for p in SHM_DIR.iterdir()
            if p.name.startswith(SHM_PREFIX)}


def _mapped() -> set[str]:
    """Names of ``/dev/shm`` files some live process has mapped."""
    out = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            i = line.find("/dev/shm/")
            if i >= 0:
                out.add(line[i + 9:].split()[0])
    return out


def remove_orphan_segments(candidates: set[str]) -> list[str]:
    """Unlink those of ``candidates`` that no live process maps; return
    their names (a killed MPICH job cannot remove its own)."""
    gone = []
    live = _mapped()
    for name in sorted(candidates - live):
        try:
            (SHM_DIR / name).unlink()
            gone.append(name)
        except FileNotFoundError:
            pass
    return gone


def sweep_segments(before: set[str], wait_s: float = 5.0) -> None:
    """Remove the MPICH segments made since ``before`` (a
    :func:`mpich_segments` snapshot) that no live process maps. A killed
    rank maps its segment until the kernel has torn it down, which can
    outlast mpiexec's exit: while some are still mapped, retry for up to
    ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        remove_orphan_segments(mpich_segments() - before)
        if not mpich_segments() - before or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _kill(proc: subprocess.Popen, before: set[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()
    sweep_segments(before)


def run_mpi(target: str, n: int = 4, *, args: Sequence = (),
            timeout: float = 120.0, env: dict | None = None,
            check: bool = True) -> dict:
    """Run a script/module under mpiexec; return the JSON object it prints.

    The program must print one JSON object on a line of its own (rank 0).
    The whole process group is killed if it runs past ``timeout`` or this
    call is interrupted (``KeyboardInterrupt``), and the segments the killed
    ranks left in ``/dev/shm`` are removed. With ``check=False`` a job that
    fails (a demo of a failure) is not an error: the result is
    ``{"returncode", "stdout", "stderr"}``.
    """
    full_env = {**os.environ, **MPICH_YIELD_ENV, **(env or {})}
    before = mpich_segments()
    proc = subprocess.Popen(mpi_command(target, n, args), env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while True:      # short waits: an interrupt is handled within 0.2 s
            try:
                out, err = proc.communicate(timeout=min(
                    0.2, max(0.0, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
    except subprocess.TimeoutExpired:
        _kill(proc, before)
        raise TimeoutError(f"mpiexec -n {n} {target} ran past {timeout}s") \
            from None
    except BaseException:          # KeyboardInterrupt: leave nothing behind
        _kill(proc, before)
        raise
    if not check:
        remove_orphan_segments(mpich_segments() - before)
        return {"returncode": proc.returncode, "stdout": out, "stderr": err}
    if proc.returncode != 0:
        remove_orphan_segments(mpich_segments() - before)
        raise RuntimeError(f"mpiexec -n {n} {target} failed "
                           f"({proc.returncode}):\n{err[-3000:]}")
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{target} printed no JSON line:\n{out[-2000:]}")
