"""Fault injection points: named places where a test or a demo makes a
process fail on purpose (book, Chapter 8).

Code that can fail calls :func:`point` at the places worth testing
(``point("ckpt.write", step=10, bytes=4096)``); nothing happens unless a
fault is armed for that name in this process. :func:`arm` sets one up
with a condition on the keyword arguments and an action: ``"kill"``
(SIGKILL this process: a node that loses power), ``"hang"`` (sleep,
alive but silent: a stuck kernel), or any callable. This is the idea of
FreeBSD's fail points and Go's failpoint package, in a dozen lines: the
faults live in the real code paths, not in a mock of them.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Callable

#: how long a "hang" sleeps; a launcher or the watchdog ends it first
HANG_S = 3600.0


@dataclass
class Fault:
    """Fire ``action`` at point ``name`` when ``when(**kwargs)`` holds."""

    name: str
    when: Callable[..., bool]
    action: str | Callable[..., None]
    once: bool = True
    fired: int = 0


_ARMED: list[Fault] = []


def arm(name: str, action: str | Callable[..., None] = "kill", *,
        once: bool = True, **match) -> Fault:
    """Arm a fault at point ``name``.

    Args:
        action: ``"kill"``, ``"hang"`` or a callable taking the point's
            keyword arguments.
        once: disarm after firing.
        **match: fire only when the point's keyword arguments include
            these values (``step=10``); a callable value is a predicate
            (``bytes=lambda n: n >= 4096``).
    """
    if isinstance(action, str) and action not in ("kill", "hang"):
        raise ValueError(f"action must be 'kill', 'hang' or a callable, "
                         f"got {action!r}")

    def when(**kw) -> bool:
        for k, want in match.items():
            if k not in kw:
                return False
            if callable(want) and not want(kw[k]):
                return False
            if not callable(want) and kw[k] != want:
                return False
        return True
    f = Fault(name, when, action, once)
    _ARMED.append(f)
    return f


def disarm_all() -> None:
    _ARMED.clear()


def point(name: str, **kwargs) -> None:
    """A place where an armed fault may fire (no-op otherwise)."""
    if not _ARMED:
        return
    for f in list(_ARMED):
        if f.name != name or not f.when(**kwargs):
            continue
        f.fired += 1
        if f.once:
            _ARMED.remove(f)
        if f.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif f.action == "hang":
            time.sleep(HANG_S)
        else:
            f.action(**kwargs)
