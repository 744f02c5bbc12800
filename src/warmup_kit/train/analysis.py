"""The analysis of Chapter 7's measured runs: nothing here runs on ranks.

:func:`warmup_kit.train.run.measure` records, on real ranks, every (bucket
cap, overlap) setting; this module reads that record. :func:`compare` feeds
the timeline model, pass by pass, with what the step *without* overlap
measured (per-layer compute, forward, optimizer, the slowest rank's lag)
and each bucket's cost from the host model fitted to the job's own bucket
all-reduces (:func:`host_fit`), and predicts both settings;
:func:`what_if` predicts any bucket cap. ``benchmarks/overlap.py`` prints
the table, the chapter and its plots (:mod:`warmup_kit.viz.plots_overlap`)
load the stored record.
"""
from __future__ import annotations

import numpy as np

from warmup_kit.measure import fit_host as H
from warmup_kit.train.buckets import Buckets
from warmup_kit.train.timeline import (
    Span, Timeline, cpu_share, ready_positions, step_timeline)


def _median_index(values) -> int:
    order = np.argsort(values)
    return int(order[len(order) // 2])


def summary(steps: list[dict]) -> dict:
    """Medians over steps, and the median step itself (for the Gantt)."""
    keys = ("step_s", "compute_s", "comm_s", "exposed_s", "forward_s",
            "backward_s", "optimizer_s")
    med = {k: float(np.median([s[k] for s in steps])) for k in keys}
    med["median_step"] = steps[_median_index([s["step_s"] for s in steps])]
    return med


def job_collectives(record: dict) -> list[dict]:
    """The all-reduces of the runs *without* overlap, as ``warmup-bench``
    rows: each bucket's median time over the steps (nothing computes beside
    them; the buffers are as cold as a real step leaves them), the first
    bucket's less the lag of the slowest rank."""
    rows = []
    for run in record["runs"]:
        if run["overlap"]:
            continue
        for k, nbytes in enumerate(run["bucket_nbytes"]):
            # the first bucket also waits for the slowest rank: not its cost
            ts = [st["buckets"][k][3] - st["buckets"][k][2]
                  - (st["lag_s"] if k == 0 else 0.0) for st in run["steps"]]
            rows.append({"algorithm": record["config"]["algorithm"],
                         "size": int(nbytes), "ranks": record["ranks"],
                         "type": "double",
                         "time_us": float(np.median(ts)) * 1e6})
    return rows


def host_fit(record: dict, source: str = "job") -> H.HostFit:
    """The host model (:mod:`warmup_kit.measure.fit_host`) fitted to the
    job's own bucket all-reduces (``source="job"``, what the timeline model
    uses) or to the lone all-reduces timed beside the job (``"lone"``: hot
    caches, no skew between ranks; they under-predict the job's)."""
    rows = job_collectives(record) if source == "job" else record["sweep"]
    return H.fit_host(rows, min_bytes=0, ncores=record["cores"])


def bucket_costs(fit: H.HostFit, nbytes, n: int, algorithm: str = "ring"
                 ) -> list[float]:
    """Predicted seconds of each bucket's all-reduce."""
    return [H.predict(algorithm, int(b), n, fit) for b in nbytes]


def model_inputs(record: dict, bucket_bytes: int, step: int | None = None
                 ) -> dict:
    """What the run *without* overlap at ``bucket_bytes`` measured: per-layer
    backward (backward order), forward, optimizer, the slowest rank's lag;
    of pass ``step``, or of its median step (not per-layer medians: a
    preempted layer lands on a different layer in each step, and the
    medians of the parts add up to less than the median step)."""
    run = next(r for r in record["runs"] if r["bucket_bytes"] == bucket_bytes
               and not r["overlap"])
    if step is None:
        step = _median_index([s["step_s"] for s in run["steps"]])
    steps = [run["steps"][step]]
    layers = np.array([[e - s for _, s, e in st["layers"]] for st in steps])
    return {"layer_s": [float(v) for v in np.median(layers, axis=0)],
            "lag_s": float(np.median([s["lag_s"] for s in steps])),
            "forward_s": float(np.median([s["forward_s"] for s in steps])),
            "optimizer_s": float(np.median([s["optimizer_s"]
                                            for s in steps]))}


def predict(record: dict, run: dict, fit: H.HostFit | None = None,
            step: int | None = None) -> Timeline:
    """The timeline model's step for one measured setting, fed by pass
    ``step`` of the run without overlap (None: its median step)."""
    fit = fit or host_fit(record)
    inputs = model_inputs(record, run["bucket_bytes"], step)
    cost = bucket_costs(fit, run["bucket_nbytes"], record["ranks"],
                        record["config"]["algorithm"])
    return step_timeline(inputs["layer_s"], run["ready_after"], cost,
                         forward_s=inputs["forward_s"],
                         optimizer_s=inputs["optimizer_s"],
                         lag_s=inputs["lag_s"], overlap=run["overlap"],
                         share=cpu_share(record["cores"], record["ranks"]))


def compare(record: dict, run: dict, fit: H.HostFit | None = None) -> dict:
    """Measured medians beside the model's, pass by pass: each pass's steps
    ran back to back, so the model of pass i (fed by that pass's step
    without overlap) faces the load the measured step of pass i faced.

    Returns:
        the measured medians (:func:`summary`), ``model_step_s`` and
        ``model_exposed_s`` (medians over the passes), ``error`` (model /
        measured - 1 of the median steps), and ``median_pass`` with the
        measured step and the model's :class:`Timeline` of that pass.
    """
    fit = fit or host_fit(record)
    models = [predict(record, run, fit, i) for i in range(len(run["steps"]))]
    out = summary(run["steps"])
    out["model_step_s"] = float(np.median([m.step_s for m in models]))
    out["model_exposed_s"] = float(np.median([m.exposed_s for m in models]))
    out["error"] = out["model_step_s"] / out["step_s"] - 1
    i = _median_index([s["step_s"] for s in run["steps"]])
    out["median_pass"] = {"measured": run["steps"][i], "model": models[i]}
    return out


def measured_timeline(step: dict) -> Timeline:
    """A measured step as a :class:`Timeline` (same spans as the model)."""
    spans = [Span("compute", "forward", 0.0, step["forward_s"])]
    spans += [Span("compute", f"bwd {j}", s, e)
              for j, (_, s, e) in enumerate(step["layers"])]
    spans += [Span("comm", f"bucket {k}", s, e)
              for k, _, s, e in step["buckets"]]
    opt0 = step["step_s"] - step["optimizer_s"]
    spans.append(Span("compute", "optimizer", opt0, step["step_s"]))
    return Timeline(step["step_s"], step["compute_s"] + step["optimizer_s"],
                    step["comm_s"], step["exposed_s"], spans)


def table_rows(record: dict) -> list[dict]:
    """One row per setting: measured medians and the model's prediction."""
    fit = host_fit(record)
    out = []
    for run in record["runs"]:
        c = compare(record, run, fit)
        out.append({"bucket_bytes": run["bucket_bytes"],
                    "overlap": run["overlap"],
                    "buckets": len(run["bucket_nbytes"]),
                    "step_ms": c["step_s"] * 1e3,
                    "compute_ms": c["compute_s"] * 1e3,
                    "comm_ms": c["comm_s"] * 1e3,
                    "exposed_ms": c["exposed_s"] * 1e3,
                    "model_step_ms": c["model_step_s"] * 1e3,
                    "model_exposed_ms": c["model_exposed_s"] * 1e3,
                    "error": c["error"]})
    return out


def what_if(record: dict, bucket_bytes: int, *, overlap: bool = True,
            share: float | None = None, latency_s: float = 0.0,
            fit: H.HostFit | None = None) -> Timeline:
    """The model's step for any bucket cap, fed by the run's medians
    without overlap (per-layer compute, forward, optimizer, lag).

    Args:
        bucket_bytes: the cap (buckets as :class:`Buckets` forms them).
        share: compute and communication speed while both run (default:
            this machine's, :func:`cpu_share`; 1 for a GPU's engines).
        latency_s: added to every bucket's fitted cost (a slower launch or
            network round trip: what makes small buckets expensive).
    """
    fit = fit or host_fit(record)
    cfg = record["config"]
    widths = cfg["widths"]
    shapes = [s for a, b in zip(widths[:-1], widths[1:]) for s in ((a, b),
                                                                   (b,))]
    b = Buckets(shapes, bucket_bytes)
    big = max(r["bucket_bytes"] for r in record["runs"])
    inputs = model_inputs(record, big)
    cost = [c + latency_s for c in bucket_costs(fit, b.nbytes,
                                                record["ranks"],
                                                cfg["algorithm"])]
    share = cpu_share(record["cores"], record["ranks"]) if share is None \
        else share
    return step_timeline(
        inputs["layer_s"], ready_positions(b.members, len(widths) - 1,
                                           [i // 2 for i in
                                            range(len(shapes))]),
        cost, forward_s=inputs["forward_s"],
        optimizer_s=inputs["optimizer_s"], lag_s=inputs["lag_s"],
        overlap=overlap, share=share)


__all__ = ["bucket_costs", "compare", "host_fit", "job_collectives",
           "measured_timeline", "model_inputs", "predict", "summary",
           "table_rows", "what_if"]
