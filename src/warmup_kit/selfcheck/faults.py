"""Self-check: name the fault an emulated-cluster report was given, from
its own numbers (Chapter 5, "Faults on the emulated cluster").

The report is a dict as ``benchmarks/cluster.py --fault NAME --json``
writes it. :func:`fault_evidence` lays out what a reader should look at,
without the fault's name; :func:`emulated_fault` grades the reader's name
against the report's ``fault``, and explains a wrong one with the report's
own numbers.
"""
from __future__ import annotations

import statistics

from warmup_kit.exercises.result import (
    Result, failed, passed, spelled, unanswered)

#: the faults ``benchmarks/cluster.py --fault`` can make (tests hold this
#: against warmup_kit.cluster.faults.FAULTS, which graders may not import)
NAMES = ("throttled-link", "flapping-link", "slow-node", "sockets-in-node")
SPELLINGS = {n.replace("-", " "): n for n in NAMES}
#: the bandwidth-bound sizes each run is judged on, as the doctor does
LARGE = 16 << 20


def _rows(report) -> list[dict]:
    if not isinstance(report, dict) or not isinstance(
            report.get("rows"), list) or not report["rows"]:
        raise ValueError("report must be an emulated-cluster report (a dict "
                         "with 'rows'), e.g. json.load of "
                         "book/data/faults/NAME.json")
    return report["rows"]


def fault_evidence(report) -> dict:
    """What the report shows, run by run: ``runs`` is a list of
    ``{experiment, variant, crosses, ratio, beyond_s, times}`` (the
    median of model time / measured time at 16 MiB and up, 1 the model;
    the longest a call took beyond its size's median, seconds, and how
    many times that median it was); ``probe_ms`` each
    node's local probe; ``inside`` the transport inside a node."""
    runs: dict[tuple[str, str], dict] = {}
    for r in _rows(report):
        key = (r["experiment"], r["variant"])
        run = runs.setdefault(key, {"ratios": [], "beyond": 0.0,
                                    "times": 1.0})
        if r["nbytes"] >= LARGE:
            run["ratios"].append(r["model_ms"] / r["measured_ms"])
        if r.get("worst_ms") is not None:
            beyond = (r["worst_ms"] - r["measured_ms"]) / 1e3
            if beyond > run["beyond"]:
                run["beyond"] = beyond
                run["times"] = r["worst_ms"] / r["measured_ms"]
    out = []
    for (exp, var), run in runs.items():
        inside = var == "inside one node"
        out.append({"experiment": exp, "variant": var,
                    "crosses": not inside,
                    "ratio": statistics.median(run["ratios"])
                    if run["ratios"] else None,
                    "beyond_s": run["beyond"], "times": run["times"]})
    cl = report.get("cluster") or {}
    return {"runs": out,
            "probe_ms": {n["node"]: n["probe_ms"]
                         for n in report.get("nodes") or []},
            "inside": (cl.get("transports") or {}).get("inside a node", "")}


def _what_shows(name: str, ev: dict) -> str:
    """What the report's numbers say of ``name``."""
    runs = ev["runs"]
    r_in = [r["ratio"] for r in runs if not r["crosses"] and r["ratio"]]
    r_x = [r["ratio"] for r in runs if r["crosses"] and r["ratio"]]
    if name == "throttled-link":
        return (f"a slow link slows only the runs that cross nodes: here "
                f"inside {min(r_in, default=0):.2f}, across "
                f"{min(r_x, default=0):.2f}-{max(r_x, default=0):.2f} of "
                "the model")
    if name == "flapping-link":
        x = max((r for r in runs if r["crosses"]),
                key=lambda r: r["beyond_s"], default=None)
        y = max((r["beyond_s"] for r in runs if not r["crosses"]),
                default=0.0)
        if x is None:
            return "no run of this report crosses nodes"
        return ("a link that drops makes calls across it wait out TCP's "
                "retransmission, seconds past their medians and several "
                f"times them, while calls inside a node run on: here the longest "
                f"past its median is {x['beyond_s']:.2f} s "
                f"({x['times']:.1f}x) across nodes, {y:.2f} s inside one")
    if name == "slow-node":
        p = ev["probe_ms"]
        if not p:
            return "this report has no node probe to show a slow node"
        return ("a slow node is slow at local work too: the probe took "
                + ", ".join(f"node {n} {ms:.0f} ms"
                            for n, ms in sorted(p.items())))
    return (f"the report says its ranks inside a node used "
            f"{ev['inside'] or 'an unnamed transport'}")


def emulated_fault(report, answer) -> Result:
    """Grade the name of the fault ``report`` was given (one of
    :data:`NAMES`; spaces for dashes and any case accepted)."""
    ev = fault_evidence(report)
    told = report.get("fault")
    if not isinstance(told, dict) or told.get("name") not in NAMES:
        raise ValueError("report has no 'fault' naming one of "
                         f"{list(NAMES)}: not a fault report")
    ex = "which fault was this cluster given"
    if answer is ...:
        return unanswered(ex, f"one of {list(NAMES)}")
    got = spelled("answer", answer, SPELLINGS)
    if got == told["name"]:
        return passed(ex, f"{told['name']}: {told.get('what', '')}; "
                          f"{_what_shows(got, ev)}")
    return failed(ex, f"not {got}: {_what_shows(got, ev)}",
                  "compare the runs inside one node with those that "
                  "cross, the longest calls and the node probe")


__all__ = ["NAMES", "emulated_fault", "fault_evidence"]
