"""Lab 01's failure demo under ``mpirun`` (Chapter 8): each rank prints its
own outcome as it happens, since the job may not live long enough to
gather them. A hang ends in ``MPI_Abort`` from the watchdog; a kill in the
launcher tearing the whole job down (what ``mpiexec`` does when a rank
dies); a timeout in each survivor naming the culprit (refined from the
progress board), then the abort at exit that
:mod:`warmup_kit.comm.mpi` arranges.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from warmup_kit.comm.mpirun import release_segment_names
from warmup_kit.failures import inject
from warmup_kit.failures.board import Board
from warmup_kit.failures.lab import Demo, finish, rank_line, rank_main


def run_mpi_rank(demo: Demo, as_json: bool = False) -> int:
    """This process's part of the demo under ``mpirun``; exit status 0 if
    this rank completed."""
    from warmup_kit.comm.mpi import MPIComm
    comm = MPIComm()                      # COMM_WORLD, duplicated
    world = comm.comm                     # its mpi4py communicator
    if not 0 <= demo.rank < world.Get_size():
        raise ValueError(f"--fail-rank {demo.rank} is not a rank of "
                         f"{world.Get_size()}")
    path = None
    if world.Get_rank() == 0:
        fd, path = tempfile.mkstemp(prefix="warmup-board-")
        os.close(fd)
        Board(path, world.Get_size()).close()
    path = world.bcast(path, root=0)
    board_ready = Board(path, world.Get_size())   # mapped: the name may go
    world.Barrier()
    if world.Get_rank() == 0:
        os.unlink(path)
    # the demo ends in MPI_Abort or a killed rank, never at MPI_Finalize
    # (where MPICH removes its /dev/shm segment): every rank is past
    # MPI_Init now, so the segment's name can go (its memory stays mapped)
    release_segment_names()

    def abort(rep, by_me: bool) -> None:
        if by_me:
            text = rep.text if rep else ("a hang, not diagnosed (the "
                                         "watchdog failed: see stderr)")
            _emit({"watchdog": text}, as_json,
                  f"watchdog: {text}; aborting the MPI job")
        else:
            time.sleep(1.0)        # let the announcing rank print first
        world.Abort(3)

    # the name is gone once rank 0 unlinks it; this descriptor keeps the
    # file, and /proc/self/fd/N opens it again (Linux)
    def show(out: dict, board: Board) -> None:
        # print, then give the other survivors a moment to print theirs:
        # the first rank to exit after a timeout aborts the whole job
        _emit(out, as_json, rank_line(out))
        board.mark_reported()
        if not out["ok"]:
            others = set(range(world.Get_size())) - {demo.rank}
            deadline = time.monotonic() + 3.0
            while not others <= board.reported() and \
                    time.monotonic() < deadline:
                time.sleep(0.01)

    if demo.fault == "kill" and world.Get_rank() == demo.rank:
        inject.arm("lab.step", lambda **kw: _emit(
            {"rank": demo.rank, "killing_itself_at_step": demo.fail_step},
            as_json, f"rank {demo.rank}: SIGKILL to itself at step "
            f"{demo.fail_step}"), step=demo.fail_step)
    out = rank_main(comm, demo, f"/proc/self/fd/{board_ready.fileno()}",
                    abort, raise_failure=False, on_outcome=show)
    if not out["ok"]:
        return 1                  # a timed-out MPI job aborts at exit
    gathered = world.gather(out, root=0)
    if world.Get_rank() == 0:
        res = finish(demo, gathered, "mpi", 0.0)
        _emit(res["stragglers"], as_json, res["stragglers"]["text"])
    comm.close()
    board_ready.close()
    return 0


def _emit(obj, as_json: bool, text: str) -> None:
    """One whole line in one write (ranks share the launcher's stdout)."""
    sys.stdout.flush()
    os.write(1, ((json.dumps(obj) if as_json else text) + "\n").encode())
