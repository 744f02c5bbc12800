"""Grader for Chapter 8: a checkpoint interval, checked by the goodput
simulation (:func:`warmup_kit.failures.models.goodput.simulate`).

The reader's interval and the exact optimum are run on the same failure
times (common random numbers); the answer passes when its goodput is
within ``tolerance`` of the optimum's, plus twice the simulation's
standard error of the paired difference.
"""
from __future__ import annotations

import math

from warmup_kit.exercises.result import Result, failed, number, passed
from warmup_kit.failures.models.goodput import (
    Scenario, exact_optimum, simulate)


def check_checkpoint_interval(tau_s, *, mtbf_s: float, ckpt_s: float,
                              restart_s: float, work_s: float,
                              tolerance: float = 0.002, reps: int = 300,
                              seed: int = 0) -> Result:
    """Passes when checkpointing every ``tau_s`` seconds of work loses at
    most ``tolerance`` of goodput (0.002 = 0.2 points) against the best
    interval, beyond the simulation's error (Chapter 8, "Goodput at
    scale")."""
    tau = number("tau_s", tau_s)
    s = Scenario(mtbf_s=number("mtbf_s", mtbf_s),
                 ckpt_s=number("ckpt_s", ckpt_s),
                 restart_s=number("restart_s", restart_s, positive=False),
                 work_s=number("work_s", work_s))
    ex = "checkpoint interval"
    if tau > s.work_s:
        return failed(ex, "the interval is longer than the whole job",
                      "a checkpoint only helps if it is written before the "
                      "next failure, about every MTBF or more often")
    best = exact_optimum(s.ckpt_s, s.mtbf_s)
    r = simulate(s, [tau, best], reps=reps, seed=seed)
    diff = r.goodput[1] - r.goodput[0]
    err = float(diff.std(ddof=1) / math.sqrt(reps))
    loss = float(diff.mean())
    mine = float(r.mean[0])
    if loss <= tolerance + 2 * err:
        return passed(ex, f"every {tau / 60:.1f} min: goodput {mine:.3f}, "
                      f"within {tolerance:.1%} of the best interval "
                      f"(simulated, {reps} runs)")
    side = "often" if tau < best else "rarely"
    return failed(ex, f"every {tau / 60:.1f} min: goodput {mine:.3f}, "
                  f"{loss:.1%} below the best interval (simulated)",
                  f"you checkpoint too {side}: balance the time spent "
                  "writing checkpoints against the work a failure loses "
                  "(Young's rule uses the checkpoint cost and the MTBF)")
