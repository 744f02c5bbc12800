"""Sizes for people: ``human_bytes(65536) == "64 KiB"`` and back again
(``parse_size("64K") == 65536``), one spelling for the whole kit; and link
rates in tc's spelling (``parse_rate("1gbit") == 125e6`` bytes/s)."""
from __future__ import annotations

import re

SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
ACCEPTED = "a number with an optional suffix K, M, G or T (powers of 1024; " \
           "'KiB', 'KB' and 'k' also accepted), e.g. 8, 64K, 1.5M, 16MiB"


def human_bytes(nbytes: float) -> str:
    """8 B, 64 KiB, 1.5 MiB, 2 GiB: a size for a label (3 significant
    digits)."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{nbytes:.0f} B"


def parse_size(text: str, *, multiple_of: int = 1) -> int:
    """'8', '64K', '1.5M', '16MiB', '1G' -> bytes.

    Raises:
        ValueError: not a size (the message lists what is accepted), a
            negative size, or not a multiple of ``multiple_of`` bytes.
    """
    t = str(text).strip().upper()
    for tail in ("IB", "B"):
        if t.endswith(tail) and len(t) > len(tail):
            t = t[:-len(tail)]
            break
    mult = SUFFIXES.get(t[-1:], None) if t[-1:].isalpha() else 1
    number = t[:-1] if t[-1:].isalpha() else t
    try:
        if mult is None:
            raise ValueError
        value = float(number) * mult
    except ValueError:
        raise ValueError(f"invalid size {text!r}: expected {ACCEPTED}") \
            from None
    if value < 0 or value != int(value):
        raise ValueError(f"invalid size {text!r}: must be a whole, "
                         "non-negative number of bytes")
    value = int(value)
    if value % multiple_of:
        raise ValueError(f"invalid size {text!r}: must be a multiple of "
                         f"{multiple_of} bytes")
    return value


_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|"
                   r"gbps|tbps)$", re.IGNORECASE)
_RATE_SCALE = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8,
               "gbit": 1e9 / 8, "tbit": 1e12 / 8, "bps": 1, "kbps": 1e3,
               "mbps": 1e6, "gbps": 1e9, "tbps": 1e12}
#: the link rates a token bucket (tc tbf) is given here: 1 kbit/s to
#: 1 tbit/s in bytes per second (tc refuses the bucket of a faster one, and
#: a slower one would take minutes per packet)
RATE_MIN, RATE_MAX = 125.0, 125e9


def parse_rate(text: str) -> float:
    """A tc rate string ('1gbit', '200mbit', '125mbps': bits or bytes per
    second) in bytes per second, between 1kbit and 1tbit.

    Raises:
        ValueError: not a rate in tc's units, or outside those bounds.
    """
    m = _RATE.match(str(text).strip())
    if not m:
        raise ValueError(f"link rate must look like '1gbit', '200mbit' or "
                         f"'100mbps' (tc units), got {text!r}")
    value = float(m.group(1)) * _RATE_SCALE[m.group(2).lower()]
    if not RATE_MIN <= value <= RATE_MAX:
        raise ValueError(f"link rate {text!r} is outside 1kbit..1tbit")
    return value
