"""The doctor held against faults it was not told of (book, Chapter 5).

``benchmarks/cluster.py --fault NAME`` records a report with one node of
the emulated cluster put wrong during the experiments, and writes what it
did under the report's ``fault`` key. The doctor never reads that key
(:mod:`~warmup_kit.doctor.emulated`); this module does, after the doctor
has spoken, to set its answer beside the truth.
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass

from warmup_kit.doctor import examine
from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.doctor.parse import read_text


@dataclass
class FaultCheck:
    """One fault report: what was done, what the doctor said of it."""
    fault: str           #: the fault's name, from the report
    node: int            #: the node it was given to
    what: str            #: what was done, in words
    runs: int            #: runs (experiment variants) in the report
    not_healthy: int     #: runs the doctor called degraded or broken
    named: int           #: runs whose first cause is ``first``
    first: str           #: the cause the doctor named first most often
    evidence: str        #: that cause's evidence on its first run


def check(path: str) -> FaultCheck:
    """Diagnose the report at ``path`` as any reader's, then read its
    ``fault`` key."""
    try:
        told = json.loads(read_text(path)).get("fault")
    except ValueError:
        told = None
    if not isinstance(told, dict) or "name" not in told:
        raise DoctorInputError(f"{path}: not a fault report (no 'fault' "
                               "with a 'name'; benchmarks/cluster.py "
                               "--fault writes one)")
    ds = examine([path])
    firsts = [d.causes[0] for d in ds if d.causes]
    counts: dict[str, int] = {}
    for c in firsts:
        counts[c.cause] = counts.get(c.cause, 0) + 1
    first = max(counts, key=counts.get) if counts else "(nothing)"
    ev = next((c.evidence for c in firsts if c.cause == first), "")
    return FaultCheck(str(told["name"]), int(told.get("node", -1)),
                      str(told.get("what", "")), len(ds),
                      sum(d.verdict != "healthy" for d in ds),
                      counts.get(first, 0), first, ev)


def fault_table(paths: list[str], width: int = 84) -> str:
    """One block per fault report: the fault, what was done, how many runs
    the doctor called not healthy, the cause it named first, and that
    cause's evidence, wrapped to ``width``."""
    out = []
    for p in paths:
        c = check(p)
        out += textwrap.wrap(f"{c.fault} (node {c.node}): {c.what}", width,
                             subsequent_indent="  ")
        out += [f"  not healthy: {c.not_healthy} of {c.runs} runs; named "
                f"first on {c.named} of {c.runs}:", f"    {c.first}"]
        out += textwrap.wrap(f"evidence: {c.evidence}", width,
                             initial_indent="    ",
                             subsequent_indent="      ")
        out.append("")
    return "\n".join(out).rstrip()


__all__ = ["FaultCheck", "check", "fault_table"]
