"""What the parsers produce: one :class:`Run` per benchmark run found in a
log, with its :class:`Row` s and the facts the log states about the job
(:class:`Facts`). Plain data; the parsers fill it, the diagnosis reads it."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    """One result line: a size of one collective.

    ``busbw_gbps`` is the figure the doctor judges: out-of-place where the
    run measured it, else in-place (nccl-tests' ``-O 0`` prints only
    in-place). ``wrong`` is nccl-tests' ``#wrong`` (elements that differ
    from the expected result) summed over both columns; ``None`` where the
    log has no such count (``-c 0`` prints ``N/A``; old versions print a
    maximum error instead).
    """

    nbytes: int
    collective: str
    busbw_gbps: float
    time_us: float = 0.0
    algbw_gbps: float = 0.0
    inplace_busbw_gbps: float | None = None
    wrong: int | None = None
    dtype: str = ""
    line: int = 0
    text: str = ""
    #: where a report carries its own model (the emulated cluster): the
    #: expected busbw and the variant it prices
    expected_gbps: float | None = None
    variant: str = ""
    #: the slowest single call of the point and how many calls it took
    #: (the emulated cluster's reports: a stall hides under a median)
    worst_us: float | None = None
    calls: int = 0


@dataclass
class Evidence:
    """A fact and the log line (1-based number and text) that states it."""

    value: object
    line: int = 0
    text: str = ""

    def cite(self) -> str:
        t = self.text.strip()
        if len(t) > 140:
            t = t[:137] + "..."
        return f"line {self.line}: {t}" if self.line else t


@dataclass
class Facts:
    """What ``NCCL_DEBUG=INFO`` lines (and the header) say about the job;
    each fact keeps the line that said it. Missing facts stay ``None``."""

    version: Evidence | None = None
    nranks: Evidence | None = None
    nnodes: Evidence | None = None
    local_ranks: Evidence | None = None
    #: "IB", "Socket", "OFI" (libfabric: EFA and others)
    net: Evidence | None = None
    #: NICs the network plugin lists for this host
    nics_in_use: Evidence | None = None
    #: OFI provider name ("efa", "tcp", ...)
    ofi_provider: Evidence | None = None
    #: True if a channel over the network says GDRDMA, False if network
    #: channels never do (or a line says GPU Direct RDMA is disabled)
    gdr: Evidence | None = None
    #: transports seen on channels: "P2P", "SHM", "NET/IB", "NET/Socket", ...
    transports: dict[str, Evidence] = field(default_factory=dict)
    nvls: Evidence | None = None
    collnet: Evidence | None = None
    #: every distinct ``via ...`` of the channel lines
    vias: set[str] = field(default_factory=set)
    rings: int = 0
    trees: int = 0
    #: number of NCCL INFO lines seen
    info_lines: int = 0


@dataclass
class Run:
    """One benchmark run: a header, its rows, what the log says of it."""

    source: str
    index: int = 0
    kind: str = "nccl-tests"
    collective: str = ""
    collective_how: str = ""
    rows: list[Row] = field(default_factory=list)
    #: (rank, host, device, GPU name) from ``# Using devices``
    devices: list[tuple[int, str, int, str]] = field(default_factory=list)
    nthread: int | None = None
    ngpus: int | None = None
    avg_busbw: Evidence | None = None
    out_of_bounds: Evidence | None = None
    truncated: bool = False
    #: the first row whose size is not larger than the one before it (the
    #: sweep restarts: processes printing their own runs interleaved)
    restart: "Row | None" = None
    facts: Facts = field(default_factory=Facts)
    #: the run's own model, where it carries one (emulated-cluster reports)
    own_model: dict | None = None
    #: ranks, nodes, GPUs per node stated by a kit report
    stated: dict = field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(d[1] for d in self.devices))

    @property
    def gpu_names(self) -> list[str]:
        return list(dict.fromkeys(d[3] for d in self.devices))
