"""The job a run describes: which system, how many ranks, nodes and GPUs
per node, each with where the doctor learnt it (the log's ``# Using
devices`` lines, its ``NCCL INFO`` lines, a kit report, or a flag).

Flags fill what a log does not say and override what it does (the output
says so). The system is the ``--system`` key, else the ``--gpu`` name, else
the GPU name in the log, resolved by
:func:`~warmup_kit.doctor.systems.resolve_gpu`; without one the run is
judged against nothing and its system reported as unknown.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.doctor.records import Run
from warmup_kit.doctor.systems import (known, node_system, parse_nic,
                                       resolve_gpu)
from warmup_kit.model.hardware import System


@dataclass
class Flags:
    """What the command line adds (None: not given)."""

    gpu: str | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    nic: str | None = None
    system: str | None = None


@dataclass
class Setup:
    """A run's system and shape; ``unknown`` says why there is no system."""

    system: System | None
    key: str | None
    ranks: int
    nodes: int
    gpus_per_node: int
    how: dict[str, str] = field(default_factory=dict)
    unknown: str = ""
    gpu_name: str = ""
    nic: str | None = None


def _count(run: Run) -> tuple[int | None, int | None, int | None, str]:
    """(ranks, nodes, ranks per node, source) from the log itself."""
    if run.devices:
        hosts: dict[str, int] = {}
        for _, h, _, _ in run.devices:
            hosts[h] = hosts.get(h, 0) + 1
        per = max(hosts.values())
        n = max(len(run.devices), 1 + max(d[0] for d in run.devices))
        if n > len(run.devices):            # the list was cut: trust ranks
            return (n, None, None, f"# Using devices: rank {n - 1} seen "
                    f"({len(run.devices)} of the lines)")
        return (n, len(hosts), per,
                f"# Using devices: {n} ranks on {len(hosts)} host(s)")
    f = run.facts
    if f.nranks is not None:
        nodes = f.nnodes.value if f.nnodes else None
        per = f.local_ranks.value if f.local_ranks else None
        return f.nranks.value, nodes, per, f"line {f.nranks.line} (NCCL INFO)"
    st = run.stated
    if st.get("ranks"):
        return (st["ranks"], st.get("nodes"), st.get("gpus_per_node"),
                f"{run.kind} header")
    return None, None, None, ""


def resolve(run: Run, flags: Flags) -> Setup:
    """The :class:`Setup` of ``run`` under ``flags``."""
    how: dict[str, str] = {}
    ranks, nodes, per, src = _count(run)
    if ranks:
        how["ranks"] = src
    if nodes:
        how["nodes"] = src
    if per:
        how["gpus_per_node"] = src
    if flags.nodes is not None:
        nodes, how["nodes"] = flags.nodes, "--nodes"
    if flags.gpus_per_node is not None:
        per, how["gpus_per_node"] = flags.gpus_per_node, "--gpus-per-node"
    nic = parse_nic(flags.nic) if flags.nic else None
    key, gpu_name, unknown = None, "", ""
    if flags.system:
        if flags.system not in known():
            raise DoctorInputError(
                f"--system {flags.system!r}: unknown system; the model "
                f"knows {', '.join(known())}")
        key, how["system"] = flags.system, "--system"
    else:
        name = flags.gpu or (run.gpu_names[0] if run.gpu_names else "")
        gpu_name = name
        if name:
            key, label = resolve_gpu(name)
            how["system"] = ("--gpu" if flags.gpu else
                             "GPU name in # Using devices") + f": {name}"
            if key is None:
                unknown = (f"unknown system: the model has no entry for "
                           f"{label} ({name!r}); it knows "
                           f"{', '.join(known())} (name one with --system)")
        elif run.own_model is None:
            unknown = ("unknown system: the log names no GPU (no '# Using "
                       "devices' lines); give --system or --gpu")
    system = node_system(key, nic) if key else None
    if system is not None:
        if per is None:
            if ranks and nodes:
                per = -(-ranks // nodes)
            else:
                per = system.gpus_per_node
            how.setdefault("gpus_per_node", "assumed: a full node")
        if nodes is None:
            nodes = -(-ranks // per) if ranks else 1
            how.setdefault("nodes", "assumed: ranks / GPUs per node")
        if not ranks:
            ranks = nodes * per
            how.setdefault("ranks", "nodes x GPUs per node")
        if per > system.gpus_per_node:
            raise DoctorInputError(
                f"{run.source}: {per} ranks per node, but a "
                f"{system.name} node has {system.gpus_per_node} GPUs "
                "(-g/-t or --gpus-per-node too large, or another system?)")
        if ranks % nodes or ranks // nodes > system.gpus_per_node:
            raise DoctorInputError(
                f"{run.source}: {ranks} ranks do not split evenly over "
                f"{nodes} nodes of {system.gpus_per_node} GPUs")
    return Setup(system, key, ranks or 0, nodes or 1, per or 0, how,
                 unknown, gpu_name, nic)
