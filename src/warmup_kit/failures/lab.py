"""Lab 01's failure extension: a hang, a killed rank, a stopped rank, a
straggler, for real (``labs/lab01.py --fail {hang,kill,slow} --fail-rank
K``; Chapter 8; ``stop`` and ``inside`` from Python).

Every rank runs a loop of steps: compute (real numpy work), then an
all-reduce of the "gradients", each collective marked on the progress
board (:mod:`warmup_kit.failures.board`) with a watchdog beside it
(:mod:`warmup_kit.failures.watchdog`). At step ``fail_step`` rank K:

* ``hang``: stops calling collectives (alive, silent: a stuck kernel, a
  dead data loader). With no ``timeout`` the others wait until the
  watchdog names K and ends the wait; with a timeout each survivor's wait
  raises :class:`~warmup_kit.CollectiveTimeout` naming K.
* ``kill``: SIGKILLs itself (a node that lost power). Over sockets and
  shared memory the others raise :class:`~warmup_kit.PeerLost` naming K;
  under ``mpirun`` the launcher sees a rank die and kills the whole job.
* ``stop``: SIGSTOPs itself (a process the OS no longer runs: it exists,
  but none of its threads runs, so its heartbeat on the board stops). The
  others' watchdog, or their timeouts refined from the board, name K as
  frozen.
* ``slow``: does ``slow_factor`` times the work at every step (a
  throttling GPU). The run completes; the straggler is found from the
  per-rank compute times (:mod:`warmup_kit.failures.models.straggler`).

With ``inside=True`` a hang, kill or stop happens inside the step's
all-reduce instead: after rank K entered it on the board, before its first
transfer (a kernel that never returns). Every rank is then inside the same
collective: a hung K still beats (no rank is behind, and the watchdog says
so), a stopped K is frozen.
"""
from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import asdict, dataclass

import numpy as np

from warmup_kit.collectives import allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.comm.launch import launch
from warmup_kit.errors import CollectiveTimeout, PeerLost, RankDied
from warmup_kit.failures import inject
from warmup_kit.failures.board import Board, alive
from warmup_kit.failures.models.straggler import find_stragglers
from warmup_kit.failures.watchdog import (
    STALE_S, HangDetected, Watchdog, refine)
from warmup_kit.machine import limit_blas_threads

FAULTS = ("hang", "kill", "stop", "slow")


@dataclass(frozen=True)
class Demo:
    """One failure demo (every rank gets the same).

    Attributes:
        fault: "hang", "kill", "stop" or "slow".
        rank: the culprit K.
        fail_step: the step at which a hang, a kill or a stop happens.
        steps: steps in the loop.
        timeout: seconds a collective may wait (None: no limit; the
            watchdog ends a hang).
        watchdog_s: how long one collective may last before the watchdog
            calls it a hang.
        nbytes: the all-reduce's size.
        work: matrix products of 96 x 96 per step (the compute).
        slow_factor: how many times the work a slow rank does (6: with
            4 ranks on 2 cores the scheduler alone can make one healthy
            rank compute twice as long as another, and a 3x straggler
            hid in that spread on a loaded machine).
        inside: a hang, kill or stop happens inside the step's all-reduce
            (entered on the board, nothing sent yet), not before it.
    """

    fault: str
    rank: int
    fail_step: int = 2
    steps: int = 20
    timeout: float | None = None
    watchdog_s: float = 5.0
    nbytes: int = 64 << 10
    work: int = 40
    slow_factor: float = 6.0
    inside: bool = False

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got "
                             f"{self.fault!r}")
        if not 0 <= self.fail_step < self.steps:
            raise ValueError(f"fail_step must be in 0..{self.steps - 1}")
        if self.watchdog_s <= 0:
            raise ValueError("watchdog_s must be > 0")
        if self.inside and self.fault == "slow":
            raise ValueError("inside applies to hang, kill and stop")


def compute(units: float, a: np.ndarray) -> None:
    """``units`` products of ``a`` with itself: real work on this core."""
    for _ in range(int(round(units))):
        np.matmul(a, a, out=np.empty_like(a))


