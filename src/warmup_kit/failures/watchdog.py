"""Turn a hang into an error that names the culprit (book, Chapter 8).

A synchronous collective with no timeout waits forever for a rank that
never comes. NCCL waits the same way: its kernels spin until the peer's
data arrives, and only an abort (``ncclCommAbort``) ends them. The
framework has to watch: PyTorch's ``ProcessGroupNCCL`` runs a watchdog
thread that checks every collective against the process group's timeout,
then aborts the communicator and tears the process down (what
``TORCH_NCCL_ASYNC_ERROR_HANDLING`` selects), dumping its flight recorder
so that the ranks' records can be compared afterwards.

:class:`Watchdog` is that thread for our ranks. It reads the progress
board (:mod:`warmup_kit.failures.board`); when its own rank has been
inside one collective for longer than ``hang_s``, :func:`diagnose`
compares every rank's row: the ranks still waiting in collective #s, and
the rank(s) that never entered #s, the culprit, with what each is doing
(dead, or alive elsewhere, at which step). The first watchdog to see it
announces the verdict on the board; every rank's watchdog then acts on
the same verdict: raises :class:`HangDetected` (a
:class:`~warmup_kit.CollectiveTimeout` naming the culprit) in its main
thread, by a signal that interrupts the blocked wait, or calls an abort
(under MPI, ``MPI_Abort``: a blocking MPI wait cannot be interrupted).
If every rank is inside #s, nobody is behind: the wait is in the
transport (a lost link, a peer whose death it cannot see), and the
report says so.
"""
from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from warmup_kit.errors import CollectiveTimeout
from warmup_kit.failures.board import Board, Row, alive
from warmup_kit.units import human_bytes

SIGNAL = signal.SIGUSR1


class HangDetected(CollectiveTimeout):
    """The watchdog ended a wait: ``peer`` is the rank the others wait on
    (None when every rank is inside the collective)."""


@dataclass(frozen=True)
class Report:
    """What the board says about a stalled collective."""

    seq: int                      # the collective's sequence number
    op: str
    nbytes: int
    waiting: tuple[int, ...]      # ranks inside it
    culprits: tuple[int, ...]     # ranks that never entered it
    waited_s: float
    details: dict = field(default_factory=dict)   # culprit -> what it does
    rows: tuple = ()                              # the board as read

    @property
    def culprit(self) -> int | None:
        return self.culprits[0] if self.culprits else None

    @property
    def text(self) -> str:
        ranks = ",".join(map(str, self.waiting))
        what = f"collective #{self.seq} ({self.op}, {human_bytes(self.nbytes)})"
        if not self.culprits:
            return (f"ranks {ranks} waiting for {self.waited_s:.1f} s inside "
                    f"{what}: every rank is inside it, none is behind; the "
                    "wait is in the transport (a lost link, a peer whose "
                    "death it cannot see) or the ranks called different "
                    "collectives")
        who = ",".join(map(str, self.culprits))
        why = "; ".join(f"rank {c} {self.details[c]}" for c in self.culprits)
        return (f"ranks {ranks} waiting on rank {who} for "
                f"{self.waited_s:.1f} s in {what}: {why}")


def diagnose(rows: list[Row], now: float | None = None) -> Report | None:
    """Who is waiting, in which collective, on whom (None: nobody waits).

    The collective is the latest one any rank is inside (#s). The culprits
    are the ranks whose last entered collective is older than #s.
    """
    now = time.monotonic() if now is None else now
    inside = [r for r in rows if r.inside]
    if not inside:
        return None
    s = max(r.started for r in inside)
    waiting = [r for r in inside if r.started == s]
    behind = [r for r in rows if r.started < s]
    details = {}
    for r in behind:
        if not alive(r.pid):
            state = "is dead (its process is gone)"
        elif r.inside:
            state = (f"is still inside collective #{r.started} ({r.op}): "
                     "the ranks disagree on the order of calls")
        else:
            state = (f"is alive at step {r.step}, outside any collective: "
                     f"it finished #{r.done} and has not entered #{s}")
        details[r.rank] = state
    first = min(waiting, key=lambda r: r.t_started_s)
    return Report(seq=s, op=first.op, nbytes=first.nbytes,
                  waiting=tuple(r.rank for r in waiting),
                  culprits=tuple(r.rank for r in behind),
                  waited_s=now - first.t_started_s, details=details,
                  rows=tuple(rows))


