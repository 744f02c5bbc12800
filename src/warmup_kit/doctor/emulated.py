"""Causes only a whole emulated-cluster report shows (book, Chapter 5).

:func:`~warmup_kit.doctor.diagnose.diagnose` judges each run of a report
(an experiment's variant) on its own rows. A report also holds what a
single run cannot say: runs that stay inside one node beside runs that
cross nodes, the slowest single call of every point, each node's speed on
local work alone (:func:`warmup_kit.measure.cluster_bench.node_probe`)
and the transports it ran on. :func:`add_report_causes` reads them and
adds, to each run they concern, with the numbers as evidence:

* **sockets inside a node instead of shared memory** (weight 85): the
  report says its ranks inside a node talked over sockets;
* **calls stalled: a link dropped and came back** (75): a call of a point
  took :data:`STALL_S` or more beyond the point's median, and
  :data:`STALL_FACTOR` times it; TCP waits out a retransmission timeout
  (200 ms at least) after a link comes back, so an outage adds seconds,
  not a multiple of the call, and a 64 MiB call of 0.6 s that waits out
  a 1 s cut is "only" 3x its median. Not named when a node is slow (its
  ranks, descheduled for most of every CPU period, make the same long
  calls). A run with a stall is at least ``degraded``, what ever its
  median: its callers waited;
* **one node computes slower than the others** (65): a node's probe took
  :data:`SLOW_NODE` times the fastest node's or more;
* **the link between nodes runs below its model** (50): the runs inside
  one node are healthy and those that cross nodes are not.

It is never told which fault a report was given (the report's ``fault``
is for the book's table); tests hold what it names against it.
"""
from __future__ import annotations

import statistics

from warmup_kit.doctor.diagnose import HEALTHY, Cause, Diagnosis
from warmup_kit.units import human_bytes

#: a call this much longer than its point's median, and ...
STALL_S = 0.2
#: ... this many times it, stalled (healthy and throttled runs' slowest
#: calls of 16-64 MiB come within 1.4x of their medians)
STALL_FACTOR = 2.0
#: a node whose probe took this many times the fastest node's is slow
SLOW_NODE = 1.5
WEIGHTS = {"sockets inside a node instead of shared memory": 85,
           "calls stalled: a link dropped and came back": 75,
           "one node computes slower than the others": 65,
           "the link between nodes runs below its model": 50}


def add_report_causes(ds: list[Diagnosis]) -> None:
    """Add the report-wide causes to the emulated-cluster runs of ``ds``,
    report by report (runs of one source file), re-ranking each run's
    causes."""
    reports: dict[str, list[Diagnosis]] = {}
    for d in ds:
        if d.run.kind == "emulated-cluster":
            reports.setdefault(d.run.source, []).append(d)
    for group in reports.values():
        _report(group)
        for d in group:
            d.causes.sort(key=lambda c: -c.weight)


def _add(d: Diagnosis, cause: str, evidence: str) -> None:
    d.causes.append(Cause(cause, evidence, WEIGHTS[cause]))


def _median_ratio(ds: list[Diagnosis]) -> float | None:
    have = [d.ratio for d in ds if d.ratio is not None]
    return statistics.median(have) if have else None


def _report(group: list[Diagnosis]) -> None:
    model = group[0].run.own_model or {}
    inside = [d for d in group if d.run.stated.get("nodes") == 1]
    across = [d for d in group if d.run.stated.get("nodes", 0) > 1]
    r_in, r_x = _median_ratio(inside), _median_ratio(across)
    said = (model.get("transports") or {}).get("inside a node", "")
    if "socket" in str(said).lower():
        how = (f"; the runs inside one node are at {r_in:.2f} of the model "
               "(calibrated on shared memory)" if r_in is not None else "")
        for d in group:
            _add(d, "sockets inside a node instead of shared memory",
                 f"the report's transports: inside a node: {said}{how}; "
                 "ranks of one node should share memory (NVLink/P2P or SHM "
                 "on a GPU node): check the launcher's transport")
    if not _slow_node(group, model.get("nodes") or []):
        for d in group:
            _stalls(d)
    if r_in is not None and r_x is not None and r_in >= HEALTHY > r_x:
        for d in across:
            _add(d, "the link between nodes runs below its model",
                 f"the runs inside one node are at {r_in:.2f} of the "
                 f"model, those that cross nodes at {r_x:.2f} (this one "
                 f"{d.ratio:.2f}): the nodes are fine and the network "
                 "between them is slow (a NIC trained down, a port shaped "
                 "or congested): test node pairs to find the cable")


def _stalls(d: Diagnosis) -> None:
    hit = [j.row for j in d.rows
           if j.row.worst_us is not None and j.row.time_us > 0
           and j.row.worst_us - j.row.time_us >= STALL_S * 1e6
           and j.row.worst_us >= STALL_FACTOR * j.row.time_us]
    if not hit:
        return
    r = max(hit, key=lambda r: r.worst_us / r.time_us)
    _add(d, "calls stalled: a link dropped and came back",
         f"{len(hit)} of {len(d.rows)} sizes had a call {STALL_S:g} s or "
         f"more beyond its median; worst: {human_bytes(r.nbytes)}, one call "
         f"{r.worst_us / 1e6:.2f} s against a median of "
         f"{r.time_us / 1e3:.1f} ms (line {r.line}): TCP retransmits only "
         "after its timeout once a link is back; look for carrier changes "
         "(ip -s link, ethtool -S, the switch's log)")
    if d.verdict == "healthy":
        d.verdict = "degraded"
        d.notes.append("degraded for its stalled calls: the median is "
                       "healthy, but callers waited out each stall")


def _slow_node(group: list[Diagnosis], nodes: list[dict]) -> bool:
    """Name a slow node on every run of ``group``; whether one was."""
    if len(nodes) < 2:
        return False
    fast = min(nodes, key=lambda n: n["probe_ms"])
    slow = max(nodes, key=lambda n: n["probe_ms"])
    x = slow["probe_ms"] / fast["probe_ms"]
    if x < SLOW_NODE:
        return False
    for d in group:
        _add(d, "one node computes slower than the others",
             f"node {slow['node']} took {slow['probe_ms']:.0f} ms for the "
             f"same local adds as node {fast['node']}'s "
             f"{fast['probe_ms']:.0f} ms ({x:.1f}x): every collective "
             "waits for it. On GPUs: clocks held down (thermal or power "
             "throttling, nvidia-smi -q -d PERFORMANCE) or another job on "
             "the node")
    return True


__all__ = ["STALL_FACTOR", "STALL_S", "SLOW_NODE", "WEIGHTS",
           "add_report_causes"]
