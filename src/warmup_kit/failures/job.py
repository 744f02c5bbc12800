"""The Chapter 7 training job, made resumable (book, Chapter 8).

The numpy MLP of :mod:`warmup_kit.train`, trained data-parallel (DDP-style
buckets) or fully sharded (FSDP) with Adam, on shuffled epochs of a finite
data set with input noise. Its whole state is what a checkpoint must hold
for a resumed run to match one that never stopped, bit for bit:

* the parameters;
* the optimizer state: Adam's two moments per parameter, and its step
  counter (the bias correction depends on it);
* the data order and the random state: the sampler's generator (at the
  start of the epoch, which redraws the epoch's order, and now, which
  draws the noise to come) and the position in the epoch;
* the step counter of the loop.

Each rank saves its part (:mod:`warmup_kit.failures.checkpoint`). DDP's
replicas are identical, so rank r writes only the r-th of N contiguous
pieces of each flat array (as DCP deduplicates replicated tensors); FSDP
ranks write the shards they own, without FSDP's padding. Both are stored
as pieces of global arrays, so :meth:`Job.load` can cut them again for
another number of ranks: the elastic restart.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from warmup_kit.collectives import allreduce, broadcast
from warmup_kit.comm.base import Comm
from warmup_kit.failures.verify import (
    Manifest, NothingVerifies, read_array, resume_point)
from warmup_kit.train.data import shard
from warmup_kit.train.ddp import DDP
from warmup_kit.train.fsdp import FSDP
from warmup_kit.train.mlp import MLP
from warmup_kit.train.optim import Adam
from warmup_kit.train.sampler import Sampler, dataset

KINDS = ("ddp", "fsdp")


@dataclass(frozen=True)
class JobConfig:
    """A small job that checkpoints often (every field is part of what a
    resume must agree on, except the world size)."""

    kind: str = "ddp"                  # "ddp" or "fsdp"
    widths: tuple = (12, 20, 20, 20, 6)
    samples: int = 120                 # the data set; 5 batches an epoch
    global_batch: int = 24             # splits over 1, 2, 3, 4 ranks
    steps: int = 14
    every: int = 4                     # checkpoint interval, in steps
    lr: float = 0.01
    noise: float = 0.1
    seed: int = 0
    bucket_bytes: int = 1200
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got "
                             f"{self.kind!r}")
        if self.every < 1 or self.steps < 1:
            raise ValueError("steps and every must be >= 1")


def part(total: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous piece ``lo:hi`` of ``total`` elements
    (near-equal pieces, the larger ones first, as numpy.array_split)."""
    q, r = divmod(total, world)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (rank < r)


def flat_slice(arrays, lo: int, hi: int) -> np.ndarray:
    """Elements ``lo:hi`` of the arrays laid end to end (a copy)."""
    out, at, i = [], 0, 0
    for a in arrays:
        a = a.reshape(-1)
        s, e = max(lo, at), min(hi, at + a.size)
        if s < e:
            out.append(a[s - at:e - at])
        at += a.size
        i += 1
    return np.concatenate(out) if out else np.empty(0)


def unflatten_into(arrays, flat: np.ndarray) -> None:
    """Copy ``flat`` back into ``arrays`` (their shapes, in order)."""
    at = 0
    for a in arrays:
        a.reshape(-1)[:] = flat[at:at + a.size]
        at += a.size


