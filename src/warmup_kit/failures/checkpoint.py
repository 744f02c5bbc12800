"""Asynchronous, sharded, atomic checkpoints (book, Chapter 8).

What PyTorch's Distributed Checkpoint does with ``async_save`` (and
CheckFreq, Mohan et al. 2021, before it), in two phases:

1. **Snapshot** (on the training thread, the only pause training sees):
   copy this rank's part of the state into memory the training step will
   not touch. On a GPU this is the device-to-host copy into pinned memory.
2. **Persist** (on a writer thread, while training goes on): write the
   shard and its record atomically (:mod:`warmup_kit.failures.files`);
   rank 0's writer then waits for every rank's record of this save and
   commits the checkpoint by writing the manifest last.

Ranks agree through the storage, not through the communicator: a rank's
record appears only once its shard is durable, and the manifest only once
every record is in. A rank that dies mid-write leaves no record, so rank
0 gives up on that save after ``commit_timeout_s`` and the checkpoint
stays incomplete, never loaded; the previous one is untouched. At most one
save is in flight: a new save waits for the previous one (that wait is the
``stall_s`` the history records, zero when the writer keeps up).

Every file a job writes names its writer nonce, and rank 0 commits only
records of its own writer: a second job writing into the same directories
(launched twice with one token, or a zombie attempt) cannot get a shard
into this job's checkpoint. After each commit rank 0 removes what is
dead: complete checkpoints beyond the newest ``keep``, and incomplete ones
(never committed) of earlier steps than the one just committed, or of the
same step by another attempt; corrupt ones (committed, then damaged) stay
for inspection, never loaded.
"""
from __future__ import annotations

import json
import queue
import shutil
import threading
import time
from pathlib import Path
from typing import Mapping

import numpy as np

from warmup_kit.failures import inject
from warmup_kit.failures.files import (
    is_writer, new_writer, record_name, step_dir, write_manifest,
    write_shard)
from warmup_kit.failures.verify import candidates, check


