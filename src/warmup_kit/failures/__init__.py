"""Failure domains (book, Chapter 8): hangs that name their culprit,
stragglers, checkpoints that survive a crash, goodput at scale, blast
radius.

One idea per module:

* :mod:`~warmup_kit.failures.board`: each rank's progress (collective
  sequence numbers, step, heartbeat) where every rank can read it: the
  flight recorder and heartbeat in one table;
* :mod:`~warmup_kit.failures.watchdog`: the thread that turns a hang into
  an error naming the rank the others wait for;
* :mod:`~warmup_kit.failures.inject`: named fault points (kill, hang) in
  the real code paths;
* :mod:`~warmup_kit.failures.files` and :mod:`~warmup_kit.failures.verify`:
  a sharded checkpoint on disk, written atomically with checksums and a
  manifest last, and read back only if it verifies;
* :mod:`~warmup_kit.failures.schema`: every field of a manifest checked
  before it is read (a malformed one is a corrupt checkpoint);
* :mod:`~warmup_kit.failures.checkpoint`: asynchronous sharded saving
  (snapshot on the training thread, persist on a writer thread);
* :mod:`~warmup_kit.failures.job`: the Chapter 7 training job with its whole
  state (parameters, Adam, data order and random state, step) saved and
  restored, on the same or fewer ranks;
* :mod:`~warmup_kit.failures.restart`: one attempt per launch, and the agent
  that restarts failed attempts;
* :mod:`~warmup_kit.failures.lab`: Lab 01's ``--fail hang|kill|slow``;
* :mod:`~warmup_kit.failures.goodput_cli`: Chapter 8's table of simulated
  best checkpoint intervals beside Young's and Daly's, from the command
  line.

The models (:mod:`warmup_kit.failures.models`) import no transport and
nothing that runs on ranks:

* :mod:`~warmup_kit.failures.models.straggler`: the slow rank found from
  per-rank step times (median and MAD), and what it costs;
* :mod:`~warmup_kit.failures.models.goodput`: Young's and Daly's intervals
  and a Monte Carlo simulation of failures, checkpoints, restarts and
  spares;
* :mod:`~warmup_kit.failures.models.blast`: what one failed GPU, node or
  switch stalls under a given placement, and what recovery costs;
* :mod:`~warmup_kit.failures.models.published`: failure records of large
  training runs, as published.
"""
