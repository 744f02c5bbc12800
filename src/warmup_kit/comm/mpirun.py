"""MPI programs under the venv's ``mpiexec``, from Python or a notebook.

:func:`run_mpi` runs a script or module under ``mpiexec`` as a subprocess
and returns the JSON object it prints, so a notebook can show a real MPI run.
The whole job is killed if it runs past its timeout, if the caller is
interrupted (a notebook's stop button) or terminated, or if the caller dies
(a keeper process, :mod:`warmup_kit.comm.keeper`, stands between it and
``mpiexec``), and the shared-memory segments a killed MPICH job leaves in
``/dev/shm`` are removed.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from warmup_kit.comm import keeper
from warmup_kit.comm.keeper import (  # noqa: F401 - re-exported
    SHM_DIR, SHM_PREFIX, descendants, mpich_segments, own_segments,
    remove_orphan_segments, sweep_segments, unlink_segments)

#: environment that makes oversubscribed MPICH ranks yield the CPU
MPICH_YIELD_ENV = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
                   "MPIR_CVAR_POLLS_BEFORE_YIELD": "100"}
#: variables the common launchers set in every rank
MPI_ENV = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID")
#: seconds the keeper gets to end a job and sweep before it is killed
KEEPER_S = 20.0


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


def release_segment_names() -> list[str]:
    """Unlink the names of the MPICH segments this rank maps; call it once
    every rank of the job is past ``MPI_Init`` (after a barrier).

    MPICH removes its segment at ``MPI_Finalize``, which a job that fails
    (a rank killed, ``MPI_Abort``) never reaches, so each such run would
    leave one in ``/dev/shm`` (4 MiB for 4 ranks). Every local rank has
    mapped it by then and nobody opens it by name again, so the name can
    go now: the memory lives until the last rank unmaps it, however the
    job ends (MPICH's own unlink at finalize tolerates a missing name)."""
    return unlink_segments(own_segments())


class _Signalled(BaseException):
    """The caller got a stop signal while a job ran (raised by the handler
    :func:`run_mpi` installs, so the job is taken down first)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _trap_stop_signals() -> dict:
    """In the main thread, make SIGTERM and SIGHUP (what schedulers and a
    closed terminal send) raise :class:`_Signalled` once; the previous
    handlers, to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}                # the keeper still ends the job if we die
    fired: list[int] = []

    def handler(signum, frame):
        if not fired:            # a second one must not cut the cleanup
            fired.append(signum)
            raise _Signalled(signum)

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        old = signal.getsignal(sig)
        if old is signal.SIG_IGN or old is None:
            continue
        saved[sig] = old
        signal.signal(sig, handler)
    return saved


def _restore(saved: dict) -> None:
    for sig, old in saved.items():
        signal.signal(sig, old)
    saved.clear()


def _keeper_command(fd: int, cmd: list[str]) -> list[str]:
    return [sys.executable, "-I", "-S", str(Path(keeper.__file__).resolve()),
            str(os.getpid()), str(fd), "--", *cmd]