def refine(exc: CollectiveTimeout, board: Board) -> CollectiveTimeout:
    """A transport's timeout names the peer it waited for, which under MPI
    is often a neighbour that waits too; the board names the rank that is
    behind. Returns ``exc`` with ``peer`` set to that rank (and the board's
    reading appended), or ``exc`` unchanged if the board knows no better."""
    rep = diagnose(board.rows())
    if rep is None or rep.culprit is None or rep.culprit == exc.peer:
        return exc
    return type(exc)(f"{exc}; the board: {rep.text}", peer=rep.culprit,
                     rank=exc.rank)


class Watchdog:
    """A thread that ends a hang of its rank (see the module docstring).

    Args:
        board: the progress board, with this rank's row.
        hang_s: how long one collective may take before it is a hang.
        action: ``"raise"``: raise :class:`HangDetected` in the main thread
            (it must be the thread that started the watchdog); or a
            callable ``action(report, announced_here)`` (e.g. one that
            calls ``MPI_Abort``).
        on_report: called with the report by the rank that announces it
            (default: nothing; the lab prints it).
        poll_s: how often the board is read.
    """

    def __init__(self, board: Board, hang_s: float = 5.0, *,
                 action: str | Callable[[Report | None, bool], None]
                 = "raise",
                 on_report: Callable[[Report], None] | None = None,
                 poll_s: float = 0.05) -> None:
        if board.rank is None:
            raise ValueError("the watchdog needs the board row of its rank")
        self.board, self.hang_s, self.action = board, hang_s, action
        self.on_report, self.poll_s = on_report, poll_s
        self.report: Report | None = None
        self._pending: HangDetected | None = None
        self._stop = threading.Event()
        self._main = threading.main_thread().ident
        self._old = None
        if action == "raise":
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("action='raise' needs the watchdog "
                                   "started from the main thread")
            self._old = signal.signal(SIGNAL, self._raise)
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="watchdog")
        self._thread.start()

    def _raise(self, signum, frame) -> None:
        exc, self._pending = self._pending, None
        if exc is not None and not self._stop.is_set():
            raise exc

    def settle(self, timeout: float = 2.0) -> None:
        """After a hang was raised here: wait until every rank that was
        waiting has had its own raised, so that none of them sees this
        rank's connections close first and blames this rank."""
        rep = self.report
        if rep is None:
            return
        deadline = time.monotonic() + timeout
        while not set(rep.waiting) <= self.board.acknowledged() and \
                time.monotonic() < deadline:
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        if self._old is not None:
            signal.signal(SIGNAL, self._old)
            self._old = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------- the thread
    def _loop(self) -> None:
        b, me = self.board, self.board.rank
        while not self._stop.wait(self.poll_s):
            b.beat()
            verdict = b.verdict()
            row = b.rows()[me]
            if verdict is None:
                if not row.inside or \
                        time.monotonic() - row.t_started_s < self.hang_s:
                    continue
                rep = diagnose(b.rows())
                verdict = b.announce(-1 if rep.culprit is None
                                     else rep.culprit)
            if not row.inside:          # the culprit itself: nothing to end
                continue
            self._act(verdict)
            return

    def _act(self, verdict: tuple[int, int]) -> None:
        b, me = self.board, self.board.rank
        culprit, by = verdict
        rep = diagnose(b.rows())
        self.report = rep
        if by == me and self.on_report is not None and rep is not None:
            self.on_report(rep)
        text = rep.text if rep is not None else "a hang"
        peer = None if culprit < 0 else culprit
        if self.action == "raise":
            self._pending = HangDetected(
                f"rank {me}: watchdog: {text}", peer=peer, rank=me)
            signal.pthread_kill(self._main, SIGNAL)
        else:
            self.action(rep, by == me)
        b.acknowledge()
