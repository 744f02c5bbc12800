"""The verdict on a run and its likely causes, each with its evidence.

**Verdict.** The doctor judges the bandwidth-bound end of the sweep: the
rows of at least 1/8 of the largest size (the top four sizes of a ``-f 2``
sweep), where bytes, not latency, set the time, less those the measured
busbw is still climbing through (the next size 5% faster or more). NVLS
levels off late: CoreWeave's published NVL72 rack climbs from 681 GB/s at
1 GiB to 839 at 4 GiB, and NCCL's maintainers call 256 MiB too small for
NVLS' peak on 8 H100s (github.com/NVIDIA/nccl-tests/issues/212), where
the model is level by then. Their median ratio
measured / expected is

* ``healthy`` at :data:`HEALTHY` (0.80) or more,
* ``degraded`` from :data:`BROKEN` (0.40) up to 0.80,
* ``broken`` below 0.40, or whenever a row has ``#wrong`` > 0 or the run
  reports out-of-bounds values (a fast wrong answer is not an answer),
* ``unknown`` where there is no model of the system (and no errors).

A ratio above :data:`FAST` (1.25) stays healthy, with a cause that asks
whether the system or the node count is the one the run had.

**Causes**, ranked by :data:`WEIGHTS` (most specific first), each naming
the log line or the numbers that point to it: wrong results; traffic on
``NET/Socket`` (or libfabric's TCP provider) instead of IB/EFA; fewer NICs
in use than the node has; network channels without GPUDirect RDMA; NVLS
available but the numbers match ring; a PCIe-only path inside the node;
one size far below its neighbours; a plateau at a fixed fraction of the
model (the ring runs at its slowest link: one slow node, NIC or cable);
numbers above the model; the ``Avg bus bandwidth`` line dragged down by
latency-bound sizes.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from warmup_kit.doctor.expect import (LABELS, PRICED_AS, Expected, Shape,
                                      expected, shape)
from warmup_kit.doctor.records import Row, Run
from warmup_kit.doctor.setup import Setup
from warmup_kit.doctor.systems import build_cluster, nics_per_node
from warmup_kit.model.costs import busbw_factor
from warmup_kit.units import human_bytes

HEALTHY = 0.80
BROKEN = 0.40
FAST = 1.25
#: the judged rows: this fraction of the largest size and up
JUDGED_FRACTION = 1 / 8
#: ... less the leading ones after which busbw still rises this much
RISING = 1.05
#: a size whose ratio is below this fraction of both neighbours' is a dip
DIP = 0.6
#: a size whose busbw is below this fraction of the size before it, with
#: no larger size recovering, is a collapse
COLLAPSE = 0.5
#: sizes below this are latency-bound on every system in the table
LATENCY_BOUND = 1 << 20
#: a row "matches" the nearest algorithm's prediction only within this
#: factor of it; further off it matches none
NEAR = 1.5
#: the numbers "match" an algorithm's prediction within this fraction
MATCH = 0.15
THRESHOLDS = {"healthy": f"median measured/expected >= {HEALTHY} over the "
                         "sizes >= 1/8 of the largest where busbw has "
                         "stopped climbing, and #wrong = 0",
              "degraded": f"{BROKEN} <= ratio < {HEALTHY}",
              "broken": f"ratio < {BROKEN}, or #wrong > 0 / out-of-bounds "
                        "values",
              "unknown": "no model of the system"}
WEIGHTS = {"wrong results": 100,
           "each process ran its own test": 95, "network on sockets": 90,
           "fewer NICs in use than present": 80, "no GPUDirect RDMA": 70,
           "NVLS available but the numbers match ring": 60,
           "PCIe-only path inside the node": 60, "unknown system": 55,
           "one size far below its neighbours": 45,
           "busbw collapses above one size": 45,
           "a plateau below the model: one slow link, NIC or node": 40,
           "measured above the model": 30,
           "Avg bus bandwidth dragged down by latency-bound sizes": 20}


@dataclass
class Judged:
    """One row with the model's numbers beside it."""

    row: Row
    expected: Expected | None
    expected_gbps: float | None
    ratio: float | None
    algorithm: str


@dataclass
class Cause:
    cause: str
    evidence: str
    weight: int = 0


