"""What every self-check returns: right or not, and a hint when not.

A reader's answer is a plain Python value typed into a notebook cell; the
placeholder ``...`` means "not answered yet" and is not an error. Anything
else of the wrong type, or out of range, raises a ``ValueError`` or
``TypeError`` that says what was expected.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """The grade of one answer.

    Attributes:
        ok: True when the answer is right.
        message: what was checked when right; a hint when not.
        answered: False when the answer was still the ``...`` placeholder.
    """
    ok: bool
    message: str
    answered: bool = True

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if not self.answered:
            return f"not answered yet: {self.message}"
        return f"{'right' if self.ok else 'not yet'}: {self.message}"

    def _repr_markdown_(self) -> str:
        mark = "✅" if self.ok else ("✏️" if not self.answered else "❌")
        return f"{mark} {self}"


def unanswered(what: str) -> Verdict:
    """The verdict for the ``...`` placeholder, saying what to type."""
    return Verdict(False, f"replace ... with {what}", answered=False)


def number(value, name: str, *, positive: bool = True) -> float:
    """``value`` as a float, or a clear error naming the answer."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    x = float(value)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and x <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return x


def count(value, name: str, *, least: int = 1) -> int:
    """``value`` as an int of at least ``least``, or a clear error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value!r}")
    return value


def word(value, name: str, choices: dict[str, str]) -> str:
    """``value`` normalised to one of ``choices``' values (keys are the
    accepted spellings, lower case), or a clear error listing them."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    key = " ".join(value.lower().replace("-", " ").replace("_", " ").split())
    if key not in choices:
        raise ValueError(f"{name}: {value!r} is not one of "
                         f"{sorted(set(choices.values()))}")
    return choices[key]


def near(x: float, target: float, rel: float) -> bool:
    """``x`` within ``rel`` (a fraction) of ``target``."""
    return abs(x - target) <= rel * abs(target)
