"""DDP's gradient buckets (Li et al. 2020, "PyTorch Distributed", 3.2.3).

Parameters are grouped into buckets in reverse order of registration, which
is roughly the order the backward pass produces their gradients, by the rule
of PyTorch's Reducer (``compute_bucket_assignment_by_size`` in
``torch/csrc/distributed/c10d/reducer.cpp``): a parameter is *added* to the
open bucket, and the bucket is closed once it holds at least its cap, so a
bucket can end past the cap by its last parameter. The first bucket may have
a cap of its own: PyTorch gives it 1 MiB (``_DEFAULT_FIRST_BUCKET_BYTES``)
when ``bucket_cap_mb`` is left at its default, and the cap otherwise.

Here the gradients are always views of one flat buffer (what PyTorch does
only with ``gradient_as_bucket_view=True``; by default it copies each
gradient into its bucket), so a bucket is one contiguous slice and its
all-reduce needs no copy. PyTorch's default cap is 25 MiB, about a quarter
of the ResNet-50 it was tuned on; :data:`DEFAULT_BUCKET_BYTES` keeps that
ratio for the toy model of :mod:`warmup_kit.train.run`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

#: a quarter of the chapter's 8 x 512 x 512 float64 model (16 MiB)
DEFAULT_BUCKET_BYTES = 4 << 20


def assign_buckets(nbytes: Sequence[int], bucket_bytes: int,
                   first_bucket_bytes: int | None = None
                   ) -> list[list[int]]:
    """Parameter indices per bucket, in reverse order of ``nbytes``.

    PyTorch's rule: each parameter joins the open bucket, which closes as
    soon as it holds ``bucket_bytes`` or more (the first bucket:
    ``first_bucket_bytes``, default ``bucket_bytes``). Every bucket but the
    last reaches its cap; none is still under it without its last
    parameter. Every parameter lands in exactly one bucket.
    """
    first = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    for name, v in (("bucket_bytes", bucket_bytes),
                    ("first_bucket_bytes", first)):
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
    buckets: list[list[int]] = []
    open_: list[int] = []
    size = 0
    for i in reversed(range(len(nbytes))):
        open_.append(i)
        size += nbytes[i]
        if size >= (first if not buckets else bucket_bytes):
            buckets.append(open_)
            open_, size = [], 0
    if open_:
        buckets.append(open_)
    return buckets


class Buckets:
    """One flat gradient buffer cut into buckets.

    Args:
        shapes: the parameters' shapes, in forward order.
        bucket_bytes: the cap of a bucket.
        first_bucket_bytes: the first bucket's cap (None: ``bucket_bytes``).
        flat: the buffer (``comm.empty(n)`` so that shared memory moves it
            with no copy); None allocates one.

    Attributes:
        members: parameter indices of each bucket (reverse order).
        grads: one view of ``flat`` per parameter (forward order).
        slices: each bucket's part of ``flat``.
        bucket_of: the bucket of each parameter.
    """

    def __init__(self, shapes: Sequence[tuple[int, ...]], bucket_bytes: int,
                 flat: np.ndarray | None = None, dtype=np.float64,
                 first_bucket_bytes: int | None = None) -> None:
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        itemsize = np.dtype(dtype).itemsize
        self.members = assign_buckets([n * itemsize for n in sizes],
                                      bucket_bytes, first_bucket_bytes)
        total = sum(sizes)
        if flat is None:
            flat = np.empty(total, dtype)
        if flat.size < total or flat.dtype != np.dtype(dtype):
            raise ValueError(f"flat buffer needs {total} {np.dtype(dtype)}")
        self.flat = flat[:total]
        self.grads: list = [None] * len(shapes)
        self.slices: list[np.ndarray] = []
        self.bucket_of = [0] * len(shapes)
        off = 0
        for k, members in enumerate(self.members):
            start = off
            for i in members:
                view = self.flat[off:off + sizes[i]]
                self.grads[i] = view.reshape(shapes[i])
                self.bucket_of[i] = k
                off += sizes[i]
            self.slices.append(self.flat[start:off])
        self._pending = [len(m) for m in self.members]

    def __len__(self) -> int:
        return len(self.members)

    @property
    def nbytes(self) -> list[int]:
        """Bytes of each bucket."""
        return [s.nbytes for s in self.slices]

    def reset(self) -> None:
        """Start a new step: no gradient is ready."""
        self._pending = [len(m) for m in self.members]

    def mark_ready(self, i: int) -> int | None:
        """Parameter ``i``'s gradient is written; the bucket that this
        completes, if any."""
        k = self.bucket_of[i]
        self._pending[k] -= 1
        if self._pending[k] < 0:
            raise RuntimeError(f"parameter {i} marked ready twice")
        return k if self._pending[k] == 0 else None
