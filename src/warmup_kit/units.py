"""Sizes for people: ``human_bytes(65536) == "64 KiB"`` and back again
(``parse_size("64K") == 65536``), one spelling for the whole kit."""
from __future__ import annotations

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