@dataclass
class Diagnosis:
    run: Run
    setup: Setup
    verdict: str
    ratio: float | None
    rows: list[Judged]
    causes: list[Cause] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _judge_rows(run: Run, setup: Setup, sh: Shape | None) -> list[Judged]:
    out = []
    memo: dict[tuple[str, int], Expected | None] = {}
    for r in run.rows:
        if r.expected_gbps is not None:          # the run's own model
            exp_gbps = r.expected_gbps
            ratio = r.busbw_gbps / exp_gbps if exp_gbps else None
            out.append(Judged(r, None, exp_gbps, ratio,
                              r.variant or "own model"))
            continue
        key = (r.collective, r.nbytes)
        if key not in memo:
            memo[key] = (expected(r.collective, r.nbytes, setup.system, sh)
                         if setup.system is not None and sh is not None
                         else None)
        e = memo[key]
        if e is None:
            out.append(Judged(r, None, None, None, "-"))
            continue
        g = e.best_gbps
        bus = _precise(r, sh.n)
        near = e.nearest(bus)
        ng = e.gbps(near) or 0.0
        label = (e.label(near) if ng and 1 / NEAR <= bus / ng <= NEAR
                 else "none (below all)" if bus < ng else "none (above all)")
        out.append(Judged(r, e, g, bus / g if g > 0 and bus > 0 else None,
                          label))
    return out


def _precise(r: Row, n: int) -> float:
    """The row's busbw from its time (printed to 3-4 digits) rather than
    its busbw column (two decimals: 0.00 for every small size): nccl-tests'
    algbw is size / time for every collective."""
    coll = PRICED_AS.get(r.collective)
    if r.time_us > 0 and coll is not None and n >= 2:
        return r.nbytes / (r.time_us * 1e-6) / 1e9 * busbw_factor(coll, n)
    return r.busbw_gbps


def judged_rows(rows: list[Judged]) -> list[Judged]:
    """The bandwidth-bound end: rows of >= 1/8 of the largest size, from
    the first one where the measured busbw stops climbing (the next size
    is less than :data:`RISING` times faster), so a sweep that reaches
    its plateau late is judged on the plateau; the largest row always."""
    window = bandwidth_window(rows)
    return window[_climbing(window):]


def bandwidth_window(rows: list[Judged]) -> list[Judged]:
    """The rows with a ratio of >= 1/8 of the largest size."""
    have = [j for j in rows if j.ratio is not None]
    if not have:
        return []
    top = max(j.row.nbytes for j in have)
    return [j for j in have if j.row.nbytes >= top * JUDGED_FRACTION]


def _climbing(window: list[Judged]) -> int:
    """How many leading rows of ``window`` the measured busbw still climbs
    through (each followed by one at least :data:`RISING` times faster)."""
    i = 0
    while i + 1 < len(window) and window[i + 1].row.busbw_gbps >= \
            RISING * window[i].row.busbw_gbps:
        i += 1
    return i


def _fmt(g: float) -> str:
    return f"{g:.1f} GB/s" if g >= 1 else f"{g:.3g} GB/s"


def diagnose(run: Run, setup: Setup) -> Diagnosis:
    """The verdict and ranked causes for one run."""
    sh = None
    if setup.system is not None and setup.ranks >= 1:
        sh = shape(build_cluster(setup.system, setup.nodes), setup.ranks,
                   setup.nodes)
    rows = _judge_rows(run, setup, sh)
    top = judged_rows(rows)
    ratio = statistics.median(j.ratio for j in top) if top else None
    d = Diagnosis(run, setup, "unknown", ratio, rows)
    bad = [j.row for j in rows if j.row.wrong]
    oob = run.out_of_bounds
    if bad or (oob is not None and oob.value):
        d.verdict = "broken"
    elif ratio is None:
        d.verdict = "unknown"
    elif ratio < BROKEN:
        d.verdict = "broken"
    elif ratio < HEALTHY:
        d.verdict = "degraded"
    else:
        d.verdict = "healthy"
    _causes(d, top, bad, sh)
    d.causes.sort(key=lambda c: -c.weight)
    if top and max(j.row.nbytes for j in top) < 16 << 20 and \
            run.kind in ("nccl-tests", "rccl-tests"):
        d.notes.append(f"the largest size is {human_bytes(top[-1].row.nbytes)}"
                       ": still partly latency-bound; sweep to 1 GiB or more "
                       "(-e 1G) for a bandwidth verdict")
    window = bandwidth_window(rows)
    if top and len(window) > len(top):
        first, last = window[0], top[0]
        d.notes.append(
            f"busbw still climbs from {_fmt(first.row.busbw_gbps)} at "
            f"{human_bytes(first.row.nbytes)} to {_fmt(last.row.busbw_gbps)} "
            f"at {human_bytes(last.row.nbytes)}: judged from "
            f"{human_bytes(last.row.nbytes)} on, where it levels off (the "
            "model expected the plateau sooner: more fixed cost per call "
            "than it prices)")
    if len(window) > 1 and len(top) == 1:
        d.notes.append("busbw is still climbing at the largest size: sweep "
                       "larger (-e) for a bandwidth verdict")
    if run.truncated:
        d.notes.append("the run is cut short (a partial last row): judged on "
                       "the rows it has")
    if sh is not None and sh.n < 2:
        d.notes.append("one rank: there is no communication to judge")
    return d


