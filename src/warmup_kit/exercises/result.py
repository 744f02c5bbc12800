"""What every grader returns: a verdict, a hint, and ``.passed``.

The one result type and the one set of input validators for both the
chapters' exercises (:mod:`warmup_kit.exercises`) and the success-criteria
self-checks (:mod:`warmup_kit.selfcheck`).

A grader never prints the answer: a failed check says what is wrong and
where to look in the book, not the number that would have passed. A
reader's answer is a plain Python value typed into a notebook cell; a
grader may accept the placeholder ``...`` as "not answered yet" and return
:func:`unanswered` (not an error). Anything else of the wrong type or out
of range raises ``TypeError`` or ``ValueError`` naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from warmup_kit.textfit import WIDTH, fit


@dataclass(frozen=True)
class Result:
    """The outcome of one graded exercise.

    Attributes:
        exercise: a short name, e.g. ``"ch03 ring reduce-scatter"``.
        passed: whether the answer is right.
        verdict: one line on what was checked and how it came out.
        hint: where to look next (empty when passed).
        answered: False when the answer was still the ``...`` placeholder
            (then ``verdict`` says what to type).
    """

    exercise: str
    passed: bool
    verdict: str
    hint: str = ""
    answered: bool = True

    def _lines(self) -> list[str]:
        head = ("NOT ANSWERED YET" if not self.answered
                else "PASSED" if self.passed else "NOT YET")
        lines = [f"[{head}] {self.exercise}: {self.verdict}"]
        if self.hint and not self.passed:
            lines.append(f"  hint: {self.hint}")
        return lines

    def __str__(self) -> str:
        """The verdict and hint, wrapped to ``WIDTH`` (the site's code
        column; a longer line scrolls sideways), for ``print`` and for a
        notebook's display alike."""
        return "\n".join(fit(line, WIDTH, hang=6 if line.startswith("  hint:")
                              else 2) for line in self._lines())

    __repr__ = __str__

    def __bool__(self) -> bool:
        return self.passed


def passed(exercise: str, verdict: str) -> Result:
    return Result(exercise, True, verdict)


def failed(exercise: str, verdict: str, hint: str = "") -> Result:
    return Result(exercise, False, verdict, hint)


def unanswered(exercise: str, what: str) -> Result:
    """The result for the ``...`` placeholder, saying what to type."""
    return Result(exercise, False, f"replace ... with {what}",
                  answered=False)


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


def _spelling(text: str) -> str:
    return " ".join(text.lower().replace("-", " ").replace("_", " ").split())


def spelled(name: str, value, spellings: dict[str, str]) -> str:
    """``value`` normalised to one of ``spellings``' values.

    The keys are the accepted spellings, lower case with single spaces;
    the value is matched case-blind, with ``-`` and ``_`` read as spaces
    (``"Tensor-Parallel"`` finds ``"tensor parallel"``). TypeError for a
    non-string, ValueError listing the canonical answers otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got "
                        f"{type(value).__name__} {value!r}")
    key = _spelling(value)
    if key not in spellings:
        raise ValueError(f"{name}: {value!r} is not one of "
                         f"{sorted(set(spellings.values()))}")
    return spellings[key]


def close(answer: float, truth: float, rel: float) -> bool:
    """Within ``rel`` of ``truth`` (relative)."""
    return abs(answer - truth) <= rel * abs(truth)


def off_by(answer: float, truth: float) -> str:
    """'too high' / 'too low', without giving the value away."""
    return "too high" if answer > truth else "too low"
