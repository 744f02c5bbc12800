"""Data-parallel training with DDP-style bucketed, overlapped all-reduce.

What PyTorch's ``DistributedDataParallel`` Reducer does (Li et al. 2020,
section 3.2): gradients land in bucket buffers as the backward pass writes
them; the moment a bucket's last gradient is written its all-reduce is
issued, non-blocking, on the communication stream, while backward goes on;
the optimizer waits for every bucket. With ``overlap=False`` the same
buckets are all-reduced after the backward pass (the baseline the overlap
is measured against). Each step is timed on both threads: the compute
thread's layers, and each bucket's collective on the stream (markers,
:mod:`warmup_kit.train.events`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from warmup_kit.collectives import allreduce, broadcast
from warmup_kit.comm.base import Comm
from warmup_kit.train.buckets import DEFAULT_BUCKET_BYTES, Buckets
from warmup_kit.train.events import record
from warmup_kit.train.mlp import MLP


@dataclass
class StepTimes:
    """One measured step, seconds from its start.

    Attributes:
        forward_s, backward_s: compute on the training thread.
        comm_s: sum of the buckets' collective times (on the stream).
        exposed_s: how long the optimizer waited for communication.
        optimizer_s: the SGD update.
        step_s: the whole step.
        layers: ``(layer, start_s, end_s)`` of each backward layer.
        buckets: ``(bucket, ready_s, start_s, end_s)`` of each all-reduce.
        backward_end: ``time.perf_counter()`` at the end of the backward
            pass (one clock for every process of the host, so that ranks can
            compare: :func:`warmup_kit.train.run.measure` takes the lag of
            the slowest rank from it).
    """

    forward_s: float
    backward_s: float
    comm_s: float
    exposed_s: float
    optimizer_s: float
    step_s: float
    loss: float = 0.0
    layers: list = field(default_factory=list)
    buckets: list = field(default_factory=list)
    backward_end: float = 0.0

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s

    def as_dict(self) -> dict:
        return {"forward_s": self.forward_s, "backward_s": self.backward_s,
                "compute_s": self.compute_s, "comm_s": self.comm_s,
                "exposed_s": self.exposed_s, "optimizer_s": self.optimizer_s,
                "step_s": self.step_s, "loss": self.loss,
                "layers": [list(x) for x in self.layers],
                "buckets": [list(x) for x in self.buckets]}


class DDP:
    """One rank of a data-parallel MLP.

    Args:
        model: this rank's replica (rank 0's parameters are broadcast to
            every rank at construction, as DDP does).
        comm: any communicator.
        bucket_bytes: the bucket cap.
        overlap: issue each bucket's all-reduce as soon as it is full
            (True) or all of them after the backward pass (False).
        algorithm: the all-reduce's algorithm.
        timeout: seconds for every collective and every wait.
        flat: the gradient buffer (default ``comm.empty``).
        optimizer: an optimizer with ``step(params, grads)``
            (:class:`~warmup_kit.train.optim.Adam`); None: plain SGD at the
            ``lr`` given to :meth:`step`.
        first_bucket_bytes: the first bucket's cap (None: ``bucket_bytes``;
            PyTorch's default is 1 MiB, see :mod:`~warmup_kit.train.buckets`).
    """

    def __init__(self, model: MLP, comm: Comm, *,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 overlap: bool = True, algorithm: str = "ring",
                 timeout: float = 60.0, flat: np.ndarray | None = None,
                 optimizer=None, first_bucket_bytes: int | None = None
                 ) -> None:
        self.model, self.comm = model, comm
        self.optimizer = optimizer
        self.overlap, self.algorithm = overlap, algorithm
        self.timeout = timeout
        dtype = model.params[0].dtype
        total = sum(p.size for p in model.params)
        if flat is None:
            flat = comm.empty(total, dtype)
        self.buckets = Buckets(model.shapes, bucket_bytes, flat, dtype,
                               first_bucket_bytes)
        for p in model.params:
            broadcast(p, comm, out=p, timeout=timeout)

    def _issue(self, k: int, pending: list) -> None:
        buf = self.buckets.slices[k]
        start = record(self.comm)
        work = allreduce(buf, self.comm, out=buf, op="avg",
                         algorithm=self.algorithm, timeout=self.timeout,
                         async_op=True)
        pending.append((k, start, work, record(self.comm)))

    def step(self, x: np.ndarray, t: np.ndarray, lr: float) -> StepTimes:
        """Forward, backward with bucketed all-reduce, SGD: one step on this
        rank's shard ``x``, ``t`` of the global batch."""
        m, b = self.model, self.buckets
        t0 = time.perf_counter()
        acts = m.forward(x)
        loss, dy = m.loss(acts[-1], t)
        t1 = time.perf_counter()
        b.reset()
        pending: list = []
        ready = [0.0] * len(b)

        def on_ready(i: int) -> None:
            k = b.mark_ready(i)
            if k is not None:
                ready[k] = time.perf_counter()
                if self.overlap:
                    self._issue(k, pending)
        clock: list = []
        m.backward(acts, dy, b.grads, on_ready, clock)
        t2 = time.perf_counter()
        if not self.overlap:
            for k in range(len(b)):
                self._issue(k, pending)
        spans = []
        for k, start, work, end in pending:
            work.wait(self.timeout)
            spans.append((k, ready[k], start.wait(self.timeout),
                          end.wait(self.timeout)))
        t3 = time.perf_counter()
        if self.optimizer is None:
            m.sgd(b.grads, lr)
        else:
            self.optimizer.step(m.params, b.grads)
        t4 = time.perf_counter()
        return StepTimes(
            forward_s=t1 - t0, backward_s=t2 - t1,
            comm_s=sum(e - s for _, _, s, e in spans), exposed_s=t3 - t2,
            optimizer_s=t4 - t3, step_s=t4 - t0, loss=loss,
            layers=[(layer, s - t0, e - t0) for layer, s, e in clock],
            buckets=[(k, r - t0, s - t0, e - t0) for k, r, s, e in spans],
            backward_end=t2)

    def gradients(self) -> list[np.ndarray]:
        """The last step's averaged gradients (copies, forward order)."""
        return [g.copy() for g in self.buckets.grads]
