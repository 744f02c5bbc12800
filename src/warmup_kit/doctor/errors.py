"""The one error the doctor raises for input it cannot read."""
from __future__ import annotations


class DoctorInputError(ValueError):
    """A log, report or flag the doctor cannot use; its message is one line
    that names the file and what is wrong (the command line prints it and
    exits with status 2)."""