class RankFailed(RuntimeError):
    """A demo rank's failure, carrying its outcome (so the launcher counts
    it as a failure and ends the hung culprit after its grace period)."""

    def __init__(self, outcome: dict) -> None:
        super().__init__(outcome.get("message", "failed"))
        self.outcome = outcome

    def __reduce__(self):
        return (RankFailed, (self.outcome,))


def rank_main(comm: Comm, demo: Demo, board_path: str, abort=None,
              raise_failure: bool = True, on_outcome=None) -> dict:
    """One rank of the demo; its outcome as a dict.

    Args:
        abort: called with the watchdog's report when it ends a hang; None
            raises the hang as an exception in this thread instead.
        raise_failure: raise :class:`RankFailed` (carrying the outcome)
            when this rank failed, instead of returning the outcome.
        on_outcome: called as ``on_outcome(outcome, board)`` before the
            board is closed.
    """
    r = comm.rank
    # one BLAS thread per rank: forked ranks inherit one per core, and four
    # ranks' spinning thread pools on two cores made a healthy rank's
    # compute vary more than the 6x straggler's
    limit_blas_threads(1)
    board = Board(board_path, comm.size, r)
    if r == demo.rank and demo.fault in ("hang", "kill", "stop"):
        inject.arm("lab.collective" if demo.inside else "lab.step",
                   _stop if demo.fault == "stop" else demo.fault,
                   step=demo.fail_step)
    out = {"rank": r, "ok": False, "compute_s": [], "comm_s": [],
           "report": None, "error": None, "peer": None}

    def announce(rep) -> None:
        out["report"] = rep.text
        out["board"] = [{"rank": x.rank, "step": x.step,
                         "entered": x.started, "finished": x.done,
                         "inside": x.inside, "alive": alive(x.pid)}
                        for x in rep.rows]

    wd = Watchdog(board, demo.watchdog_s, on_report=announce,
                  action="raise" if abort is None else abort)
    a = np.random.default_rng(r).standard_normal((96, 96))
    x = np.full(demo.nbytes // 8, float(r))
    t_wait = time.perf_counter()

    def failed(exc) -> None:
        if isinstance(exc, CollectiveTimeout) and \
                not isinstance(exc, HangDetected):
            # a rank frozen since the wait began is stale by the timeout
            exc = refine(exc, board, stale_s=min(
                STALE_S, (demo.timeout or demo.watchdog_s) / 2))
        out.update(error=type(exc).__name__, message=str(exc), peer=exc.peer,
                   waited_s=time.perf_counter() - t_wait)
    try:
        try:
            for step in range(demo.steps):
                board.beat(step)
                t0 = time.perf_counter()
                slow = demo.fault == "slow" and r == demo.rank
                compute(demo.work * (demo.slow_factor if slow else 1), a)
                inject.point("lab.step", rank=r, step=step)
                t1 = t_wait = time.perf_counter()
                with board.collective("allreduce", x.nbytes):
                    inject.point("lab.collective", rank=r, step=step)
                    y = allreduce(x, comm, timeout=demo.timeout)
                t2 = time.perf_counter()
                if not np.all(y == comm.size * (comm.size - 1) / 2):
                    raise AssertionError(f"rank {r}: wrong result")
                out["compute_s"].append(t1 - t0)
                out["comm_s"].append(t2 - t1)
            out["ok"] = True
        except (CollectiveTimeout, PeerLost) as exc:
            failed(exc)
    except HangDetected as exc:       # the watchdog's, during the handler
        failed(exc)
    finally:
        wd.stop()
        inject.disarm_all()
    if out["error"] == "HangDetected":
        wd.settle()
    if on_outcome is not None:
        on_outcome(out, board)
    board.close()
    if not out["ok"] and raise_failure:
        raise RankFailed(out)
    return out


def _stop(**point) -> None:
    """The ``stop`` fault: this whole process stops until a SIGCONT (or
    the SIGKILL that ends the demo)."""
    os.kill(os.getpid(), signal.SIGSTOP)


def run_local(demo: Demo, world: int = 4, transport: str = "sockets"
              ) -> dict:
    """The demo on ``world`` forked ranks (sockets or shared memory)."""
    fd, path = tempfile.mkstemp(prefix="warmup-board-")
    os.close(fd)
    t0, board = time.monotonic(), None
    try:
        board = Board(path, world)            # create it, sized
        limit = 30 + demo.watchdog_s + 2 * (demo.timeout or 0)
        # a rank still inside the collective will end its own wait (its
        # watchdog, its timeout; a failed one stays entered while it
        # reports): it is waited for past the grace, the hung culprit
        # outside any collective is not
        outs = launch(rank_main, world, args=(demo, path),
                      transport=transport, timeout=limit, grace=1.0,
                      pending=lambda r: board.rows()[r].inside,
                      max_grace=5 + demo.watchdog_s + (demo.timeout or 0),
                      return_exceptions=True)
    finally:
        if board is not None:
            board.close()
        os.unlink(path)
    ranks = [_outcome(r, o) for r, o in enumerate(outs)]
    return finish(demo, ranks, transport, time.monotonic() - t0)


def _outcome(rank: int, o) -> dict:
    if isinstance(o, dict):
        return o
    if isinstance(o, RankFailed):
        return o.outcome
    died = isinstance(o, RankDied)
    return {"rank": rank, "ok": False, "report": None, "compute_s": [],
            "comm_s": [], "error": "died" if died else "hung",
            "message": (f"its process was killed ({o})" if died else
                        "killed by the launcher once the others had failed "
                        "(it never came back)"), "peer": None}


def finish(demo: Demo, ranks: list[dict], transport: str,
           elapsed_s: float) -> dict:
    """The demo's result: each rank's outcome, the watchdog's report, and
    (slow) the straggler verdict."""
    who = next((o for o in ranks if o.get("report")), {})
    res = {"demo": asdict(demo), "transport": transport,
           "world": len(ranks), "elapsed_s": elapsed_s, "ranks": ranks,
           "report": who.get("report"), "board": who.get("board"),
           "stragglers": None}
    if all(o["ok"] for o in ranks):
        compute_s = np.array([o["compute_s"] for o in ranks])
        step_s = (compute_s + np.array([o["comm_s"] for o in ranks])
                  ).max(axis=0)
        s = find_stragglers(compute_s, step_s=step_s)
        res["stragglers"] = {"ranks": list(s.ranks), "text": s.describe(),
                             "cost_s": s.cost_s,
                             "cost_fraction": s.cost_fraction,
                             "median_ms": (1e3 * s.median_s).tolist()}
    return res


def rank_line(o: dict) -> str:
    """One rank's outcome in a line."""
    if o["ok"]:
        ms = 1e3 * float(np.median(o["compute_s"]))
        return (f"rank {o['rank']}: completed {len(o['compute_s'])} steps, "
                f"median compute {ms:.1f} ms")
    waited = o.get("waited_s")
    after = f" after {waited:.1f} s" if waited is not None else ""
    who = f" naming rank {o['peer']}" if o.get("peer") is not None else ""
    line = f"rank {o['rank']}: {o['error']}{who}{after}"
    if o["error"] == "HangDetected":
        return line + " (the watchdog's verdict)"
    return f"{line}: {o['message']}"


def lines(res: dict) -> list[str]:
    """The demo's outcome as text, one line per rank."""
    d = res["demo"]
    what = {"slow": f"does {d['slow_factor']:g}x the work at every step",
            "hang": f"hangs at step {d['fail_step']}",
            "kill": f"is killed (SIGKILL) at step {d['fail_step']}",
            "stop": f"is stopped (SIGSTOP) at step {d['fail_step']}",
            }[d["fault"]]
    if d.get("inside"):
        what += ", inside its all-reduce"
    out = [f"{res['transport']}: {res['world']} ranks, rank {d['rank']} "
           f"{what}, timeout "
           f"{d['timeout'] if d['timeout'] is not None else 'none'}, "
           f"watchdog after {d['watchdog_s']:g} s"]
    if res["report"]:
        out.append(f"watchdog: {res['report']}")
    out += [rank_line(o) for o in res["ranks"]]
    if res["stragglers"]:
        out.append(res["stragglers"]["text"])
    return out


def named(res: dict) -> bool:
    """Did the demo name its culprit? Every survivor's error names K (hang,
    kill), or the straggler verdict is exactly K (slow)."""
    k, fault = res["demo"]["rank"], res["demo"]["fault"]
    if fault == "slow":
        return bool(res["stragglers"]) and res["stragglers"]["ranks"] == [k]
    return all(o.get("peer") == k for o in res["ranks"] if o["rank"] != k)
