"""Which system a log ran on: GPU names to hardware-table keys, and the
node the flags describe (``--nic COUNTxSPEED`` or a fabric key).

:data:`GPU_NAMES` maps the device names nccl-tests prints (``NVIDIA
A100-SXM4-80GB``, ``NVIDIA H100 80GB HBM3``, ``AMD Instinct MI300X``) to
candidate keys of :data:`warmup_kit.model.hardware.SYSTEMS`, most specific
pattern first. A candidate that the table does not (yet) have is skipped,
so a system added to the table is picked up by adding its key here; a GPU
with no key in the table is reported as an unknown system, never priced
as a look-alike.
"""
from __future__ import annotations

import re
from dataclasses import replace

from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.model import hardware
from warmup_kit.model.hardware import Cluster, System

#: (pattern on the GPU name, SYSTEMS keys to try in order, label). The DGX
#: A100 shipped with 40 GB and 80 GB A100 SXM4 GPUs on the same NVLink 3
#: and HDR fabric, so both sizes price as ``dgx-a100`` unless the table
#: has a key of the 40 GB model.
GPU_NAMES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (r"GB200", ("gb200-nvl72",), "GB200"),
    (r"GB300", ("gb300-nvl72",), "GB300"),
    (r"\bB200\b", ("dgx-b200", "hgx-b200", "b200"), "B200"),
    (r"H200", ("hgx-h200", "dgx-h200", "h200"), "H200"),
    (r"H100.*NVL\b", ("h100-nvl", "h100-pcie-nvlink"), "H100 NVL"),
    (r"H100.*PCIe", ("h100-pcie",), "H100 PCIe"),
    (r"H100", ("dgx-h100", "hgx-h100", "h100-sxm"), "H100 SXM"),
    (r"A100.*PCIE|A100.*PCIe", ("a100-pcie", "a100-pcie-80gb"),
     "A100 PCIe"),
    (r"A100.*40GB", ("dgx-a100-40gb", "a100-40gb", "dgx-a100"),
     "A100 SXM4 40GB"),
    (r"A100", ("dgx-a100", "dgx-a100-80gb", "a100-80gb"), "A100 SXM4 80GB"),
    (r"MI300X", ("mi300x", "amd-mi300x"), "AMD MI300X"),
    (r"MI250", ("mi250x", "amd-mi250x"), "AMD MI250X"),
    (r"L40S", ("l40s-8x", "l40s", "l40s-pcie"), "L40S"),
    (r"L40\b", ("l40",), "L40"),
)
_COMPILED = [(re.compile(p, re.I), keys, label) for p, keys, label in
             GPU_NAMES]


def resolve_gpu(name: str) -> tuple[str | None, str]:
    """(SYSTEMS key or None, what the name was recognised as)."""
    for rx, keys, label in _COMPILED:
        if rx.search(name):
            for k in keys:
                if k in hardware.SYSTEMS:
                    return k, label
            return None, label
    return None, name.strip() or "?"


def known() -> list[str]:
    return sorted(hardware.SYSTEMS)


_NIC = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+(?:\.\d+)?)\s*"
                  r"(?:G|Gb|Gbit|Gbps|Gb/s)?\s*$", re.I)


def parse_nic(text: str) -> str:
    """A ``--nic`` value, checked and normalised: a fabric key of
    :data:`warmup_kit.model.hardware.FABRICS` (``"roce-400g"``, ``"gcp-tcpx"``:
    count, rate and technology) or ``COUNTxSPEED`` in Gbit/s per NIC
    (``"4x100G"``: the system's own NIC technology at that rate)."""
    t = str(text).strip()
    if t.lower() in hardware.FABRICS:
        return t.lower()
    m = _NIC.match(t)
    if not m:
        raise DoctorInputError(
            f"--nic {text!r}: expected COUNTxSPEED in Gbit/s per NIC, e.g. "
            f"4x100G or 8x400G, or a fabric: {', '.join(sorted(hardware.FABRICS))}")
    count, gbit = int(m.group(1)), float(m.group(2))
    if not 1 <= count <= 64 or not 0 < gbit <= 10000:
        raise DoctorInputError(f"--nic {text!r}: 1..64 NICs of 0..10000 "
                               "Gbit/s each")
    return f"{count}x{gbit:g}G"


def node_system(key: str, nic: str | None = None) -> System:
    """System ``key`` with the NICs ``nic`` describes (:func:`parse_nic`'s
    forms) in place of its own.

    A fabric key, or a count that divides the node's GPUs or is a multiple
    of them, is :func:`warmup_kit.model.hardware.with_nic`'s node, the one
    ``cluster(key, nodes, nic=...)`` builds. Any other count (3 NICs for 8
    GPUs), which the hardware table refuses, is spread evenly as a per-GPU
    share of the node's total, so a reader's odd node can still be priced.
    """
    if key not in hardware.SYSTEMS:
        raise DoctorInputError(f"unknown system {key!r}; the model knows "
                               f"{', '.join(known())}")
    s = hardware.SYSTEMS[key]
    if nic is None:
        return s
    nic = parse_nic(nic)
    try:
        return hardware.with_nic(key, nic)
    except ValueError:          # a count that neither divides nor
        pass                    # multiplies the node's GPUs
    count, gbit = hardware.parse_nic(nic)
    g = s.gpus_per_node
    link = replace(s.nic, name=f"{count}x {gbit:g} Gb/s NIC",
                   gbps=gbit / 8.0 * count / g,
                   source=f"--nic {nic}, shared by {g} GPUs")
    return replace(s, name=f"{key}/{nic}", nic=link, nics_per_node=None,
                   nic_count=count)


def nics_per_node(s: System) -> int:
    """Scale-out NICs a node of ``s`` shows NCCL: its rails (one per GPU
    unless fewer; striped NICs, AWS's EFA, count as one port per GPU), or
    for a count :func:`node_system` shared evenly, that count."""
    if s.nics_per_node is not None:
        return s.nics_per_node
    return s.nic_count if s.nic_count is not None else s.gpus_per_node


def build_cluster(s: System, nodes: int) -> Cluster:
    return Cluster(s, nodes)


def describe(s: System) -> dict:
    """The system as the JSON output reports it."""
    return {"name": s.name, "gpu": s.gpu.name,
            "gpus_per_node": s.gpus_per_node,
            "nvlink_domain": s.nvlink_domain,
            "nvlink": None if s.nvlink is None else s.nvlink.name,
            "nvlink_gbps": None if s.nvlink is None else s.nvlink.gbps,
            "nic": s.nic.name, "nic_gbps": s.nic.gbps,
            "nics_per_node": nics_per_node(s),
            "pcie": s.pcie.name, "nvls": bool(s.nvls_efficiency)}


__all__ = ["GPU_NAMES", "build_cluster", "describe", "known",
           "nics_per_node", "node_system", "parse_nic", "resolve_gpu"]