def digest(a: np.ndarray) -> str:
    """SHA-256 of an array's bytes: equal digests, equal bits."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


class Job:
    """One rank of the resumable job."""

    def __init__(self, cfg: JobConfig, comm: Comm) -> None:
        self.cfg, self.comm = cfg, comm
        x, t = dataset(cfg.samples, cfg.widths[0], cfg.widths[-1],
                       seed=cfg.seed + 1234)
        self.sampler = Sampler(x, t, cfg.global_batch, seed=cfg.seed,
                               noise=cfg.noise)
        model = MLP(cfg.widths, seed=cfg.seed)
        if cfg.kind == "ddp":
            self.opt = Adam(model.shapes, lr=cfg.lr)
            self.engine = DDP(model, comm, bucket_bytes=cfg.bucket_bytes,
                              optimizer=self.opt, timeout=cfg.timeout)
        else:
            self.engine = FSDP(model, comm, timeout=cfg.timeout,
                               optimizer=lambda s: Adam(s, lr=cfg.lr))
            self.opt = self.engine.optimizer
        self.step_count = 0
        self.losses: list[float] = []

    def step(self) -> float:
        """One training step on this rank's shard of the next batch."""
        x, t = self.sampler.next_batch()
        r, n = self.comm.rank, self.comm.size
        out = self.engine.step(shard(x, r, n), shard(t, r, n), self.cfg.lr)
        loss = float(out if self.cfg.kind == "fsdp" else out.loss)
        self.step_count += 1
        self.losses.append(loss)
        return loss

    # ------------------------------------------------------------- state
    def _layer_sizes(self) -> list[int]:
        w = self.cfg.widths
        return [a * b + b for a, b in zip(w[:-1], w[1:])]

    def state(self) -> tuple[dict, dict]:
        """``(arrays, meta)`` for :meth:`Checkpointer.save`: this rank's
        pieces of the global arrays, and the scalar state."""
        r, n = self.comm.rank, self.comm.size
        arrays = {}
        if self.cfg.kind == "ddp":
            params = self.engine.model.params
            total = sum(p.size for p in params)
            lo, hi = part(total, r, n)
            for name, arrs in (("params", params), ("adam.m", self.opt.m),
                               ("adam.v", self.opt.v)):
                arrays[name] = (flat_slice(arrs, lo, hi), lo, total)
        else:
            for i, size in enumerate(self._layer_sizes()):
                k = self.engine.sizes[i][2] // n
                lo = min(r * k, size)
                hi = min((r + 1) * k, size)
                for name, a in ((f"layer{i}.params", self.engine.shards[i]),
                                (f"layer{i}.adam.m", self.opt.m[i]),
                                (f"layer{i}.adam.v", self.opt.v[i])):
                    arrays[name] = (a[:hi - lo], lo, size)
        meta = {"step": self.step_count, "adam": self.opt.state_meta(),
                "sampler": self.sampler.state(), "job": self._identity(),
                "world": n}
        return arrays, meta

    def _identity(self) -> dict:
        """What a resume must agree with (everything but the world)."""
        d = asdict(self.cfg)
        d.pop("timeout")
        d["widths"] = list(d["widths"])
        return d

    def load(self, m: Manifest) -> None:
        """Restore every part of the state from a verified checkpoint, for
        this run's number of ranks (which may differ from the saver's)."""
        meta = m.meta
        if meta["job"] != self._identity():
            diff = {k: (meta["job"].get(k), v) for k, v in
                    self._identity().items() if meta["job"].get(k) != v}
            raise ValueError(f"checkpoint of another job: {diff}")
        if self.cfg.kind == "ddp":
            unflatten_into(self.engine.model.params, read_array(m, "params"))
            unflatten_into(self.opt.m, read_array(m, "adam.m"))
            unflatten_into(self.opt.v, read_array(m, "adam.v"))
        else:
            r, n = self.comm.rank, self.comm.size
            for i, size in enumerate(self._layer_sizes()):
                k = self.engine.sizes[i][2] // n
                lo, hi = min(r * k, size), min((r + 1) * k, size)
                for name, a in ((f"layer{i}.params", self.engine.shards[i]),
                                (f"layer{i}.adam.m", self.opt.m[i]),
                                (f"layer{i}.adam.v", self.opt.v[i])):
                    a[:] = 0.0
                    a[:hi - lo] = read_array(m, name, lo, hi)
        self.opt.load_meta(meta["adam"])
        self.sampler.load_state(meta["sampler"])
        self.step_count = int(meta["step"])

    def resume(self, root: Path, *, fresh: bool = False
               ) -> tuple[int, list]:
        """Load the newest complete checkpoint under ``root``, if any.

        Every rank picks on its own and the ranks then check that they
        picked the same one (a collective), so a file that changed between
        two ranks' checks cannot split the job.

        Args:
            fresh: start from step 0 even if every committed checkpoint
                under ``root`` is corrupt (otherwise that refuses).

        Returns:
            ``(step resumed from (0: none), [Found skipped: newer but
            incomplete or corrupt checkpoints])``.

        Raises:
            NothingVerifies: on every rank, when checkpoints were committed
                and none verifies (and not ``fresh``).
        """
        refused = None
        try:
            m, skipped = resume_point(root, fresh=fresh)
        except NothingVerifies as exc:
            m, skipped, refused = None, [], exc
        # -2: refuse, -1: start from 0, else the step; the ranks agree
        mine = np.array([-2 if refused else -1 if m is None else m.step],
                        np.int64)
        lo = allreduce(mine, self.comm, op="min", timeout=self.cfg.timeout)
        hi = allreduce(mine, self.comm, op="max", timeout=self.cfg.timeout)
        if lo[0] != hi[0]:
            raise RuntimeError(f"rank {self.comm.rank}: ranks chose "
                               f"different checkpoints (steps {lo[0]} to "
                               f"{hi[0]})")
        if refused is not None:
            raise refused
        if m is not None:
            self.load(m)
        return self.step_count, skipped

    def full_params(self) -> np.ndarray:
        """Every parameter, flat (for FSDP a collective)."""
        params = (self.engine.model.params if self.cfg.kind == "ddp"
                  else self.engine.full_params())
        return np.concatenate([p.reshape(-1) for p in params])


def agree_token(comm: Comm, timeout: float = 30.0) -> str:
    """A random hex token, the same on every rank (rank 0's). Each call
    draws another: an attempt's token names its checkpoint directories,
    another call its writer nonce (:class:`Checkpointer`'s ``writer``)."""
    t = np.frombuffer(np.random.default_rng().bytes(8), np.uint64).copy()
    broadcast(t, comm, out=t, timeout=timeout)
    return f"{int(t[0]):016x}"
