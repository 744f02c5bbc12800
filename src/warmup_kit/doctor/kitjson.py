"""This kit's own outputs as doctor runs: ``warmup-bench --json`` files and
the emulated cluster's stored reports (``benchmarks/cluster.py --json``,
e.g. ``book/data/cluster.json``).

A bench file is ``{"header": {...}, "rows": [...]}`` (:mod:`warmup_kit.bench
.output`); each implementation it timed becomes one run. A cluster report
(:mod:`warmup_kit.measure.cluster_report`) carries its own calibrated model:
every row has ``measured_ms`` and ``model_ms``, so the doctor judges it
against that model (the hardware table knows nothing of an emulated
cluster); each (experiment, variant) becomes one run, its busbw computed
as nccl-tests does for an all-reduce of the group's ranks.
"""
from __future__ import annotations

from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.doctor.records import Evidence, Row, Run
from warmup_kit.model.costs import BUSBW_FACTORS

BENCH_KEYS = ("header", "rows")
REPORT_KEYS = ("machine", "cluster", "tiers", "rows")


def kind_of(doc) -> str | None:
    """``"warmup-bench"``, ``"emulated-cluster"`` or None."""
    if not isinstance(doc, dict):
        return None
    if all(k in doc for k in REPORT_KEYS):
        return "emulated-cluster"
    if all(k in doc for k in BENCH_KEYS) and isinstance(doc["header"], dict):
        return "warmup-bench"
    return None


def _need(row: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise DoctorInputError(f"{where}: a row lacks {', '.join(missing)}")


def bench_runs(doc: dict, source: str) -> list[Run]:
    """One run per implementation of a ``warmup-bench --json`` file."""
    head = doc["header"]
    runs: dict[str, Run] = {}
    for i, r in enumerate(doc["rows"]):
        if not isinstance(r, dict):
            raise DoctorInputError(f"{source}: row {i} is not an object")
        _need(r, ("size", "busbw_gbps"), source)
        alg = str(r.get("algorithm", "?"))
        run = runs.get(alg)
        if run is None:
            coll = str(r.get("collective", head.get("collective", "")))
            run = runs[alg] = Run(
                source, index=len(runs), kind="warmup-bench",
                collective=coll,
                collective_how=f"warmup-bench header ({alg})",
                stated={"ranks": int(r.get("ranks", head.get("ranks", 0))
                                     or 0),
                        "transport": head.get("transport", ""),
                        "machine": head.get("machine", "")})
        wrong = r.get("wrong")
        run.rows.append(Row(
            nbytes=int(r["size"]), collective=run.collective,
            busbw_gbps=float(r["busbw_gbps"]),
            time_us=float(r.get("time_us", 0.0)),
            algbw_gbps=float(r.get("algbw_gbps", 0.0)),
            wrong=None if wrong is None else int(wrong), line=i + 1,
            text=f"rows[{i}]: {alg} {r['size']} B busbw "
                 f"{float(r['busbw_gbps']):.3f} GB/s", variant=alg))
    return list(runs.values())


def report_runs(doc: dict, source: str) -> list[Run]:
    """One run per (experiment, variant) of an emulated-cluster report."""
    cl = doc["cluster"]
    nodes, per = int(cl.get("nodes", 0)), int(cl.get("ranks_per_node", 0))
    if nodes < 1 or per < 1:
        raise DoctorInputError(f"{source}: the report's cluster has no "
                               "nodes / ranks_per_node")
    runs: dict[tuple[str, str], Run] = {}
    for i, r in enumerate(doc["rows"]):
        if not isinstance(r, dict):
            raise DoctorInputError(f"{source}: row {i} is not an object")
        _need(r, ("experiment", "variant", "nbytes", "measured_ms",
                  "model_ms"), source)
        key = (str(r["experiment"]), str(r["variant"]))
        n = nodes * per if key[0] == "allreduce" else per
        run = runs.get(key)
        if run is None:
            run = runs[key] = Run(
                source, index=len(runs), kind="emulated-cluster",
                collective="allreduce",
                collective_how=f"emulated-cluster report: experiment "
                               f"{key[0]!r}, variant {key[1]!r}",
                own_model={"name": "emulated cluster (calibrated tiers)",
                           "link": cl.get("link"),
                           "transports": cl.get("transports"),
                           "tier_ratio": doc["tiers"].get("ratio"),
                           "nodes": _probe(doc.get("nodes"), source)},
                stated={"ranks": n, "nodes": nodes if key[0] ==
                        "allreduce" or key[1] != "inside one node" else 1,
                        "gpus_per_node": per})
        f = BUSBW_FACTORS["allreduce"](n)
        nb = int(r["nbytes"])
        meas, model = float(r["measured_ms"]), float(r["model_ms"])
        bus = nb / (meas * 1e-3) / 1e9 * f if meas > 0 else 0.0
        exp = nb / (model * 1e-3) / 1e9 * f if model > 0 else None
        wrong = 0 if r.get("correct", True) else 1
        run.rows.append(Row(
            nbytes=nb, collective="allreduce", busbw_gbps=bus,
            time_us=meas * 1e3, algbw_gbps=bus / f if f else 0.0,
            wrong=wrong, line=i + 1,
            text=f"rows[{i}]: {key[0]} {key[1]} {nb} B measured "
                 f"{meas:.3f} ms, model {model:.3f} ms",
            expected_gbps=exp, variant=key[1],
            worst_us=(float(r["worst_ms"]) * 1e3 if "worst_ms" in r
                      else None), calls=int(r.get("calls", 0))))
        if not r.get("bytes_match", True):
            run.facts.transports.setdefault(
                "bytes", Evidence(False, i + 1, f"rows[{i}]: bytes_match "
                                  "false"))
    return list(runs.values())


def _probe(nodes, source: str) -> list[dict]:
    """The report's per-node probe (``nodes``: each node's time on the same
    local work, :func:`warmup_kit.measure.cluster_bench.node_probe`), or
    [] where the report has none."""
    if nodes is None:
        return []
    if not isinstance(nodes, list) or not all(
            isinstance(n, dict) and isinstance(n.get("probe_ms"), (int, float))
            and n["probe_ms"] > 0 and isinstance(n.get("node"), int)
            for n in nodes):
        raise DoctorInputError(f"{source}: 'nodes' is not a list of "
                               "{node, probe_ms > 0}")
    return [{"node": n["node"], "probe_ms": float(n["probe_ms"])}
            for n in nodes]
