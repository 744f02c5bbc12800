"""What fails in a GPU fleet, grouped the way an operator acts on it (book,
Chapter 8): Llama 3's Table 5 (component -> interruptions) regrouped by
the chapter's table of causes, each row with whether the failure takes a
node away for repair or only restarts the job.

The regrouping is ours; the counts are the report's
(:data:`warmup_kit.failures.models.published.LLAMA3_TABLE5`).
"""
from __future__ import annotations

from warmup_kit.failures.models.published import LLAMA3, LLAMA3_TABLE5

#: cause -> (Table 5 components, takes a node or switch away for repair)
CAUSES = {
    "GPU lost or faulty (Xid 79, 119/120)": (
        ("Faulty GPU", "GPU System Processor"), True),
    "GPU memory errors (HBM ECC, SRAM)": (
        ("GPU HBM3 Memory", "GPU SRAM Memory"), True),
    "network: NIC, switch or cable": (
        ("Network Switch/Cable", "NIC"), True),
    "host hardware and unplanned maintenance": (
        ("Host Maintenance", "SSD", "Power Supply", "Server Chassis",
         "IO Expansion Board", "CPU", "System Memory"), True),
    "thermal interface or sensor": (
        ("GPU Thermal Interface + Sensor",), True),
    "silent data corruption": (("Silent Data Corruption",), True),
    "software, dependencies, NCCL hangs": (
        ("Software Bug", "Dependency", "NCCL Watchdog Timeouts"), False),
}


def llama3_by_cause(table=LLAMA3_TABLE5, causes=CAUSES) -> list[dict]:
    """Table 5's interruptions summed per cause: ``cause``, ``components``,
    ``count``, ``share`` (of the unexpected interruptions) and
    ``repair``. Raises ValueError if a component is missing from the
    causes or named twice, or the counts do not add up to the report's
    total."""
    counts = {name: n for name, _, n, _ in table}
    named = [c for comps, _ in causes.values() for c in comps]
    if sorted(named) != sorted(counts):
        missing = sorted(set(counts) - set(named))
        extra = sorted({c for c in named if named.count(c) > 1}
                       | (set(named) - set(counts)))
        raise ValueError(f"causes do not cover Table 5 once each: missing "
                         f"{missing}, unknown or repeated {extra}")
    total = LLAMA3["unexpected"]
    if sum(counts.values()) != total:
        raise ValueError(f"Table 5 adds up to {sum(counts.values())}, "
                         f"not {total}")
    return [{"cause": cause, "components": comps,
             "count": sum(counts[c] for c in comps),
             "share": sum(counts[c] for c in comps) / total,
             "repair": repair}
            for cause, (comps, repair) in causes.items()]


def repair_share(rows=None) -> float:
    """The share of Llama 3's unexpected interruptions whose cause takes
    hardware away for repair (every such interruption counted, although
    some clear with a GPU reset: an upper bound)."""
    rows = llama3_by_cause() if rows is None else rows
    return sum(r["count"] for r in rows if r["repair"]) / LLAMA3["unexpected"]
