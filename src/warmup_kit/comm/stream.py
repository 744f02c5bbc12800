"""Non-blocking operations: a communication thread stands in for a stream.

On a GPU, NCCL enqueues a collective on a CUDA stream and returns; the
framework later waits on an event. Here each communicator gets, on first
use, one worker thread that runs the operations submitted to it in the order
they were issued; ``submit`` returns a :class:`Work` handle at once (as
``torch.distributed``'s ``async_op=True`` does). numpy's arithmetic and the
transports' waits release the GIL, so the caller's computation and the
communication really run side by side.

An operation that fails (a timeout naming a peer, a lost peer) fails its
handle, and every operation queued after it on the same communicator fails
too, naming the first error: a broken communicator is not reused.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable

from warmup_kit.comm.deadlines import check_timeout, deadline_after


class Work:
    """The handle of a non-blocking operation."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._done = threading.Event()
        self._result: Any = None
        self._exc: BaseException | None = None

    def is_completed(self) -> bool:
        """True once the operation has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None):
        """Block until the operation finishes; return its result.

        Raises:
            the operation's own exception (e.g.
            :class:`~warmup_kit.CollectiveTimeout` naming the culprit);
            TimeoutError: not finished within ``timeout`` seconds (the
            operation goes on; its own ``timeout`` is what stops it).
        """
        if not self._done.wait(check_timeout(timeout)):
            raise TimeoutError(f"{self.what} not completed within "
                               f"{timeout} s")
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self) -> BaseException | None:
        """The operation's exception once finished, else None."""
        return self._exc if self._done.is_set() else None

    def _finish(self, result=None, exc: BaseException | None = None) -> None:
        self._result, self._exc = result, exc
        self._done.set()


class Stream:
    """Runs submitted operations one at a time, in issue order, on a thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._cv = threading.Condition()
        self._failed: BaseException | None = None
        self._thread: threading.Thread | None = None

    def idle(self) -> bool:
        """True when nothing is queued or running."""
        return self._pending == 0

    def submit(self, fn: Callable[[float | None], Any], timeout, what: str
               ) -> Work:
        """Queue ``fn(deadline)``; its deadline is ``timeout`` seconds from
        the moment it starts running."""
        work = Work(what)
        with self._cv:
            self._pending += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name,
                                            daemon=True)
            self._thread.start()
        self._q.put((fn, timeout, work))
        return work

    def synchronize(self) -> None:
        """Wait until every submitted operation has finished."""
        with self._cv:
            self._cv.wait_for(lambda: self._pending == 0)

    def close(self) -> None:
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, timeout, work = item
            try:
                if self._failed is not None:
                    raise RuntimeError(f"{work.what} not run: an earlier "
                                       "operation on this communicator "
                                       f"failed ({self._failed!r})")
                work._finish(fn(deadline_after(timeout)))
            except BaseException as exc:  # noqa: BLE001 - to the waiter
                if self._failed is None:
                    self._failed = exc
                work._finish(exc=exc)
            finally:
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()