class Checkpointer:
    """One rank's side of asynchronous sharded checkpointing.

    Args:
        root: the directory that holds every checkpoint of the run.
        rank, world: this rank and the number of ranks saving.
        token: the same string on every rank of this attempt (hex).
        writer: this job's writer nonce (hex), the same on its ranks:
            rank 0 makes one (:func:`~warmup_kit.failures.files.new_writer`)
            and broadcasts it. Required when ``world > 1``; a one-rank
            writer makes its own when it is left out.
        keep: complete checkpoints rank 0 keeps (older ones are removed).
        commit_timeout_s: how long rank 0 waits for the other ranks'
            records before giving up on a save.
        durable: fsync files and directories (off only to measure what the
            disk's flush costs).

    Attributes:
        history: one dict per save: ``step``, ``stall_s`` (waiting for the
            previous save), ``snapshot_s`` (copying), ``write_s`` (on the
            writer thread), ``steps_during`` (training steps completed
            between the snapshot and the end of the write), ``committed``
            (rank 0: manifest written).
    """

    def __init__(self, root: Path, rank: int, world: int, token: str, *,
                 writer: str | None = None, keep: int = 2,
                 commit_timeout_s: float = 60.0,
                 durable: bool = True) -> None:
        if writer is None:
            if world > 1:
                raise ValueError(
                    f"rank {rank} of {world}: pass writer=, the nonce the "
                    "ranks agreed (rank 0's new_writer(), broadcast)")
            writer = new_writer()
        if not is_writer(writer):
            raise ValueError(f"writer must be lower-case hex, got "
                             f"{writer!r}")
        self.root, self.rank, self.world = Path(root), rank, world
        self.token, self.writer, self.keep = token, writer, keep
        self.commit_timeout_s, self.durable = commit_timeout_s, durable
        self.root.mkdir(parents=True, exist_ok=True)
        self.history: list[dict] = []
        self.steps_done = 0            # the training loop counts here
        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._idle = threading.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"ckpt-writer-{rank}")
        self._thread.start()

    # ---------------------------------------------------- training thread
    def save(self, step: int,
             arrays: Mapping[str, tuple[np.ndarray, int, int]],
             meta: dict) -> dict:
        """Snapshot this rank's state and hand it to the writer.

        Args:
            step: steps completed (the resume point).
            arrays: name -> ``(local 1-D array, global start, total)``.
            meta: JSON-able scalar state, the same on every rank.

        Returns:
            This save's history entry (its write fields fill in later).
        """
        t0 = time.perf_counter()
        self.wait()                                    # one in flight
        t1 = time.perf_counter()
        snap = {k: (np.array(a, copy=True).reshape(-1), int(s), int(n))
                for k, (a, s, n) in arrays.items()}
        meta = json.loads(json.dumps(meta))            # a deep copy
        t2 = time.perf_counter()
        entry = {"step": step, "stall_s": t1 - t0, "snapshot_s": t2 - t1,
                 "write_s": None, "steps_during": None, "committed": False,
                 "bytes": int(sum(a.nbytes for a, _, _ in snap.values()))}
        self.history.append(entry)
        self._idle.clear()
        self._jobs.put((step, snap, meta, entry, self.steps_done))
        return entry

    def wait(self, timeout: float | None = None) -> None:
        """Block until the writer is idle; re-raise its error."""
        if not self._idle.wait(timeout):
            raise TimeoutError(f"rank {self.rank}: checkpoint writer still "
                               f"busy after {timeout}s")
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def close(self, timeout: float | None = None) -> None:
        """Finish the save in flight and stop the writer."""
        try:
            self.wait(timeout)
        finally:
            self._jobs.put(None)
            self._thread.join(timeout)

    # ------------------------------------------------------ writer thread
    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            step, snap, meta, entry, done0 = job
            try:
                self._persist(step, snap, meta, entry, done0)
            except BaseException as exc:  # noqa: BLE001 - re-raised in wait
                self._error = exc
            finally:
                self._idle.set()

    def _persist(self, step: int, snap: dict, meta: dict, entry: dict,
                 done0: int) -> None:
        t0 = time.perf_counter()
        d = step_dir(self.root, step, self.token)
        d.mkdir(parents=True, exist_ok=True)
        inject.point("ckpt.begin", rank=self.rank, step=step)
        record = write_shard(
            d, self.rank, self.world, snap, meta, writer=self.writer,
            durable=self.durable,
            hook=lambda n: inject.point("ckpt.write", rank=self.rank,
                                        step=step, bytes=n))
        inject.point("ckpt.shard_written", rank=self.rank, step=step)
        if self.rank == 0:
            records = self._gather_records(d, record)
            inject.point("ckpt.before_manifest", rank=self.rank, step=step)
            write_manifest(d, step, self.world, self.token, records, meta,
                           durable=self.durable)
            entry["committed"] = True
            inject.point("ckpt.committed", rank=self.rank, step=step)
            self._retire(d, step)
        entry["write_s"] = time.perf_counter() - t0
        entry["steps_during"] = self.steps_done - done0

    def _gather_records(self, d: Path, mine: dict) -> list[dict]:
        """Rank 0: every rank's record of this save (of this writer's:
        records another job left under the same names are never read), or
        TimeoutError."""
        deadline = time.monotonic() + self.commit_timeout_s
        records = {0: mine}
        while len(records) < self.world:
            for r in range(1, self.world):
                p = d / record_name(r, self.writer)
                if r not in records and p.exists():
                    records[r] = json.loads(p.read_bytes())
            if len(records) == self.world:
                break
            if time.monotonic() > deadline:
                missing = sorted(set(range(self.world)) - set(records))
                others = sorted({p.name.rsplit("-", 1)[1][:-5] for p in
                                 d.glob("shard-?????-*.json")}
                                - {self.writer})
                also = (f"; records of other writers {others} are here: "
                        "is a second job writing to this directory?"
                        if others else "")
                raise TimeoutError(
                    f"checkpoint of step {d.name}: no shard from ranks "
                    f"{missing} after {self.commit_timeout_s}s; left "
                    f"incomplete (never loaded){also}")
            time.sleep(0.005)
        return [records[r] for r in range(self.world)]

    def _retire(self, committed: Path, step: int) -> None:
        """Rank 0, after committing ``committed`` (of step ``step``):
        remove complete checkpoints beyond the newest ``keep`` (each
        verified first: a corrupt one must not count towards the kept
        ones), and incomplete ones that no save of this job will finish:
        of earlier steps, or of this step by another attempt (a later
        step's may still be in flight). Corrupt ones stay."""
        complete = 0
        for s, d in candidates(self.root):
            found, _ = check(s, d)
            if found.complete:
                complete += 1
                dead = complete > self.keep
            else:
                dead = not found.committed and (
                    s < step or (s == step and d != committed))
            if dead:
                shutil.rmtree(d, ignore_errors=True)
