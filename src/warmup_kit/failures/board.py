"""Where every rank says what it is doing: the progress board (Chapter 8).

Each rank keeps one row of a small file mapped into every rank's memory:
its process id, its training step, the sequence number of the last
collective it entered and of the last it finished, when it entered it,
which collective and how many bytes, whether it gave up on that
collective (its own timeout or watchdog ended it), and a heartbeat: the
rank's watchdog thread writes the time into its row several times a
second, so a row whose heartbeat has stopped belongs to a process that no
longer runs (stopped, or stuck where none of its threads runs) even though
it still exists. It is PyTorch's flight recorder (a per-rank record of
recent collectives with their sequence numbers, dumped on a timeout) and
its TCPStore heartbeat in one table: with every rank's row side by
side, a stall names its culprit, the rank the others wait on: one whose
heartbeat stopped, or one that has not entered the collective the others
are waiting in (:func:`warmup_kit.failures.watchdog.diagnose`).

Only a rank writes its own row; anyone reads. A header row holds the
job-wide verdict: the first watchdog to see a hang writes the culprit
(or that no rank is to blame) there, under a file lock, so every other
rank's watchdog gives the same answer at once. The board is one file, so
it serves ranks of one host (the demos' sockets, shared-memory and MPI
ranks); across hosts the same rows would live in a key-value store such
as PyTorch's TCPStore.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from warmup_kit.proc import alive  # noqa: F401 - the watchdog's

FIELDS = ("pid", "step", "started", "done", "t_started_ns", "op", "nbytes",
          "beat_ns", "verdict", "reported", "gave_up")
(PID, STEP, STARTED, DONE, T_STARTED, OP, NBYTES, BEAT, VERDICT, REPORTED,
 GAVE_UP) = range(11)
#: the header row's fields: 1 once a verdict stands, culprit + 1 (0: no
#: rank is to blame), announcer + 1, time
H_SET, H_CULPRIT, H_BY, H_AT = 0, 1, 2, 3
OPS = ("?", "allreduce", "reduce_scatter", "all_gather", "broadcast",
       "reduce", "gather", "scatter", "all_to_all", "barrier")


@dataclass(frozen=True)
class Row:
    """One rank's row, read at one instant."""

    rank: int
    pid: int
    step: int
    started: int          # sequence number of the last collective entered
    done: int             # ... and of the last one finished
    t_started_s: float    # time.monotonic() when it entered it
    op: str
    nbytes: int
    beat_s: float         # time.monotonic() of its last heartbeat
    gave_up: bool = False  # its wait in the collective it is in was ended

    @property
    def inside(self) -> bool:
        """In a collective it has not finished."""
        return self.started > self.done


class Board:
    """The mapped table (see the module docstring).

    Args:
        path: the file (created, and sized, by whoever opens it first).
        world: number of ranks.
        rank: the row this process writes (None: read only).
    """

    def __init__(self, path: str | Path, world: int,
                 rank: int | None = None) -> None:
        self.path, self.world, self.rank = Path(path), world, rank
        size = (world + 1) * len(FIELDS) * 8
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < size:
            os.ftruncate(self._fd, size)
        self._mm = mmap.mmap(self._fd, size)
        self._t = np.ndarray((world + 1, len(FIELDS)), np.int64, self._mm)
        if rank is not None:
            row = self._t[rank + 1]
            row[:] = 0
            row[PID] = os.getpid()
            self.beat()

    # ------------------------------------------------------ this rank
    def beat(self, step: int | None = None) -> None:
        row = self._t[self.rank + 1]
        if step is not None:
            row[STEP] = step
        row[BEAT] = time.monotonic_ns()

    def enter(self, op: str, nbytes: int = 0) -> int:
        """This rank enters its next collective; its sequence number."""
        row = self._t[self.rank + 1]
        row[OP] = OPS.index(op) if op in OPS else 0
        row[NBYTES] = nbytes
        row[T_STARTED] = time.monotonic_ns()
        row[STARTED] += 1                 # last: readers see a whole entry
        row[BEAT] = row[T_STARTED]
        return int(row[STARTED])

    def leave(self) -> None:
        row = self._t[self.rank + 1]
        row[DONE] = row[STARTED]
        row[BEAT] = time.monotonic_ns()

    # ------------------------------------------------------ anyone
    def rows(self) -> list[Row]:
        t = self._t[1:].copy()
        return [Row(r, int(x[PID]), int(x[STEP]), int(x[STARTED]),
                    int(x[DONE]), x[T_STARTED] / 1e9,
                    OPS[int(x[OP])] if 0 <= x[OP] < len(OPS) else "?",
                    int(x[NBYTES]), x[BEAT] / 1e9,
                    bool(x[GAVE_UP]) and x[GAVE_UP] == x[STARTED])
                for r, x in enumerate(t)]

    def verdict(self) -> tuple[int | None, int] | None:
        """``(culprit, announcing rank)`` once a watchdog has announced a
        hang (culprit None: no rank is to blame); None before."""
        h = self._t[0]
        if h[H_SET] == 0:
            return None
        return (None if h[H_CULPRIT] == 0 else int(h[H_CULPRIT]) - 1,
                int(h[H_BY]) - 1)

    def announce(self, culprit: int | None) -> tuple[int | None, int]:
        """Record ``culprit`` (None: no rank is to blame) as the job's
        verdict unless another rank got there first; the verdict that
        stands."""
        if culprit is not None and not 0 <= culprit < self.world:
            raise ValueError(f"culprit must be a rank in 0..{self.world - 1}"
                             f" or None, got {culprit!r}")
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            if self._t[0, H_SET] == 0:
                self._t[0, H_BY] = (self.rank if self.rank is not None
                                    else -1) + 1
                self._t[0, H_AT] = time.monotonic_ns()
                self._t[0, H_CULPRIT] = 0 if culprit is None else culprit + 1
                self._t[0, H_SET] = 1     # last: readers see a whole verdict
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
        return self.verdict()

    def acknowledge(self) -> None:
        """This rank has acted on the verdict."""
        self._t[self.rank + 1, VERDICT] = 1

    def acknowledged(self) -> set[int]:
        return {r for r in range(self.world) if self._t[r + 1, VERDICT]}

    def mark_reported(self) -> None:
        """This rank has printed its outcome."""
        self._t[self.rank + 1, REPORTED] = 1

    def reported(self) -> set[int]:
        return {r for r in range(self.world) if self._t[r + 1, REPORTED]}

    def fileno(self) -> int:
        return self._fd

    def give_up(self) -> None:
        """This rank's wait in the collective it is in was ended (a
        timeout, the watchdog): it stays entered, but it is a victim, not
        a rank to blame, even once its heartbeat stops."""
        row = self._t[self.rank + 1]
        row[GAVE_UP] = row[STARTED]

    @contextmanager
    def collective(self, op: str, nbytes: int = 0):
        """Mark a collective on this rank's row: entered now, finished
        when the block completes (a failed one stays entered, marked as
        given up)."""
        seq = self.enter(op, nbytes)
        try:
            yield seq
        except BaseException:
            self.give_up()
            raise
        self.leave()

    def close(self) -> None:
        self._t = None
        try:
            self._mm.close()
        except BufferError:           # a view still alive: the OS frees it
            pass
        os.close(self._fd)
