"""A small real training job for Chapter 7 (overlap).

One idea per module:

* :mod:`~warmup_kit.train.mlp`: a numpy multi-layer perceptron, forward and
  backward written out, each layer's gradient handed over the moment it is
  ready;
* :mod:`~warmup_kit.train.data`: deterministic synthetic data (a fixed
  teacher network), cut into per-rank shards of one global batch;
* :mod:`~warmup_kit.train.buckets`: DDP's gradient buckets, in reverse order
  of the backward pass, as views of one flat buffer;
* :mod:`~warmup_kit.train.events`: stream markers (CUDA events' analogue):
  when the communication thread started and finished each collective;
* :mod:`~warmup_kit.train.ddp`: data-parallel training, one non-blocking
  all-reduce per bucket issued while backward goes on (overlap on or off);
* :mod:`~warmup_kit.train.fsdp`: ZeRO-3 / FSDP, parameters sharded,
  all-gathered before use with prefetch, gradients reduce-scattered;
* :mod:`~warmup_kit.train.timeline`: the model of one step (per-layer
  compute, bucket readiness, one communication channel);
* :mod:`~warmup_kit.train.run`: the measured runs the benchmark and the
  chapter store;
* :mod:`~warmup_kit.train.analysis`: those runs beside the timeline model
  (no ranks: what the plots and the benchmark's table read).

Nothing here imports mpi4py: any :class:`~warmup_kit.comm.Comm` will do.
"""
from warmup_kit.train.buckets import Buckets, assign_buckets
from warmup_kit.train.data import global_batch, shard
from warmup_kit.train.ddp import DDP, StepTimes
from warmup_kit.train.fsdp import FSDP
from warmup_kit.train.mlp import MLP
from warmup_kit.train.timeline import Span, Timeline, step_timeline

__all__ = ["Buckets", "DDP", "FSDP", "MLP", "Span", "StepTimes", "Timeline",
           "assign_buckets", "global_batch", "shard", "step_timeline"]