class Kept:
    """``cmd`` (an ``mpiexec`` job, or any program that starts processes)
    run under the keeper: its processes die with this one, and
    :meth:`stop` ends every one of them and removes the MPICH segments
    they mapped, never another job's. What :func:`run_mpi` and the tests'
    launcher use.

    Args:
        cmd: the command line.
        env, cwd: as for :class:`subprocess.Popen`.
    """

    def __init__(self, cmd: Sequence[str], *, env: dict | None = None,
                 cwd=None) -> None:
        self.before = mpich_segments()
        self.pipe: list[int] = []
        r, w = os.pipe()          # the caller holds the only write end
        self.pipe.append(w)
        try:
            self.proc = subprocess.Popen(
                _keeper_command(r, [str(c) for c in cmd]), env=env, cwd=cwd,
                pass_fds=(r,), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, start_new_session=True)
        except BaseException:
            _close(self.pipe)
            raise
        finally:
            os.close(r)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """The job's (stdout, stderr) once it ends; raises
        :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        return self.proc.communicate(timeout=timeout)

    def stop(self) -> tuple[str, str]:
        """Have the keeper end the job (closing its pipe), reap it; what it
        printed."""
        _close(self.pipe)
        try:
            return self.proc.communicate(timeout=KEEPER_S)
        except subprocess.TimeoutExpired:
            pass
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:                                   # a keeper that hangs
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out = self.proc.communicate()
        sweep_segments(self.before)
        return out

    def close(self) -> None:
        """Release the pipe (after the job has ended)."""
        _close(self.pipe)


def _close(pipe: list[int]) -> None:
    while pipe:
        os.close(pipe.pop())


def hydra_report(text: str) -> str:
    """Hydra's report of a failed job (the ``BAD TERMINATION`` box naming
    a process of the job, its PID and exit code, and the exit string),
    from ``mpiexec``'s output ("" if there is none). The PID is the first
    exit Hydra reaped: usually the rank that died, but it can be a rank
    Hydra itself killed while cleaning up."""
    lines = text.splitlines()
    keep_lines = []
    for i, line in enumerate(lines):
        if "BAD TERMINATION" in line:
            j = i
            while j > 0 and not lines[j - 1].startswith("====") and i - j < 3:
                j -= 1
            k = i + 1
            while k < len(lines) and not lines[k].startswith("===="):
                k += 1
            keep_lines += [x for x in lines[j:k] if x.strip("= ")]
        elif line.startswith("YOUR APPLICATION TERMINATED"):
            keep_lines.append(line)
    return "\n".join(x.rstrip() for x in keep_lines)


def run_mpi(target: str, n: int = 4, *, args: Sequence = (),
            timeout: float = 120.0, env: dict | None = None,
            check: bool = True) -> dict:
    """Run a script/module under mpiexec; return the JSON object it prints.

    The program must print one JSON object on a line of its own (rank 0).
    The whole job (mpiexec, hydra's proxy, every rank) is killed if it runs
    past ``timeout``, if this call is interrupted (``KeyboardInterrupt``),
    if this process gets SIGTERM or SIGHUP (the job is taken down, then the
    signal is handled as it would have been), or if this process dies in
    any other way, ``SIGKILL`` included (see :mod:`warmup_kit.comm.keeper`);
    the segments the killed ranks left in ``/dev/shm`` are removed. With
    ``check=False`` a job that fails (a demo of a failure) is not an error:
    the result is ``{"returncode", "stdout", "stderr"}``; otherwise the
    error quotes hydra's report of the rank that died.
    """
    full_env = {**os.environ, **MPICH_YIELD_ENV, **(env or {})}
    saved = _trap_stop_signals()
    job = None
    timed_out = False
    try:
        job = Kept(mpi_command(target, n, args), env=full_env)
        deadline = time.monotonic() + timeout
        while True:       # short waits: an interrupt is handled within 0.2 s
            try:
                out, err = job.communicate(timeout=min(
                    0.2, max(0.0, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    timed_out = True
                    job.stop()
                    break
    except _Signalled as sig:
        if job is not None:
            job.stop()
        _restore(saved)
        signal.raise_signal(sig.signum)      # as if we had not been here
        raise InterruptedError(f"mpiexec -n {n} {target} stopped: this "
                               f"process got signal {sig.signum}") from None
    except BaseException:          # KeyboardInterrupt: leave nothing behind
        if job is not None:
            job.stop()
        raise
    finally:
        if job is not None:
            job.close()
        _restore(saved)
    if timed_out:
        raise TimeoutError(f"mpiexec -n {n} {target} ran past {timeout}s")
    if not check:
        return {"returncode": job.returncode, "stdout": out, "stderr": err}
    if job.returncode != 0:
        report = hydra_report(out + "\n" + err)
        raise RuntimeError(f"mpiexec -n {n} {target} failed "
                           f"({job.returncode}):\n"
                           + (f"{report}\n" if report else "")
                           + err[-3000:])
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{target} printed no JSON line:\n{out[-2000:]}")
