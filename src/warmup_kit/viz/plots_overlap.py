"""Pictures of overlap (book, Chapter 7): Gantt charts of one training step
and the bucket-size widget's view.

A Gantt lane is drawn as one square wave per lane (compute above,
communication below): each span is a raised block, so one trace per lane
serves any number of spans and every frame of a widget has the same traces.
"""
from __future__ import annotations

from typing import Sequence

from warmup_kit.train.timeline import Span, Timeline
from warmup_kit.viz.widgets import Bars, Figure, Line, Panel, Points

LANES = {"compute": (1.1, 1.9), "comm": (0.0, 0.8)}
COLORS = {"compute": "#1f77b4", "comm": "#ff7f0e"}
#: the lanes named on the y axis, at the middle of each
LANE_TICKS = ((sum(LANES["comm"]) / 2, "all-reduce"),
              (sum(LANES["compute"]) / 2, "compute"))


def lane_wave(spans: Sequence[Span], lane: str, end_ms: float
              ) -> tuple[list, list]:
    """x, y of a square wave raised over each of ``lane``'s spans (ms)."""
    lo, hi = LANES[lane]
    xs, ys = [0.0], [lo]
    for s in sorted((s for s in spans if s.lane == lane),
                    key=lambda s: s.start_s):
        a, b = s.start_s * 1e3, s.end_s * 1e3
        xs += [a, a, b, b]
        ys += [lo, hi, hi, lo]
    xs.append(max(end_ms, xs[-1]))
    ys.append(lo)
    return xs, ys


def gantt_panel(tl: Timeline, title: str, end_ms: float | None = None
                ) -> Panel:
    """One step: compute blocks (top lane) and collectives (bottom lane)."""
    end = tl.step_s * 1e3 if end_ms is None else end_ms
    traces = []
    for lane, name in (("compute", "compute"), ("comm", "all-reduce")):
        x, y = lane_wave(tl.spans, lane, end)
        traces.append(Line(x, y, name=name, color=COLORS[lane]))
    return Panel(traces, title=f"{title}: step {tl.step_s * 1e3:.1f} ms, "
                               f"exposed {tl.exposed_s * 1e3:.1f} ms",
                 xlabel="ms from the start of the step",
                 ylim=(-0.2, 2.1), yticks=LANE_TICKS)


def gantt_figure(measured: Timeline, model: Timeline, title: str = ""
                 ) -> Figure:
    """The measured step beside the model's, on one time axis."""
    end = max(measured.step_s, model.step_s) * 1e3
    return Figure([gantt_panel(measured, "measured", end),
                   gantt_panel(model, "model", end)], title=title)


def bucket_view(curve: dict, timelines: dict, bucket_mib: float,
                engines: str, latency_ms: float) -> Figure:
    """The widget's frame: the model's step at one bucket cap (Gantt), and
    step time against the cap with and without overlap.

    Args:
        curve: ``{(engines, latency_ms, overlap): [step ms per cap]}`` with
            ``curve["caps"]`` the caps in MiB.
        timelines: ``{(cap, engines, latency_ms): Timeline}`` (overlap on).
    """
    caps = curve["caps"]
    on = curve[(engines, latency_ms, True)]
    off = curve[(engines, latency_ms, False)]
    i = caps.index(bucket_mib)
    tl = timelines[(bucket_mib, engines, latency_ms)]
    right = Panel([Line(caps, off, name="overlap off", dash=True),
                   Line(caps, on, name="overlap on", markers=True),
                   Points([bucket_mib], [on[i]], [f"{on[i]:.0f} ms"])],
                  title=f"step vs bucket cap ({engines.split(' (')[0]}, "
                        f"+{latency_ms:g} ms/bucket)",
                  xlabel="bucket cap (MiB)", ylabel="step (ms)", logx=True)
    end = max(max(v) for k, v in curve.items() if k != "caps")
    left = gantt_panel(tl, f"{bucket_mib:g} MiB buckets", end)
    return Figure([left, right])


def exposed_bars(rows: Sequence[dict], title: str) -> Panel:
    """Measured and modelled exposed communication per setting."""
    labels = [f"{r['bucket']} {'on' if r['overlap'] else 'off'}"
              for r in rows]
    return Panel([Bars(labels, [r["step_ms"] for r in rows],
                       name="measured step"),
                  Bars(labels, [r["model_step_ms"] for r in rows],
                       name="model step")],
                 title=title, ylabel="ms")


ENGINES = {"this CPU (shared cores)": None, "GPU (separate engines)": 1.0}


def bucket_widget_data(record: dict, caps_mib: Sequence[float] = (
        0.25, 0.5, 1, 2, 4, 8, 16, 32), latencies_ms: Sequence[float] = (
        0, 1, 4)) -> tuple[dict, dict]:
    """Every frame of the bucket-size widget, from the timeline model fed by
    ``record`` (:func:`warmup_kit.train.analysis.what_if`): the ``curve`` and
    ``timelines`` arguments of :func:`bucket_view`."""
    from warmup_kit.train.analysis import host_fit, what_if
    fit = host_fit(record)
    curve: dict = {"caps": list(caps_mib)}
    timelines = {}
    for engines, share in ENGINES.items():
        for lat in latencies_ms:
            for overlap in (True, False):
                steps = []
                for cap in caps_mib:
                    tl = what_if(record, int(cap * (1 << 20)),
                                 overlap=overlap, share=share,
                                 latency_s=lat * 1e-3, fit=fit)
                    steps.append(tl.step_s * 1e3)
                    if overlap:
                        timelines[(cap, engines, lat)] = tl
                curve[(engines, lat, overlap)] = steps
    return curve, timelines


BUDGET = ("model FLOPs at peak (MFU)", "kernels below peak", "recompute",
          "tensor-parallel comm", "pipeline bubble", "pipeline p2p",
          "exposed DP comm", "hidden DP comm's interference", "optimizer")


def mfu_budget(result, model, recompute: str = "full") -> dict:
    """Where a step's time goes, as fractions that add up to 1, from a
    :func:`warmup_kit.parallelism.step.iteration_time` result: the model's
    FLOPs at peak speed (the MFU), the rest of the compute (kernels below
    peak, recomputed forward passes), then each mechanism's share: the
    DP synchronisation that overlap hides still slows the compute beside
    it (:mod:`warmup_kit.parallelism.costs.overlap`), its own row."""
    p, total = result.parts, result.total_s
    mfu = result.mfu
    redo = mfu * (model.flops_per_sample(recompute)
                  / model.flops_per_sample("none") - 1)
    out = dict(zip(BUDGET, (
        mfu, p["compute"] / total - mfu - redo, redo,
        p["tp_comm"] / total, (p["pp_bubble"] + p["pp_imbalance"]) / total,
        p["pp_p2p"] / total, p["dp_exposed"] / total,
        p["dp_contention"] / total, p["optimizer"] / total)))
    return out


def budget_panel(budgets: dict, title: str) -> Panel:
    """Stacked reading of :func:`mfu_budget`: one bar group per layout."""
    names = list(budgets)
    return Panel([Bars(list(BUDGET), [100 * budgets[n][k] for k in BUDGET],
                       name=n) for n in names],
                 title=title, ylabel="% of the step")
