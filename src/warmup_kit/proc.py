"""What state a local process is in, from ``/proc`` (Linux).

The launchers, the watchdog and the cluster janitor ask the same questions
of a rank's pid: does it still run, is it a zombie, is it stopped (SIGSTOP,
a debugger)? A stopped process cannot report anything until it is
continued, so a launcher need not wait for it.
"""
from __future__ import annotations

import os

#: states of ``/proc/PID/stat`` (proc(5)): Z zombie, X dead, T stopped by a
#: signal, t stopped by a tracer
GONE = ("Z", "X")
STOPPED = ("T", "t")


def state(pid: int) -> str | None:
    """The one-letter state of ``pid`` (``"R"``, ``"S"``, ``"T"``, ...), or
    None if there is no such process. Where ``/proc`` cannot be read, ``"?"``
    for a process the kernel says exists."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"
        return "?"


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie, killed but not reaped, does not:
    where nothing reaps orphans, a SIGKILLed process stays one)."""
    return state(pid) not in (None, *GONE)


def stopped(pid: int) -> bool:
    """True if ``pid`` is stopped (by SIGSTOP/SIGTSTP or a tracer)."""
    return state(pid) in STOPPED
