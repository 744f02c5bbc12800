"""Turn a hang into an error that names the culprit (book, Chapter 8).

A synchronous collective with no timeout waits forever for a rank that
never comes. NCCL waits the same way: its kernels spin until the peer's
data arrives, and only an abort (``ncclCommAbort``) ends them. The
framework has to watch: PyTorch's ``ProcessGroupNCCL`` runs a watchdog
thread that checks every collective against the process group's timeout,
then aborts the communicator and tears the process down (what
``TORCH_NCCL_ASYNC_ERROR_HANDLING`` selects), dumping its flight recorder
so that the ranks' records can be compared afterwards.

:class:`Watchdog` is that thread for our ranks. It keeps its rank's
heartbeat on the progress board (:mod:`warmup_kit.failures.board`) and
reads every row; when its own rank has been inside one collective for
longer than ``hang_s``, :func:`diagnose` compares the rows and names the
rank(s) the others wait on, each worded for its cause: *dead* (its process
is gone), *frozen* (its process exists but its heartbeat stopped: a
SIGSTOP, a machine that no longer schedules it; wherever it stopped,
inside the collective too), *behind* (alive, outside any collective, it
never entered the one the others are in), or *out of order* (alive and
inside a different collective: the ranks disagree on the order of calls).
The first watchdog to see it announces the verdict on the board; every
rank's watchdog then acts on the same verdict: raises
:class:`HangDetected` (a :class:`~warmup_kit.CollectiveTimeout` naming the
culprit) in its main thread, by a signal that interrupts the blocked wait,
or calls an abort (under MPI, ``MPI_Abort``: a blocking MPI wait cannot be
interrupted). If every rank is inside the collective and alive, nobody is
behind: the wait is in the transport (a lost link, a peer whose death it
cannot see) or in a rank stuck inside it with its heartbeat going (a
kernel that never returns); the report says so, names no rank, and the
wait still ends on every rank. A failure of the watchdog thread itself is
printed and ends the wait too: a watchdog must not die silently.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from warmup_kit.errors import CollectiveTimeout
from warmup_kit.failures.board import Board, Row, alive
from warmup_kit.units import human_bytes

SIGNAL = signal.SIGUSR1


class HangDetected(CollectiveTimeout):
    """The watchdog ended a wait: ``peer`` is the rank the others wait on
    (None when every rank is inside the collective)."""


#: seconds without a heartbeat after which a live rank counts as frozen
#: (its watchdog thread beats every ``poll_s``, 0.05 s by default)
STALE_S = 1.0

#: what a culprit is doing, as :attr:`Report.causes` names it
DEAD, FROZEN, BEHIND, OUT_OF_ORDER = "dead", "frozen", "behind", \
    "out of order"


@dataclass(frozen=True)
class Report:
    """What the board says about a stalled collective."""

    seq: int                      # the collective's sequence number
    op: str
    nbytes: int
    waiting: tuple[int, ...]      # ranks inside a collective, not to blame
    culprits: tuple[int, ...]     # the ranks the others wait on
    waited_s: float
    details: dict = field(default_factory=dict)   # culprit -> what it does
    rows: tuple = ()                              # the board as read
    causes: dict = field(default_factory=dict)    # culprit -> DEAD, ...
    oldest_beat: tuple = ()       # (rank, seconds) of the stalest heartbeat

    @property
    def culprit(self) -> int | None:
        return self.culprits[0] if self.culprits else None

    @property
    def text(self) -> str:
        ranks = ("rank " if len(self.waiting) == 1 else "ranks ") + \
            ",".join(map(str, self.waiting))
        what = f"collective #{self.seq} ({self.op}, {human_bytes(self.nbytes)})"
        if not self.culprits:
            beat = ""
            if self.oldest_beat:
                beat = (f" (the oldest heartbeat, rank {self.oldest_beat[0]}"
                        f"'s, is {self.oldest_beat[1]:.1f} s old)")
            return (f"{ranks} waiting for {self.waited_s:.1f} s inside "
                    f"{what}: every rank is inside it and alive{beat}, none "
                    "is behind; the wait is in the transport (a lost link, "
                    "a peer whose death it cannot see) or in a rank stuck "
                    "inside the collective (a kernel that never returns)")
        who = ("rank " if len(self.culprits) == 1 else "ranks ") + \
            ",".join(map(str, self.culprits))
        why = "; ".join(f"rank {c} {self.details[c]}" for c in self.culprits)
        return (f"{ranks} waiting on {who} for "
                f"{self.waited_s:.1f} s in {what}: {why}")


def _cause(r: Row, s: int, op: str, now: float, stale_s: float
           ) -> tuple[str, str] | None:
    """What rank ``r`` is doing while the others wait in #s, if it is to
    blame: ``(cause, its description)``; None if it waits too."""
    age = now - r.beat_s
    if r.gave_up:      # its own wait was ended: a victim, even once it exits
        return None
    if not alive(r.pid):
        return DEAD, "is dead (its process is gone)"
    where = (f"inside collective #{r.started} ({r.op})" if r.inside else
             f"at step {r.step}, outside any collective, after #{r.done}")
    if age > stale_s:
        return FROZEN, (f"is frozen: its process is alive but its heartbeat "
                        f"stopped {age:.1f} s ago, {where} (stopped, or "
                        "stuck where none of its threads runs)")
    if not r.inside and r.started < s:
        return BEHIND, (f"is alive at step {r.step}, outside any "
                        f"collective: it finished #{r.done} and has not "
                        f"entered #{s}")
    if r.inside and (r.started != s or r.op != op):
        return OUT_OF_ORDER, (f"is inside collective #{r.started} ({r.op}) "
                              "with a live heartbeat: the ranks disagree on "
                              "the order of calls")
    return None


def diagnose(rows: list[Row], now: float | None = None,
             stale_s: float = STALE_S) -> Report | None:
    """Who is waiting, in which collective, on whom (None: nobody waits).

    The collective is the latest one any rank is inside (#s). The ranks to
    blame, in this order of precedence:

    * dead: the process is gone;
    * frozen: the process exists, but its heartbeat is older than
      ``stale_s`` (SIGSTOP, a machine that stopped scheduling it), wherever
      it stopped: before #s, or inside #s or an older collective;
    * behind (when nobody is dead or frozen): alive, outside any
      collective, and it never entered #s;
    * out of order (likewise): alive, inside an older collective than #s,
      or inside #s as a different operation.

    With dead or frozen ranks, the others inside an older collective are
    waiting on them too. A rank whose own wait was ended (it gave up) is
    never to blame. If nobody is to blame, every rank is inside #s and
    alive: the report says so, with the stalest heartbeat.
    """
    now = time.monotonic() if now is None else now
    inside = [r for r in rows if r.inside]
    if not inside:
        return None
    s = max(r.started for r in inside)
    at_s = [r for r in inside if r.started == s]
    ops = [r.op for r in at_s]
    op = max(dict.fromkeys(ops), key=ops.count)  # the most common, first
    found = {r.rank: c for r in rows
             if (c := _cause(r, s, op, now, stale_s)) is not None}
    if any(c[0] in (DEAD, FROZEN) for c in found.values()):
        found = {k: c for k, c in found.items() if c[0] in (DEAD, FROZEN)}
    waiting = [r for r in inside if r.rank not in found]
    first = min([r for r in waiting if r.started == s] or waiting or at_s,
                key=lambda r: r.t_started_s)
    stalest = min([r for r in rows if not r.gave_up] or rows,
                  key=lambda r: r.beat_s)
    return Report(seq=s, op=first.op, nbytes=first.nbytes,
                  waiting=tuple(r.rank for r in waiting),
                  culprits=tuple(sorted(found)),
                  waited_s=now - first.t_started_s,
                  details={k: c[1] for k, c in found.items()},
                  rows=tuple(rows),
                  causes={k: c[0] for k, c in found.items()},
                  oldest_beat=(stalest.rank, max(0.0, now - stalest.beat_s)))


def refine(exc: CollectiveTimeout, board: Board,
           stale_s: float = STALE_S) -> CollectiveTimeout:
    """A transport's timeout names the peer it waited for, which under MPI
    is often a neighbour that waits too; the board names the rank the
    others wait on (dead, frozen, behind, out of order: see
    :func:`diagnose`). Returns ``exc`` with ``peer`` set to that rank (and
    the board's reading appended), or ``exc`` unchanged if the board knows
    no better."""
    rep = diagnose(board.rows(), stale_s=stale_s)
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
            calls ``MPI_Abort``; ``report`` is None when the watchdog
            itself failed, see :attr:`error`).
        on_report: called with the report by the rank that announces it
            (default: nothing; the lab prints it).
        poll_s: how often the board is read (and this rank's heartbeat
            written).
        stale_s: a heartbeat older than this is a frozen rank (default:
            :data:`STALE_S`, or half of ``hang_s`` if that is less, so a
            rank frozen since the collective began is seen as frozen).
    """

    def __init__(self, board: Board, hang_s: float = 5.0, *,
                 action: str | Callable[[Report | None, bool], None]
                 = "raise",
                 on_report: Callable[[Report], None] | None = None,
                 poll_s: float = 0.05, stale_s: float | None = None) -> None:
        if board.rank is None:
            raise ValueError("the watchdog needs the board row of its rank")
        self.board, self.hang_s, self.action = board, hang_s, action
        self.on_report, self.poll_s = on_report, poll_s
        self.stale_s = min(STALE_S, hang_s / 2) if stale_s is None \
            else stale_s
        self.report: Report | None = None
        #: why the watchdog itself failed (None: it did not)
        self.error: str | None = None
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
        """Watch; once it has acted, keep the heartbeat going (a rank that
        has acted is alive, not frozen). A failure of the watchdog itself
        is reported and still ends the wait: a watchdog that died silently
        would leave its rank waiting forever."""
        try:
            self._watch()
        except Exception as exc:            # noqa: BLE001 - see above
            self._failed(exc)
        while not self._stop.wait(self.poll_s):
            try:
                self.board.beat()
            except Exception:               # noqa: BLE001 - board closed
                return

    def _watch(self) -> None:
        b, me = self.board, self.board.rank
        while not self._stop.wait(self.poll_s):
            b.beat()
            verdict = b.verdict()
            row = b.rows()[me]
            if verdict is None:
                if not self._overdue(row):
                    continue
                rep = diagnose(b.rows(), stale_s=self.stale_s)
                verdict = b.announce(rep.culprit if rep is not None
                                     else None)
            if not row.inside:          # the culprit itself: nothing to end
                continue
            self._act(verdict)
            return

    def _overdue(self, row: Row) -> bool:
        return row.inside and \
            time.monotonic() - row.t_started_s >= self.hang_s

    def _act(self, verdict: tuple[int | None, int]) -> None:
        b, me = self.board, self.board.rank
        culprit, by = verdict
        rep = diagnose(b.rows(), stale_s=self.stale_s)
        self.report = rep
        if by == me and self.on_report is not None and rep is not None:
            self.on_report(rep)
        text = rep.text if rep is not None else "a hang"
        self._end(f"rank {me}: watchdog: {text}", culprit, rep, by == me)

    def _end(self, message: str, peer: int | None, rep: Report | None,
             announced_here: bool) -> None:
        """End this rank's wait: raise in the main thread, or the action."""
        if self.action == "raise":
            self._pending = HangDetected(message, peer=peer,
                                         rank=self.board.rank)
            signal.pthread_kill(self._main, SIGNAL)
        else:
            self.action(rep, announced_here)
        self.board.acknowledge()

    def _failed(self, exc: Exception) -> None:
        """The watchdog itself raised: say so on stderr at once, then end
        the wait anyway, without a diagnosis, once this rank has been
        inside one collective for ``hang_s`` (at once if even its own row
        cannot be read)."""
        me = self.board.rank
        self.error = (f"rank {me}: the watchdog failed "
                      f"({type(exc).__name__}: {exc})")
        sys.stderr.write(self.error + "\n" + "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)))
        sys.stderr.flush()
        try:
            while not self._stop.wait(self.poll_s):
                self.board.beat()
                if self._overdue(self.board.rows()[me]):
                    break
            else:
                return
        except Exception:                   # noqa: BLE001 - act now
            pass
        self._end(f"{self.error}; it ends this rank's wait anyway, "
                  "without a diagnosis", None, None, True)
