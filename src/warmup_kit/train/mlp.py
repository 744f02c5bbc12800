"""A numpy multi-layer perceptron with its backward pass written out.

``y = W_L relu(... relu(x W_1 + b_1) ...) + b_L``, loss
``0.5 * mean over the batch of |y - t|^2``. Parameters are kept in
forward order ``[W_1, b_1, W_2, b_2, ...]``; :meth:`MLP.backward` walks the
layers in reverse and calls ``on_ready(i)`` as soon as parameter ``i``'s
gradient is written: the hook DDP's Reducer hangs on autograd (Li et al.
2020, section 3.2.3).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np


class MLP:
    """Parameters and the math of one MLP (no optimizer state).

    Args:
        widths: layer widths, input first: ``[d_in, h, ..., d_out]``.
        seed: the initial weights (He initialisation) come from it.
        dtype: float64 by default (equality tests compare to 1e-12).
    """

    def __init__(self, widths: Sequence[int], seed: int = 0,
                 dtype=np.float64) -> None:
        if len(widths) < 2 or min(widths) < 1:
            raise ValueError(f"need at least two positive widths, got "
                             f"{list(widths)}")
        self.widths = [int(w) for w in widths]
        rng = np.random.default_rng(seed)
        self.params: list[np.ndarray] = []
        for d_in, d_out in zip(self.widths[:-1], self.widths[1:]):
            w = rng.standard_normal((d_in, d_out)) * np.sqrt(2.0 / d_in)
            self.params += [w.astype(dtype), np.zeros(d_out, dtype)]

    @property
    def layers(self) -> int:
        return len(self.widths) - 1

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [p.shape for p in self.params]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.params)

    def layer_params(self, layer: int) -> tuple[int, int]:
        """Indices of layer ``layer``'s weight and bias in :attr:`params`."""
        return 2 * layer, 2 * layer + 1

    # ------------------------------------------------------------ the math
    def forward_layer(self, layer: int, x: np.ndarray, w=None, b=None
                      ) -> np.ndarray:
        """One layer: ``relu(x W + b)`` (no relu on the last layer)."""
        w = self.params[2 * layer] if w is None else w
        b = self.params[2 * layer + 1] if b is None else b
        z = x @ w
        z += b
        if layer < self.layers - 1:
            np.maximum(z, 0, out=z)
        return z

    def forward(self, x: np.ndarray) -> list[np.ndarray]:
        """Every layer's input and the output: ``acts[0] = x``,
        ``acts[-1] = y``."""
        acts = [x]
        for layer in range(self.layers):
            acts.append(self.forward_layer(layer, acts[-1]))
        return acts

    @staticmethod
    def loss(y: np.ndarray, t: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean squared error over the batch and its gradient wrt ``y``."""
        diff = y - t
        return 0.5 * float((diff * diff).sum()) / len(y), diff / len(y)

    def backward_layer(self, layer: int, acts: list[np.ndarray],
                       dy: np.ndarray, gw: np.ndarray, gb: np.ndarray,
                       w=None) -> np.ndarray | None:
        """Write layer ``layer``'s gradients into ``gw``, ``gb``; return the
        gradient wrt its input (None for the first layer)."""
        x, y = acts[layer], acts[layer + 1]
        if layer < self.layers - 1:                 # through the relu
            dy = dy * (y > 0)
        np.matmul(x.T, dy, out=gw)
        np.sum(dy, axis=0, out=gb)
        if layer == 0:
            return None
        w = self.params[2 * layer] if w is None else w
        return dy @ w.T

    def backward(self, acts: list[np.ndarray], dy: np.ndarray,
                 grads: Sequence[np.ndarray],
                 on_ready: Callable[[int], None] | None = None,
                 clock: list | None = None) -> None:
        """Backward through every layer, last first, into ``grads`` (arrays
        of the parameters' shapes, e.g. views of DDP's bucket buffers).

        Args:
            on_ready: called with a parameter's index once its gradient is
                written (the bias first, then the weight, per layer).
            clock: if a list, ``(layer, start_s, end_s)`` of each layer's
                compute is appended (``time.perf_counter``).
        """
        for layer in reversed(range(self.layers)):
            t0 = time.perf_counter()
            iw, ib = self.layer_params(layer)
            dy = self.backward_layer(layer, acts, dy, grads[iw], grads[ib])
            if clock is not None:
                clock.append((layer, t0, time.perf_counter()))
            if on_ready is not None:
                on_ready(ib)
                on_ready(iw)

    def gradients(self, x: np.ndarray, t: np.ndarray
                  ) -> tuple[float, list[np.ndarray]]:
        """Loss and every parameter's gradient on one batch (the
        single-process reference)."""
        acts = self.forward(x)
        loss, dy = self.loss(acts[-1], t)
        grads = [np.empty_like(p) for p in self.params]
        self.backward(acts, dy, grads)
        return loss, grads

    def sgd(self, grads: Sequence[np.ndarray], lr: float) -> None:
        """Plain SGD in place: ``p -= lr * g``."""
        for p, g in zip(self.params, grads):
            p -= lr * g

    def copy(self) -> "MLP":
        other = MLP.__new__(MLP)
        other.widths = list(self.widths)
        other.params = [p.copy() for p in self.params]
        return other
