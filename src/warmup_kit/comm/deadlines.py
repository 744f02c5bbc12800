"""Timeouts and deadlines: every wait in the runtime has one.

A ``timeout`` is seconds (a real number >= 0), or ``None``/``inf`` for no
limit; a deadline is a :func:`time.monotonic` instant. One module so that
the communicator and its stream thread share the rules without importing
each other.
"""

from __future__ import annotations

import math
import numbers
import time


def check_timeout(timeout) -> float | None:
    """``timeout`` as seconds, or None for no limit (``None`` or ``inf``).

    Raises:
        TypeError: not a real number.
        ValueError: NaN or negative.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds or None, got "
                        f"{type(timeout).__name__} {timeout!r}")
    t = float(timeout)
    if math.isnan(t):
        raise ValueError("timeout must be a number of seconds, got nan")
    if t < 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    return None if math.isinf(t) else t


def deadline_after(timeout) -> float | None:
    """A :func:`time.monotonic` deadline ``timeout`` seconds from now
    (``None`` or ``inf``: no deadline)."""
    t = check_timeout(timeout)
    return None if t is None else time.monotonic() + t
