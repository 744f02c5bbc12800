"""argparse types shared by every command line of the kit, so a bad flag is
refused before any work starts, in one line, with exit status 2::

    p.add_argument("--nodes", type=cliargs.int_range(1, 64), default=2)
    p.add_argument("--timeout", type=cliargs.positive_float)
    p.add_argument("--link", type=cliargs.rate)

Each type raises :class:`argparse.ArgumentTypeError`, which argparse turns
into ``prog: error: argument --x: <message>`` and ``exit(2)``.
"""
from __future__ import annotations

import argparse
import math

from warmup_kit.units import human_bytes, parse_rate, parse_size


def _bad(msg: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(msg)


def _int(text: str) -> int:
    try:
        return int(str(text).strip(), 10)
    except ValueError:
        raise _bad(f"{text!r} is not a whole number") from None


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise _bad(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise _bad(f"{text!r} is not a finite number")
    return v


def int_range(lo: int | None = None, hi: int | None = None):
    """An int in [lo, hi] (either bound may be None: open)."""
    def parse(text: str) -> int:
        v = _int(text)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            if hi is None:
                raise _bad(f"must be >= {lo}, got {v}")
            if lo is None:
                raise _bad(f"must be <= {hi}, got {v}")
            raise _bad(f"must be in [{lo}, {hi}], got {v}")
        return v
    parse.__name__ = "integer"
    return parse


def float_range(lo: float | None = None, hi: float | None = None, *,
                open_lo: bool = False):
    """A finite float in [lo, hi] ((lo, hi] with ``open_lo``)."""
    def parse(text: str) -> float:
        v = _float(text)
        if lo is not None and (v <= lo if open_lo else v < lo):
            raise _bad(f"must be {'>' if open_lo else '>='} {lo:g}, "
                       f"got {text}")
        if hi is not None and v > hi:
            raise _bad(f"must be <= {hi:g}, got {text}")
        return v
    parse.__name__ = "number"
    return parse


#: an int >= 1 (a count of ranks, nodes, iterations, repeats)
positive_int = int_range(1)
#: an int >= 0
non_negative_int = int_range(0)
#: a float > 0 (a timeout, a period)
positive_float = float_range(0.0, open_lo=True)
#: a float >= 0
non_negative_float = float_range(0.0)


def byte_size(lo: int = 0, hi: int | None = None):
    """A size like 8, 64K, 1.5M, 16MiB (:func:`warmup_kit.units.parse_size`)
    in [lo, hi] bytes."""
    def parse(text: str) -> int:
        try:
            v = parse_size(text)
        except ValueError as exc:
            raise _bad(str(exc)) from None
        if v < lo or (hi is not None and v > hi):
            raise _bad(f"size {text!r} must be "
                       + (f"at least {human_bytes(lo)}" if hi is None else
                          f"between {human_bytes(lo)} and {human_bytes(hi)}"))
        return v
    parse.__name__ = "size"
    return parse


def rate(text: str) -> str:
    """A tc link rate ('1gbit', '200mbit', 1kbit..1tbit), returned as
    given (:func:`warmup_kit.units.parse_rate` checks it)."""
    try:
        parse_rate(text)
    except ValueError as exc:
        raise _bad(str(exc)) from None
    return str(text).strip()


def rate_or_none(text: str) -> str | None:
    """:func:`rate`, or None for 'none' (unshaped)."""
    return None if str(text).strip().lower() == "none" else rate(text)


def port(text: str) -> int:
    """A TCP port, 1..65535."""
    v = _int(text)
    if not 1 <= v <= 65535:
        raise _bad(f"port must be in [1, 65535], got {v}")
    return v


def hex_secret(text: str) -> bytes:
    """A job secret: hex digits, at least 16 bytes (32 digits)."""
    t = str(text).strip()
    try:
        raw = bytes.fromhex(t)
    except ValueError:
        raise _bad("the secret must be hex digits, e.g. from `python -c "
                   "'import secrets; print(secrets.token_hex(32))'`") from None
    if len(raw) < 16:
        raise _bad(f"the secret must be at least 16 bytes (32 hex digits), "
                   f"got {len(raw)}")
    return raw


def env_default(name: str, parse, default, parser=None):
    """``parse(os.environ[name])`` if set, else ``default``; a bad value is
    a one-line usage error naming the variable (``parser.error``, or
    ``SystemExit(2)``)."""
    import os
    import sys
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as exc:
        msg = f"environment variable {name}={raw!r}: {exc}"
        if parser is not None:
            parser.error(msg)
        print(f"error: {msg}", file=sys.stderr)
        raise SystemExit(2) from None


def comma_list(parse, *, name: str = "item"):
    """A comma-separated list, each part through ``parse``; at least one."""
    def parse_list(text: str) -> list:
        parts = [t.strip() for t in str(text).split(",") if t.strip()]
        if not parts:
            raise _bad(f"expected a comma-separated list of {name}s, got "
                       f"{text!r}")
        return [parse(t) for t in parts]
    parse_list.__name__ = f"{name} list"
    return parse_list


__all__ = ["byte_size", "comma_list", "env_default", "float_range",
           "hex_secret", "int_range", "non_negative_float",
           "non_negative_int", "port", "positive_float", "positive_int",
           "rate", "rate_or_none", "validated"]


def validated(parse, *, keep: tuple[str, ...] = ()):
    """The text itself, once ``parse`` accepts it (or it is one of
    ``keep``, e.g. 'auto'): for a flag passed on as a string."""
    def check(text: str) -> str:
        if str(text).strip().lower() not in keep:
            parse(text)
        return text
    check.__name__ = getattr(parse, "__name__", "value")
    return check