def _add(d: Diagnosis, cause: str, evidence: str) -> None:
    d.causes.append(Cause(cause, evidence, WEIGHTS[cause]))


def _causes(d: Diagnosis, top: list[Judged], bad: list[Row],
            sh: Shape | None) -> None:
    run, setup, f = d.run, d.setup, d.run.facts
    if bad:
        r = bad[0]
        _add(d, "wrong results",
             f"{len(bad)} row(s) with #wrong > 0; first: line {r.line}: "
             f"{r.text}")
    elif run.out_of_bounds is not None and run.out_of_bounds.value:
        _add(d, "wrong results", run.out_of_bounds.cite())
    if setup.unknown:
        _add(d, "unknown system", setup.unknown)
    ranks = [dev[0] for dev in run.devices]
    if len(set(ranks)) < len(ranks) or run.restart is not None:
        why = (f"rank numbers repeat in '# Using devices' ({len(ranks)} "
               f"lines, {len(set(ranks))} distinct ranks)"
               if len(set(ranks)) < len(ranks) else
               f"the sweep restarts at line {run.restart.line}: "
               f"{run.restart.text}")
        _add(d, "each process ran its own test",
             f"{why}: nccl-tests built without MPI (make MPI=1) runs one "
             "job per process, so the rows are of separate small jobs, "
             "not one across the nodes")
    multi = setup.nodes > 1 or (f.nnodes is not None and f.nnodes.value > 1)
    if multi:
        sock = f.transports.get("NET/Socket")
        if f.net is not None and f.net.value == "Socket":
            _add(d, "network on sockets", f.net.cite())
        elif sock is not None:
            _add(d, "network on sockets", sock.cite())
        elif f.ofi_provider is not None and f.ofi_provider.value in (
                "tcp", "sockets", "udp"):
            _add(d, "network on sockets", f.ofi_provider.cite())
        present = nics_per_node(setup.system) if setup.system else None
        if f.nics_in_use is not None and present and \
                f.nics_in_use.value < present and \
                not (f.net is not None and f.net.value == "Socket"):
            _add(d, "fewer NICs in use than present",
                 f"{f.nics_in_use.value} NIC(s) in use of the {present} a "
                 f"node has ({'--nic ' + setup.nic if setup.nic else setup.key}): "
                 f"{f.nics_in_use.cite()}")
        if f.gdr is not None and f.gdr.value is False and \
                not (f.net is not None and f.net.value == "Socket"):
            _add(d, "no GPUDirect RDMA",
                 "network channels stage through host memory: "
                 + f.gdr.cite())
    if top and setup.system is not None:
        _algorithm_causes(d, top, sh)
    if top and d.ratio is not None:
        _shape_causes(d, top)
    _dips(d)
    _average(d, top)


def _algorithm_causes(d: Diagnosis, top: list[Judged], sh: Shape) -> None:
    j = top[-1]
    e = j.expected
    if e is None:
        return
    f = d.run.facts
    ring = e.gbps("ring")
    if e.best in ("nvls", "nvls_tree") and ring and \
            abs(j.row.busbw_gbps / ring - 1) <= MATCH and \
            j.row.busbw_gbps < e.best_gbps * (1 - MATCH):
        said = (f" ({f.nvls.cite()})" if f.nvls is not None else
                f" (the model: {d.setup.system.name}'s NVSwitch reduces "
                "in the switch)")
        _add(d, "NVLS available but the numbers match ring",
             f"at {human_bytes(j.row.nbytes)}: measured "
             f"{_fmt(j.row.busbw_gbps)}, ring predicts {_fmt(ring)}, "
             f"{LABELS[e.best]} {_fmt(e.best_gbps)}{said}; check "
             "NCCL_NVLS_ENABLE and the NVSwitch fabric manager")
    s = d.setup.system
    if s.nvlink is not None and sh.k > 1:
        shm = d.run.facts.transports.get("SHM")
        p2p = d.run.facts.transports.get("P2P")
        if shm is not None and p2p is None:
            _add(d, "PCIe-only path inside the node",
                 "channels inside the node go through host shared memory, "
                 f"not NVLink: {shm.cite()}")
            return
        pcie = replace(s, name=s.name + "/pcie", nvlink=None)
        pe = expected(j.row.collective, j.row.nbytes, pcie, sh)
        if pe is not None and d.ratio is not None and d.ratio < HEALTHY \
                and abs(j.row.busbw_gbps / pe.best_gbps - 1) <= 0.25:
            _add(d, "PCIe-only path inside the node",
                 f"at {human_bytes(j.row.nbytes)}: measured "
                 f"{_fmt(j.row.busbw_gbps)} is what the PCIe path predicts "
                 f"({_fmt(pe.best_gbps)}), NVLink {_fmt(e.best_gbps)}; "
                 "check nvidia-smi topo -m and NCCL_P2P_DISABLE")


