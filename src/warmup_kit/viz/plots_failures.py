"""Pictures of failures (book, Chapter 8): the goodput widget's view, the
simulated goodput curve against Young's and Daly's intervals, and where a
straggler's step goes.

The widget's knobs are the chapter's: the checkpoint interval, the MTBF of
one GPU and the cluster size. Its curve is the expected goodput of Daly's
model (:func:`warmup_kit.failures.goodput.expected_wall`), which the
chapter first checks against the Monte Carlo simulation.
"""
from __future__ import annotations

import math

import numpy as np

from warmup_kit.failures.goodput import HOUR, daly, young
from warmup_kit.viz.widgets import Bars, Figure, Line, Panel, Points

YEAR_H = 365.25 * 24
GRID_MIN = np.geomspace(0.5, 480, 80)          # intervals drawn, minutes


def budget(tau_s: float, ckpt_s: float, mtbf_s: float, restart_s: float
           ) -> dict:
    """Where the time goes per hour of work at interval ``tau_s``, in
    Daly's model (long runs): per segment of ``s = tau + delta``,
    ``M (e^(s/M) - 1)`` in attempts (the segment plus the work lost to
    failures in it) and ``(e^(s/M) - 1) M (e^(R/M) - 1)`` in restarts."""
    M, s = mtbf_s, tau_s + ckpt_s
    tries = M * math.expm1(s / M)
    restarts = math.expm1(s / M) * M * math.expm1(restart_s / M)
    per = HOUR / tau_s                            # segments per work hour
    return {"work": HOUR, "checkpoints": per * ckpt_s,
            "lost work": per * (tries - s), "restarts": per * restarts}


def goodput_at(tau_s, ckpt_s: float, mtbf_s: float, restart_s: float):
    """Expected goodput (work over run time) of long runs; ``tau_s`` may be
    an array."""
    tau = np.asarray(tau_s, dtype=float)
    M = mtbf_s
    wall = M * math.exp(restart_s / M) * np.expm1((tau + ckpt_s) / M) / tau
    return 1.0 / wall


def goodput_view(interval_min: float, gpu_mtbf_years: float, gpus: int,
                 ckpt_s: float = 33.0, restart_s: float = 600.0) -> Figure:
    """The widget's frame: goodput against the checkpoint interval (left)
    and where an hour of work's run time goes at the chosen interval."""
    M = gpu_mtbf_years * YEAR_H * HOUR / gpus
    g = goodput_at(GRID_MIN * 60, ckpt_s, M, restart_s)
    y_, d_ = young(ckpt_s, M) / 60, daly(ckpt_s, M) / 60
    here = float(goodput_at(interval_min * 60, ckpt_s, M, restart_s))
    best = float(goodput_at(d_ * 60, ckpt_s, M, restart_s))
    left = Panel([
        Line(list(GRID_MIN), list(100 * g), name="expected goodput"),
        Line([y_, y_], [0, 100], name=f"Young {y_:.1f} min", dash=True),
        Line([d_, d_], [0, 100], name=f"Daly {d_:.1f} min", dash=True),
        Points([interval_min], [100 * here], [f"{100 * here:.1f}%"],
               name="this interval")],
        title=f"{gpus:,} GPUs, job MTBF {M / 60:.0f} min: best "
              f"{100 * best:.1f}%",
        xlabel="checkpoint interval (min of work)", ylabel="goodput (%)",
        logx=True, ylim=(0, 100))
    b = budget(interval_min * 60, ckpt_s, M, restart_s)
    right = Panel([Bars(list(b), [v / 60 for v in b.values()],
                        name="minutes")],
                  title=f"per hour of work at {interval_min:g} min",
                  ylabel="minutes of run time")
    return Figure([left, right])


def sim_panel(result, exact_s: float, young_s: float, daly_s: float,
              sim_s: float, title: str, analytic=None) -> Panel:
    """Simulated goodput (mean and two standard errors) against the
    interval, with the analytic curve and the three optima marked."""
    taus = result.taus / 60
    m, e = 100 * result.mean, 200 * result.stderr
    lo, hi = float((m - e).min()), float((m + e).max())
    pad = max(hi - lo, 0.1) * 0.15
    lo, hi = lo - pad, hi + pad
    traces = [Line(list(taus), list(m), name="simulated (mean)",
                   markers=True),
              Line(list(taus), list(m + e), name="+2 standard errors",
                   dash=True, color="#9ecae1"),
              Line(list(taus), list(m - e), name="-2 standard errors",
                   dash=True, color="#9ecae1")]
    if analytic is not None:
        traces.append(Line(list(taus), list(100 * analytic),
                           name="Daly's model (expected)", color="#2ca02c"))
    for x, name, color in ((young_s, "Young", "#ff7f0e"),
                           (daly_s, "Daly", "#d62728"),
                           (sim_s, "simulated best", "#1f77b4")):
        traces.append(Line([x / 60, x / 60], [lo, hi],
                           name=f"{name} {x / 60:.1f} min", dash=True,
                           color=color))
    return Panel(traces, title=title, xlabel="checkpoint interval (min)",
                 ylabel="goodput (%)", logx=True, ylim=(lo, hi))


def straggler_panel(ranks: list[dict], title: str) -> Panel:
    """Median compute and communication time per step of each rank: the
    straggler computes longest and waits least."""
    names = [f"rank {o['rank']}" for o in ranks]
    comp = [1e3 * float(np.median(o["compute_s"])) for o in ranks]
    comm = [1e3 * float(np.median(o["comm_s"])) for o in ranks]
    return Panel([Bars(names, comp, name="compute (median ms)"),
                  Bars(names, comm, name="in the all-reduce (median ms)")],
                 title=title, ylabel="ms per step")
