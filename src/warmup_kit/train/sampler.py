"""A finite data set read in shuffled epochs, with input noise: the data
order and random state a resumed run must pick up exactly (Chapter 8).

:func:`dataset` is a fixed set of samples (a random teacher network's
outputs, as in :mod:`warmup_kit.train.data`). :class:`Sampler` draws a
fresh permutation of it at the start of every epoch from one
:class:`numpy.random.Generator`, serves global batches in that order, and
adds Gaussian noise to each batch's inputs from the same generator (data
augmentation's stand-in), so the generator's state moves at every step.
Every rank runs the same sampler and keeps its own shard of each global
batch (:func:`warmup_kit.train.data.shard`), as PyTorch's
``DistributedSampler`` does with a shared seed.

:meth:`Sampler.state` is everything needed to continue the same sequence
elsewhere: the generator's state at the start of the current epoch (which
redraws the epoch's order) and its state now, the epoch and the position
in it. A resumed run that restores it sees the
same batches and the same noise as the run that never stopped.
"""
from __future__ import annotations

import copy

import numpy as np


def dataset(samples: int, d_in: int, d_out: int, seed: int = 1234,
            dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` inputs ``x ~ N(0, 1)`` and targets ``tanh(x A)``."""
    rng = np.random.default_rng([seed, 7])
    teacher = rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)
    x = rng.standard_normal((samples, d_in))
    return x.astype(dtype), np.tanh(x @ teacher).astype(dtype)


class Sampler:
    """Shuffled global batches of a data set, with input noise.

    Args:
        x, t: the data set (rows are samples).
        batch: samples per global batch (need not divide the data set: an
            epoch ends where fewer than ``batch`` samples are left).
        seed: of the generator behind the order and the noise.
        noise: standard deviation of the noise added to each input.
    """

    def __init__(self, x: np.ndarray, t: np.ndarray, batch: int,
                 seed: int = 0, noise: float = 0.1) -> None:
        if len(x) != len(t):
            raise ValueError(f"{len(x)} inputs but {len(t)} targets")
        if not 1 <= batch <= len(x):
            raise ValueError(f"batch must be in 1..{len(x)}, got {batch}")
        self.x, self.t, self.batch, self.noise = x, t, int(batch), noise
        self.rng = np.random.default_rng(seed)
        self.epoch = -1
        self._start_epoch()

    def _start_epoch(self) -> None:
        self._epoch_state = copy.deepcopy(self.rng.bit_generator.state)
        self.order = self.rng.permutation(len(self.x))
        self.epoch += 1
        self.pos = 0

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """The next global batch ``(x + noise, t)``."""
        if self.pos + self.batch > len(self.x):
            self._start_epoch()
        idx = self.order[self.pos:self.pos + self.batch]
        self.pos += self.batch
        x = self.x[idx] + self.noise * self.rng.standard_normal(
            (self.batch, self.x.shape[1]))
        return x.astype(self.x.dtype), self.t[idx]

    def state(self) -> dict:
        """JSON-able: the generator at the start of this epoch (it redraws
        the epoch's order) and now (the noise to come), the epoch and the
        position in it."""
        return {"epoch_start": copy.deepcopy(self._epoch_state),
                "now": copy.deepcopy(self.rng.bit_generator.state),
                "epoch": self.epoch, "pos": self.pos}

    def load_state(self, state: dict) -> None:
        """Continue exactly where :meth:`state` was taken."""
        self.rng.bit_generator.state = copy.deepcopy(state["epoch_start"])
        self.epoch = int(state["epoch"]) - 1
        self._start_epoch()
        self.rng.bit_generator.state = copy.deepcopy(state["now"])
        self.pos = int(state["pos"])
