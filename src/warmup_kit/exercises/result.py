"""What every grader returns: a verdict, a hint, and ``.passed``.

A grader never prints the answer: a failed check says what is wrong and
where to look in the book, not the number that would have passed.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real


@dataclass(frozen=True)
class Result:
    """The outcome of one graded exercise.

    Attributes:
        exercise: a short name, e.g. ``"ch03 ring reduce-scatter"``.
        passed: whether the answer is right.
        verdict: one line on what was checked and how it came out.
        hint: where to look next (empty when passed).
    """

    exercise: str
    passed: bool
    verdict: str
    hint: str = ""

    def __str__(self) -> str:
        head = "PASSED" if self.passed else "NOT YET"
        lines = [f"[{head}] {self.exercise}: {self.verdict}"]
        if self.hint and not self.passed:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    __repr__ = __str__

    def __bool__(self) -> bool:
        return self.passed


def passed(exercise: str, verdict: str) -> Result:
    return Result(exercise, True, verdict)


def failed(exercise: str, verdict: str, hint: str) -> Result:
    return Result(exercise, False, verdict, hint)


def number(name: str, value, *, positive: bool = True) -> float:
    """``value`` as a float; TypeError for a non-number (bools included),
    ValueError for a non-finite or (if ``positive``) non-positive one."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got "
                        f"{type(value).__name__} {value!r}")
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def integer(name: str, value, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; TypeError for a non-integer."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got "
                        f"{type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def choice(name: str, value, options) -> str:
    """``value`` as one of the strings ``options``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got "
                        f"{type(value).__name__} {value!r}")
    if value not in options:
        raise ValueError(f"{name} must be one of {sorted(options)}, "
                         f"got {value!r}")
    return value


def close(answer: float, truth: float, rel: float) -> bool:
    """Within ``rel`` of ``truth`` (relative)."""
    return abs(answer - truth) <= rel * abs(truth)


def off_by(answer: float, truth: float) -> str:
    """'too high' / 'too low', without giving the value away."""
    return "too high" if answer > truth else "too low"
