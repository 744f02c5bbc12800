"""The measured runs of Chapter 7: bucket size x overlap on real ranks.

:func:`measure` runs on every rank (``launch(measure, n, args=(cfg,))``, or
on an :class:`~warmup_kit.comm.MPIComm` under mpirun): in each pass, one lone
all-reduce of each sweep size (for comparison: hot caches, ranks lined up)
and one training step of every (bucket cap, overlap) setting, all on one
communicator. :func:`compare` feeds the timeline model, pass by pass, with
what the step *without* overlap measured (per-layer compute, forward,
optimizer, the slowest rank's lag) and each bucket's cost from the host
model fitted to the job's own bucket all-reduces (:func:`host_fit`), and
predicts both settings. ``benchmarks/overlap.py`` prints the table; the
chapter loads its JSON (``book/data/overlap.json``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from warmup_kit.collectives import all_gather, allreduce
from warmup_kit.comm.base import Comm
from warmup_kit.measure import fit_host as H
from warmup_kit.train.buckets import Buckets
from warmup_kit.train.data import global_batch, shard
from warmup_kit.train.ddp import DDP
from warmup_kit.train.mlp import MLP
from warmup_kit.machine import cores, load_average
from warmup_kit.train.timeline import (
    Span, Timeline, cpu_share, ready_positions, step_timeline)


@dataclass
class Config:
    """The toy job. 8 layers of 512 x 512 float64: 16 MiB of gradients,
    about as much communication as backward compute on 2 CPU cores."""
    widths: tuple = (512,) * 9
    batch_per_rank: int = 64
    #: 16 buckets (every tensor alone), 8 (a layer each), 3, 1 (nothing
    #: to overlap)
    bucket_sizes: tuple = (256 << 10, 4 << 20, 8 << 20, 32 << 20)
    steps: int = 15                  # timed passes (medians)
    warmup: int = 2                  # passes dropped
    lr: float = 0.001
    seed: int = 0
    algorithm: str = "ring"
    timeout_s: float = 120.0
    #: lone all-reduces the host model is fitted to
    sweep_bytes: tuple = tuple(4 << (2 * k) for k in range(5, 12, 2))


def _median_index(values) -> int:
    order = np.argsort(values)
    return int(order[len(order) // 2])


def _lone(comm: Comm, flat: np.ndarray, cfg: Config, alg: str,
          nbytes: int) -> float:
    buf = flat[:nbytes // flat.itemsize]
    comm.barrier(timeout=cfg.timeout_s)
    t0 = time.perf_counter()
    allreduce(buf, comm, out=buf, algorithm=alg, timeout=cfg.timeout_s)
    return time.perf_counter() - t0


def measure(comm: Comm, cfg: Config | None = None) -> dict | None:
    """Every setting on this rank; the record on rank 0 (None elsewhere).

    The settings are interleaved: each pass times one lone all-reduce of
    every sweep size and one step of every (bucket size, overlap) setting,
    so that load from elsewhere lands on all of them alike; the first
    ``cfg.warmup`` passes are dropped.
    """
    cfg = cfg or Config()
    base = MLP(cfg.widths, seed=cfg.seed)
    flat = comm.empty(sum(p.size for p in base.params))
    settings = [(b, o) for b in cfg.bucket_sizes for o in (False, True)]
    ddps = [DDP(base.copy(), comm, bucket_bytes=b, overlap=o,
                algorithm=cfg.algorithm, timeout=cfg.timeout_s, flat=flat)
            for b, o in settings]
    lone = {(a, nb): [] for a in ("ring", "tree") for nb in cfg.sweep_bytes}
    steps: list[list] = [[] for _ in settings]
    batch = cfg.batch_per_rank * comm.size
    for p in range(cfg.warmup + cfg.steps):
        for key in lone:
            dt = _lone(comm, flat, cfg, *key)
            if p >= cfg.warmup:
                lone[key].append(dt)
        x, t = global_batch(p, batch, cfg.widths[0], cfg.widths[-1])
        x, t = shard(x, comm.rank, comm.size), shard(t, comm.rank, comm.size)
        for i, ddp in enumerate(ddps):
            comm.barrier(timeout=cfg.timeout_s)
            st = ddp.step(x, t, cfg.lr)
            # how far the slowest rank's backward ended after this one's
            ends = all_gather(np.array([st.backward_end]), comm,
                              timeout=cfg.timeout_s)
            if p >= cfg.warmup:
                steps[i].append(dict(st.as_dict(), lag_s=float(
                    ends.max() - st.backward_end)))
    layer_of = [i // 2 for i in range(len(base.params))]
    runs = [{"bucket_bytes": b, "overlap": o,
             "bucket_nbytes": ddp.buckets.nbytes,
             "ready_after": ready_positions(ddp.buckets.members, base.layers,
                                            layer_of),
             "steps": st} for (b, o), ddp, st in zip(settings, ddps, steps)]
    sweep = [{"algorithm": a, "size": nb, "ranks": comm.size,
              "type": "double", "time_us": float(np.median(ts)) * 1e6}
             for (a, nb), ts in lone.items()]
    if comm.rank:
        return None
    return {"config": asdict(cfg), "ranks": comm.size, "cores": cores(),
            "loadavg": load_average(), "sweep": sweep, "runs": runs}


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


__all__ = ["Buckets", "Config", "bucket_costs", "compare", "host_fit",
           "table_rows",
           "job_collectives", "measure",
           "measured_timeline", "model_inputs", "predict", "summary",
           "what_if"]
