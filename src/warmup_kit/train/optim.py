"""Adam, with its state in the open (book, Chapter 8: what a checkpoint
must hold).

Kingma and Ba 2015, algorithm 1: per parameter a first moment ``m`` and a
second moment ``v`` (running averages of the gradient and of its square),
and one step counter ``t`` shared by all, which sets the bias correction
``1 - beta^t``. Resuming a run bit for bit needs all three: restart ``m``
and ``v`` at zero, or ``t`` at zero, and the next updates differ. The
update is written out in a fixed order of numpy operations, in place, so
that the same inputs give the same bits on every rank and after a resume.

The parameters may be whole arrays (a DDP replica) or shards (FSDP): Adam
works element by element, so a shard's state is the matching shard of the
whole state.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


class Adam:
    """Adam over a fixed list of arrays (Kingma and Ba 2015, algorithm 1).

    Args:
        shapes: the parameters' shapes (or the arrays themselves), in order.
        lr: step size (alpha).
        betas: decay of the first and second moment estimates.
        eps: added to the square root of the second moment.
        dtype: of the state (the parameters' dtype).
    """

    def __init__(self, shapes: Sequence, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 dtype=np.float64) -> None:
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        self.lr, self.b1, self.b2, self.eps = float(lr), b1, b2, eps
        shapes = [np.shape(s) if isinstance(s, np.ndarray) else tuple(s)
                  for s in shapes]
        self.m = [np.zeros(s, dtype) for s in shapes]
        self.v = [np.zeros(s, dtype) for s in shapes]
        self.t = 0

    def step(self, params: Sequence[np.ndarray],
             grads: Sequence[np.ndarray]) -> None:
        """One update of every parameter, in place."""
        if len(params) != len(self.m) or len(grads) != len(self.m):
            raise ValueError(f"Adam holds {len(self.m)} arrays, got "
                             f"{len(params)} parameters and {len(grads)} "
                             "gradients")
        self.t += 1
        c1 = 1.0 - self.b1 ** self.t
        c2 = 1.0 - self.b2 ** self.t
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * (g * g)
            denom = np.sqrt(v / c2)
            denom += self.eps
            p -= self.lr * (m / c1) / denom

    # ------------------------------------------------------------- state
    def state_meta(self) -> dict:
        """The scalar state (JSON-able): the step counter and settings."""
        return {"t": self.t, "lr": self.lr, "betas": [self.b1, self.b2],
                "eps": self.eps}

    def load_meta(self, meta: dict) -> None:
        """Restore :meth:`state_meta`; settings must match."""
        mine = self.state_meta()
        for k in ("lr", "betas", "eps"):
            if list(np.atleast_1d(meta[k])) != list(np.atleast_1d(mine[k])):
                raise ValueError(f"Adam {k} was {meta[k]} in the checkpoint,"
                                 f" {mine[k]} here")
        self.t = int(meta["t"])