def _shape_causes(d: Diagnosis, top: list[Judged]) -> None:
    r = d.ratio
    span = (f"sizes {human_bytes(top[0].row.nbytes)}.."
            f"{human_bytes(top[-1].row.nbytes)}")
    if r < HEALTHY and not any(c.weight >= 60 for c in d.causes):
        ratios = [j.ratio for j in top]
        _add(d, "a plateau below the model: one slow link, NIC or node",
             f"{span} all run at {min(ratios):.2f}-{max(ratios):.2f} of "
             "the model: a ring moves at "
             "its slowest link, so one slow node, NIC or cable caps every "
             "rank; run the test on node pairs to find it")
    if r > FAST:
        _add(d, "measured above the model",
             f"{span}: {r:.2f}x the model; is the system "
             f"({d.setup.system.name if d.setup.system else '?'}) and "
             f"the node count ({d.setup.nodes}) the run's?")


def _dips(d: Diagnosis) -> None:
    have = [j for j in d.rows if j.ratio is not None and j.ratio > 0]
    for a, b in zip(have, have[1:]):
        if a.row.nbytes >= LATENCY_BOUND and b.row.nbytes > a.row.nbytes \
                and b.row.busbw_gbps < COLLAPSE * a.row.busbw_gbps and \
                all(c.row.busbw_gbps < COLLAPSE * a.row.busbw_gbps
                    for c in have if c.row.nbytes > b.row.nbytes):
            _add(d, "busbw collapses above one size",
                 f"line {b.row.line}: {_fmt(a.row.busbw_gbps)} at "
                 f"{human_bytes(a.row.nbytes)}, {_fmt(b.row.busbw_gbps)} "
                 f"at {human_bytes(b.row.nbytes)} and no better above: "
                 "larger messages meet a shared bottleneck (a congested "
                 "or misrouted link between switches or racks, adaptive "
                 "routing, a PCIe/NIC limit): test node pairs across it")
            break
    for a, b, c in zip(have, have[1:], have[2:]):
        if b.row.nbytes < 64 << 10:
            continue
        if b.ratio < DIP * a.ratio and b.ratio < DIP * c.ratio and \
                b.row.busbw_gbps < min(a.row.busbw_gbps, c.row.busbw_gbps):
            _add(d, "one size far below its neighbours",
                 f"line {b.row.line}: {human_bytes(b.row.nbytes)} at "
                 f"{_fmt(b.row.busbw_gbps)} between "
                 f"{_fmt(a.row.busbw_gbps)} and {_fmt(c.row.busbw_gbps)} "
                 "(a protocol or algorithm switch mistuned at that size, "
                 "or interference during it: rerun it)")
            return


def _average(d: Diagnosis, top: list[Judged]) -> None:
    avg = d.run.avg_busbw
    if avg is None or not d.rows:
        return
    top = max(d.rows, key=lambda j: j.row.busbw_gbps).row
    peak = top.busbw_gbps
    small = sum(1 for j in d.rows if j.row.nbytes < LATENCY_BOUND)
    if peak > 0 and avg.value < 0.6 * peak and small:
        _add(d, "Avg bus bandwidth dragged down by latency-bound sizes",
             f"{avg.cite()} averages all {len(d.rows)} sizes, {small} of "
             f"them under 1 MiB where latency dominates; the peak is "
             f"{_fmt(peak)} at {human_bytes(top.nbytes)}: judge the "
             "largest sizes")
