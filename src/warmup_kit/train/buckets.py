"""DDP's gradient buckets (Li et al. 2020, "PyTorch Distributed", 3.2.3).

Parameters are grouped into buckets of about ``bucket_bytes``, in reverse
order of registration, which is roughly the order the backward pass produces
their gradients; the gradients are views of one flat buffer, so a bucket is
one contiguous slice and its all-reduce needs no copy. PyTorch's default is
25 MiB (``bucket_cap_mb``), about a quarter of the ResNet-50 it was tuned on;
:data:`DEFAULT_BUCKET_BYTES` keeps that ratio for the toy model of
:mod:`warmup_kit.train.run`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

#: a quarter of the chapter's 8 x 512 x 512 float64 model (16 MiB)
DEFAULT_BUCKET_BYTES = 4 << 20


def assign_buckets(nbytes: Sequence[int], bucket_bytes: int
                   ) -> list[list[int]]:
    """Parameter indices per bucket, in reverse order of ``nbytes``.

    A bucket is closed when the next parameter would take it past
    ``bucket_bytes``; a parameter larger than that gets a bucket of its own.
    Every parameter lands in exactly one bucket.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    buckets: list[list[int]] = []
    size = 0
    for i in reversed(range(len(nbytes))):
        if buckets and buckets[-1] and size + nbytes[i] > bucket_bytes:
            buckets.append([])
            size = 0
        if not buckets:
            buckets.append([])
        buckets[-1].append(i)
        size += nbytes[i]
    return buckets


class Buckets:
    """One flat gradient buffer cut into buckets.

    Args:
        shapes: the parameters' shapes, in forward order.
        bucket_bytes: the cap of a bucket.
        flat: the buffer (``comm.empty(n)`` so that shared memory moves it
            with no copy); None allocates one.

    Attributes:
        members: parameter indices of each bucket (reverse order).
        grads: one view of ``flat`` per parameter (forward order).
        slices: each bucket's part of ``flat``.
        bucket_of: the bucket of each parameter.
    """

    def __init__(self, shapes: Sequence[tuple[int, ...]], bucket_bytes: int,
                 flat: np.ndarray | None = None, dtype=np.float64) -> None:
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        itemsize = np.dtype(dtype).itemsize
        self.members = assign_buckets([n * itemsize for n in sizes],
                                      bucket_bytes)
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
