"""Pictures of failures (book, Chapter 8): the goodput widget's view, the
simulated goodput curve against Young's and Daly's intervals, and where a
straggler's step goes.

The widget's knobs are the chapter's: the checkpoint interval, the MTBF of
one GPU and the cluster size. Its curve is the expected goodput of Daly's
model (:func:`warmup_kit.failures.models.goodput.expected_wall`), which the
chapter first checks against the Monte Carlo simulation.
"""
from __future__ import annotations

import math

import numpy as np

from warmup_kit.failures.models.goodput import HOUR, daly, young
from warmup_kit.viz.widgets import Bars, Figure, Line, Panel, Points

YEAR_H = 365.25 * 24
GRID_MIN = np.geomspace(1, 240, 80)            # intervals drawn, minutes


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
    and how the run time splits at the chosen interval (work,
    checkpoints, work lost to failures, restarts)."""
    M = gpu_mtbf_years * YEAR_H * HOUR / gpus
    g = goodput_at(GRID_MIN * 60, ckpt_s, M, restart_s)
    y_, d_ = young(ckpt_s, M) / 60, daly(ckpt_s, M) / 60
    here = float(goodput_at(interval_min * 60, ckpt_s, M, restart_s))
    best = float(goodput_at(d_ * 60, ckpt_s, M, restart_s))
    mtbf = f"{M / 60:.0f} min" if M < 2 * HOUR else f"{M / HOUR:.1f} h"
    left = Panel([
        Line(list(GRID_MIN), list(100 * g)),
        Line([y_, y_], [0, 100], dash=True, color="#ff7f0e"),
        Line([d_, d_], [0, 100], dash=True, color="#d62728"),
        Points([interval_min], [100 * here], [f"{100 * here:.1f}%"],
               color="#1f77b4")],
        title=f"{gpus:,} GPUs, job MTBF {mtbf}: best {100 * best:.1f}%",
        xlabel=f"interval (min of work); Young {y_:.1f}, Daly {d_:.1f}",
        ylabel="expected goodput (%)", logx=True, ylim=(0, 100))
    b = budget(interval_min * 60, ckpt_s, M, restart_s)
    total = sum(b.values())
    right = Panel([Bars(list(b), [100 * v / total for v in b.values()])],
                  title=f"where the run time goes at {interval_min:g} min",
                  ylabel="% of the run time", ylim=(0, 100))
    return Figure([left, right])


def sim_panel(result, exact_s: float, young_s: float, daly_s: float,
              sim_s: float, title: str, analytic=None, legend: bool = True
              ) -> Panel:
    """Simulated goodput against the interval, with the analytic curve,
    and the optima (Young's, Daly's, the simulation's) marked and labelled
    at the top. The simulation's two standard errors are smaller than its
    markers; ``legend`` names the traces (once per figure)."""
    taus = result.taus / 60
    m = 100 * result.mean
    curves = [m] if analytic is None else [m, 100 * np.asarray(analytic)]
    lo = float(min(c.min() for c in curves))
    hi = float(max(c.max() for c in curves))
    pad = max(hi - lo, 0.1) * 0.12
    lo, top = lo - pad, hi + 3 * pad
    traces = [Line(list(taus), list(m), markers=True,
                   name="simulated (mean of 400 runs)" if legend else "")]
    if analytic is not None:
        traces.append(Line(list(taus), list(100 * np.asarray(analytic)),
                           name="Daly's model (expected)" if legend else "",
                           color="#2ca02c"))
    xs, labels = [], []
    for x, name, color in ((young_s, "Young", "#ff7f0e"),
                           (daly_s, "Daly", "#d62728"),
                           (sim_s, "sim.", "#1f77b4")):
        traces.append(Line([x / 60, x / 60], [lo, hi + pad], dash=True,
                           color=color))
        xs.append(x / 60)
        labels.append(f"{name} {x / 60:.1f}")
    ys = [hi + 2.6 * pad, hi + 1.9 * pad, hi + 1.2 * pad]
    traces.append(Points(xs, ys, labels, color="#7f7f7f"))
    return Panel(traces, title=title, xlabel="checkpoint interval (min)",
                 ylabel="goodput (%)", logx=True, ylim=(lo, top))


def straggler_panel(ranks: list[dict], title: str) -> Panel:
    """Median compute and communication time per step of each rank: the
    straggler computes longest and waits least."""
    names = [f"rank {o['rank']}" for o in ranks]
    comp = [1e3 * float(np.median(o["compute_s"])) for o in ranks]
    comm = [1e3 * float(np.median(o["comm_s"])) for o in ranks]
    return Panel([Bars(names, comp, name="compute (median ms)"),
                  Bars(names, comm, name="in the all-reduce (median ms)")],
                 title=title, ylabel="ms per step")
