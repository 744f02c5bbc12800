"""The keeper: what ties an ``mpiexec`` job's life to the process that
started it, and clears what a killed MPICH job leaves in ``/dev/shm``.

Killing ``mpiexec`` is not killing the job: the hydra proxy runs in a
session of its own and so does every rank, so neither a process group
signal nor a parent-death signal on ``mpiexec`` reaches them all, and a
caller that dies while ``mpiexec`` runs in its own session leaves it (and
the ranks, spinning) running forever. :func:`warmup_kit.run_mpi` therefore
starts ``mpiexec`` under a keeper, this file run as a script::

    python -I -S keeper.py CALLER_PID FD -- mpiexec -n 4 ...

The keeper becomes a *child subreaper* (Linux), so every process of the job
stays its descendant even when the proxy or ``mpiexec`` dies first; it asks
for ``SIGTERM`` when the caller dies (``PR_SET_PDEATHSIG``), and also holds
the read end ``FD`` of a pipe whose only write end the caller holds: end of
file there means the caller is gone (any death, ``SIGKILL`` included) or
wants the job stopped. Then, or on ``SIGTERM``/``SIGINT``/``SIGHUP``, it
kills every descendant, reaps them, and removes the MPICH segments they
mapped once no process maps them. When ``mpiexec`` ends by itself, the
keeper kills any rank that outlived it, removes the segments nobody maps
any more, and exits with ``mpiexec``'s status (by the same signal if it
was killed by one).

Only the standard library is imported (``-I -S``: the keeper starts in a
few tens of milliseconds, and never imports the package it serves).
"""
from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "mpich_shm_"
PROC = Path("/proc")
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: seconds the keeper waits for killed processes to unmap their segments
SWEEP_S = 5.0
_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


# ------------------------------------------------------------- segments
def mpich_segments() -> set[str]:
    """Names of MPICH's shared-memory segments in ``/dev/shm``."""
    if not SHM_DIR.is_dir():
        return set()
    return {p.name for p in SHM_DIR.iterdir()
            if p.name.startswith(SHM_PREFIX)}


def shm_mappers() -> dict[str, set[int]]:
    """``/dev/shm`` file name -> the live processes that map it."""
    out: dict[str, set[int]] = {}
    for maps in PROC.glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        pid = int(maps.parent.name)
        for line in text.splitlines():
            i = line.find("/dev/shm/")
            if i >= 0:
                out.setdefault(line[i + 9:].split()[0], set()).add(pid)
    return out


def own_segments(pid: int | str = "self") -> set[str]:
    """The MPICH segments process ``pid`` maps (their names, even those
    already unlinked)."""
    try:
        text = (PROC / str(pid) / "maps").read_text()
    except OSError:
        return set()
    out = set()
    for line in text.splitlines():
        i = line.find("/dev/shm/" + SHM_PREFIX)
        if i >= 0:
            out.add(line[i + 9:].split()[0])
    return out


def unlink_segments(names) -> list[str]:
    """Unlink these ``/dev/shm`` names; those that were there."""
    gone = []
    for name in sorted(names):
        try:
            (SHM_DIR / name).unlink()
            gone.append(name)
        except FileNotFoundError:
            pass
    return gone


def remove_orphan_segments(candidates: set[str]) -> list[str]:
    """Unlink those of ``candidates`` that no live process maps; return
    their names (a killed MPICH job cannot remove its own)."""
    return unlink_segments(candidates - shm_mappers().keys())


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


def sweep_job(before: set[str], job: set[str], wait_s: float = SWEEP_S
              ) -> None:
    """Remove the segments made since ``before`` that no process maps, and
    wait (up to ``wait_s``) for the ``job``'s own segments (those its
    processes mapped) to be unmapped, removing each as it is. Segments of
    other jobs that are still in use are never waited for."""
    deadline = time.monotonic() + wait_s
    while True:
        remove_orphan_segments((mpich_segments() - before) | job)
        if not job & mpich_segments() or time.monotonic() > deadline:
            return
        time.sleep(0.05)


# ------------------------------------------------------------ processes
def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process."""
    out = {}
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces or parentheses
        state, ppid = text.rsplit(")", 1)[1].split()[:2]
        if state not in "ZX":
            out[int(stat.parent.name)] = int(ppid)
    return out


def descendants(root: int) -> set[int]:
    """The live processes below ``root`` (children, theirs, ...)."""
    parents = _parents()
    kids: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for k in kids.get(todo.pop(), ()):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap_orphans() -> None:
    """Reap every exited child (a subreaper inherits the job's orphans)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_job(job: subprocess.Popen | None, before: set[str]) -> None:
    """Kill every process below this one (the job: mpiexec, the proxy,
    the ranks, and any orphan of theirs), reap them, and sweep the
    segments (see :func:`sweep_job`)."""
    seen: set[str] = set()
    deadline = time.monotonic() + SWEEP_S
    while time.monotonic() < deadline:
        tree = descendants(os.getpid())
        if not tree:
            break
        for pid in tree:
            seen |= own_segments(pid)
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if job is not None and job.poll() is None:
            try:
                job.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        time.sleep(0.01)
        _reap_orphans()
    if not PROC.is_dir() and job is not None:   # pragma: no cover
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap_orphans()
    sweep_job(before, seen)


def _wait(job: subprocess.Popen, fd: int, woken: int, stopped: list) -> bool:
    """Until ``mpiexec`` ends (True), or the caller's pipe reaches end of
    file (the caller is gone or asks for the job to be stopped) or a stop
    signal arrives (False)."""
    try:
        ended = os.pidfd_open(job.pid)
    except (AttributeError, OSError):
        ended = None                      # older kernel: poll
    watch = [fd, woken] + ([ended] if ended is not None else [])
    try:
        while not stopped:
            ready = select.select(watch, [], [], 0.2 if ended is None
                                  else 5.0)[0]
            if job.poll() is not None:
                return True
            if fd in ready and not os.read(fd, 512):
                return False
        return False
    finally:
        if ended is not None:
            os.close(ended)


def keep(caller: int, fd: int, cmd: list[str]) -> int:
    """Run ``cmd`` (mpiexec ...) tied to ``caller``; its exit status."""
    stopped: list[int] = []
    # a stop signal only sets a flag and wakes the wait (never an exception
    # raised in the middle of the cleanup)
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    for s in _STOPS:
        signal.signal(s, lambda signum, frame: stopped.append(signum))
    before = mpich_segments()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != caller or stopped:    # it died before we got here
        return 128 + signal.SIGTERM
    try:
        # our own death kills mpiexec too (and hydra then its ranks),
        # whatever killed us; a preexec_fn is safe here: one thread
        job = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL,
            preexec_fn=lambda: _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL))
    except OSError as exc:
        print(f"warmup_kit: cannot start {cmd[0]}: {exc}", file=sys.stderr,
              flush=True)
        return 127
    finished = _wait(job, fd, woken, stopped)
    end_job(None if finished else job, before)
    return job.returncode if finished else 128 + signal.SIGKILL


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: keeper.py CALLER_PID FD -- COMMAND...",
              file=sys.stderr)
        return 2
    rc = keep(int(argv[0]), int(argv[1]), argv[3:])
    if rc < 0:                 # mpiexec died of a signal: so do we
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
