"""The doctor's outputs: an aligned terminal table with the verdict and the
causes, a JSON document, and a figure (measured and expected busbw over
size, log axes, the healthy band shaded)."""
from __future__ import annotations

from warmup_kit.doctor.diagnose import (BROKEN, FAST, HEALTHY, THRESHOLDS,
                                        Diagnosis, judged_rows)
from warmup_kit.doctor.systems import describe
from warmup_kit.textfit import fit
from warmup_kit.units import human_bytes

ORDER = {"healthy": 0, "unknown": 1, "degraded": 2, "broken": 3}


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def system_dict(d: Diagnosis) -> dict:
    s = d.setup
    out = {"key": s.key, "gpu_name": s.gpu_name or None,
           "ranks": s.ranks, "nodes": s.nodes,
           "gpus_per_node": s.gpus_per_node, "from": dict(s.how)}
    if s.system is not None:
        out.update(describe(s.system))
    elif d.run.own_model is not None:
        out.update(d.run.own_model)
    if s.unknown:
        out["unknown"] = s.unknown
    f = d.run.facts
    for k in ("version", "net", "nics_in_use", "ofi_provider", "gdr",
              "nvls", "collnet"):
        ev = getattr(f, k)
        if ev is not None:
            out.setdefault("log", {})[k] = ev.value
    if f.transports:
        out.setdefault("log", {})["transports"] = sorted(f.transports)
    return out


def to_dict(d: Diagnosis) -> dict:
    """One run's diagnosis as JSON-ready data."""
    return {"source": d.run.source, "run": d.run.index + 1,
            "kind": d.run.kind, "collective": d.run.collective,
            "collective_from": d.run.collective_how,
            "verdict": d.verdict,
            "ratio": None if d.ratio is None else round(d.ratio, 4),
            "thresholds": {"healthy": HEALTHY, "broken": BROKEN,
                           "fast": FAST, "rules": THRESHOLDS},
            "system": system_dict(d),
            "rows": [{"bytes": j.row.nbytes,
                      "collective": j.row.collective,
                      "busbw_gbps": round(j.row.busbw_gbps, 4),
                      "inplace_busbw_gbps": j.row.inplace_busbw_gbps,
                      "expected_gbps": (None if j.expected_gbps is None
                                        else round(j.expected_gbps, 4)),
                      "ratio": (None if j.ratio is None
                                else round(j.ratio, 4)),
                      "algorithm": j.algorithm,
                      "best_algorithm": (j.expected.label(j.expected.best)
                                         if j.expected else None),
                      "wrong": j.row.wrong, "line": j.row.line}
                     for j in d.rows],
            "causes": [{"cause": c.cause, "evidence": c.evidence}
                       for c in d.causes],
            "notes": list(d.notes)}


def document(ds: list[Diagnosis]) -> dict:
    """The ``--json`` document: one run's keys at the top level, and with
    several runs the worst verdict, every row and cause, and ``runs``."""
    runs = [to_dict(d) for d in ds]
    if len(runs) == 1:
        return runs[0]
    worst = max(runs, key=lambda r: ORDER[r["verdict"]])
    return {"verdict": worst["verdict"], "system": runs[0]["system"],
            "thresholds": runs[0]["thresholds"],
            "rows": [dict(row, run=r["run"], source=r["source"])
                     for r in runs for row in r["rows"]],
            "causes": [dict(c, run=r["run"], source=r["source"])
                       for r in runs for c in r["causes"]],
            "runs": runs}


def _system_line(d: Diagnosis) -> str:
    s = d.setup
    if s.system is not None:
        what = s.system.name
    elif d.run.own_model is not None:
        what = d.run.own_model["name"]
    else:
        what = "unknown system"
    return (f"system: {what}; {s.ranks} ranks, {s.nodes} node(s) x "
            f"{s.gpus_per_node} GPUs" if s.ranks else f"system: {what}")


def table(d: Diagnosis) -> str:
    """The terminal report of one run, lines wrapped to 86 columns."""
    r = d.run
    lines = [f"== {r.source}, run {r.index + 1}: {r.kind} "
             f"{r.collective or '?'} ({r.collective_how})",
             _system_line(d)]
    by: dict[str, list[str]] = {}
    for k, v in d.setup.how.items():
        by.setdefault(v, []).append(k.replace("_", " "))
    for v, ks in by.items():
        lines.append(f"  {', '.join(ks)} from {v}")
    head = ("size", "collective", "measured", "expected", "ratio",
            "matches")
    body = [(human_bytes(j.row.nbytes), j.row.collective,
             f"{j.row.busbw_gbps:.2f}", _num(j.expected_gbps),
             _num(j.ratio), j.algorithm) for j in d.rows]
    w = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    fmt = "  ".join("{:>%d}" % w[i] if i in (0, 2, 3, 4) else
                    "{:<%d}" % w[i] for i in range(len(head)))
    if r.own_model is not None:
        lines.append("busbw in GB/s; expected = the report's own "
                     "calibrated model of each variant")
    else:
        lines.append("busbw in GB/s; expected = the fastest algorithm the "
                     "model predicts; matches = the prediction nearest the "
                     "measured number")
    lines.append(fmt.format(*head).rstrip())
    judged = {id(j) for j in judged_rows(d.rows)}
    for j, b in zip(d.rows, body):
        mark = " *" if id(j) in judged else ""
        lines.append(fmt.format(*b).rstrip() + mark)
    ratio = "-" if d.ratio is None else f"{d.ratio:.2f}"
    lines.append(f"verdict: {d.verdict.upper()} (median ratio {ratio} "
                 "over the rows marked *; healthy >= "
                 f"{HEALTHY}, degraded >= {BROKEN}, broken below or on any "
                 "#wrong)")
    if d.causes:
        lines.append("likely causes, most likely first:")
        for i, c in enumerate(d.causes, 1):
            lines.append(f"  {i}. {c.cause}")
            lines.append(f"     evidence: {c.evidence}")
    else:
        lines.append("no cause to report")
    for n in d.notes:
        lines.append(f"note: {n}")
    return fit("\n".join(lines))


def plot(ds: list[Diagnosis], path: str) -> None:
    """Measured vs expected busbw over size, one panel per run, log axes,
    the healthy band (HEALTHY..FAST x expected) shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(ds)
    fig, axes = plt.subplots(n, 1, figsize=(7, 3.2 * n), squeeze=False)
    for ax, d in zip(axes[:, 0], ds):
        x = [j.row.nbytes for j in d.rows]
        ax.plot(x, [max(j.row.busbw_gbps, 1e-6) for j in d.rows], "o-",
                ms=3, label="measured")
        ex = [(j.row.nbytes, j.expected_gbps) for j in d.rows
              if j.expected_gbps]
        if ex:
            xs, ys = zip(*ex)
            ax.plot(xs, ys, "k--", lw=1, label="expected (model)")
            ax.fill_between(xs, [y * HEALTHY for y in ys],
                            [y * FAST for y in ys], color="tab:green",
                            alpha=0.15,
                            label=f"healthy band ({HEALTHY}-{FAST}x)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{d.run.collective or '?'}: {d.verdict}"
                     f" ({_system_line(d)})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
