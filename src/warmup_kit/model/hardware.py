"""The bandwidth hierarchy: GPU, NVLink, NIC and PCIe figures per system.

Book, Chapter 6 ("Topology"). Every figure carries a source string: a vendor
datasheet, NCCL's own topology constants (``src/graph/topo.h``,
``src/graph/tuning.cc``), or a published measurement. Bandwidths are per GPU
and **per direction** (``*_gbps`` = gigabytes per second, 1e9 B/s): NVLink 4's
"900 GB/s" is 450 GB/s each way, a 400 Gb/s NIC is 50 GB/s each way.

``efficiency`` on a link is the fraction of the line rate that large NCCL
transfers actually reach (packet and protocol overhead); ``gemm_efficiency``
on a GPU is the fraction of dense peak a large cuBLAS GEMM reaches. The
model multiplies; it never fits a published end result.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

NCCL_TOPO = "NCCL src/graph/topo.h (SM80/SM90/SM100_NVLINK_BW: per-link " \
            "bandwidth NCCL reaches after protocol overhead)"
NCCL_TUNING = "NCCL src/graph/tuning.cc hwLat (ring, Simple protocol, " \
              "per-step latency)"


@dataclass(frozen=True)
class Link:
    """One link class of a GPU (NVLink, NIC, PCIe), per direction.

    Attributes:
        name: e.g. ``"NVLink 4"``.
        gbps: line rate per GPU per direction, GB/s.
        efficiency: fraction of ``gbps`` that large transfers reach.
        latency_s: per-hop latency of one message (alpha).
        source: where the three figures come from.
    """

    name: str
    gbps: float
    efficiency: float
    latency_s: float
    source: str

    @property
    def achievable_gbps(self) -> float:
        """Bandwidth large transfers reach, GB/s per direction."""
        return self.gbps * self.efficiency

    @property
    def bytes_per_s(self) -> float:
        """Achievable bandwidth in B/s (what the simulator uses)."""
        return self.achievable_gbps * 1e9


@dataclass(frozen=True)
class GPU:
    """One accelerator: dense peak FLOP/s per precision and HBM.

    Attributes:
        name: marketing name.
        tflops: dense (no sparsity) peak TFLOP/s, as (precision, value) pairs.
        hbm_gb: memory capacity, GB.
        hbm_tbps: memory bandwidth, TB/s.
        gemm_efficiency: fraction of dense peak a large GEMM reaches.
        hbm_efficiency: fraction of HBM bandwidth a streaming kernel reaches.
        sources: (field, source) pairs.
    """

    name: str
    tflops: tuple[tuple[str, float], ...]
    hbm_gb: float
    hbm_tbps: float
    gemm_efficiency: float
    hbm_efficiency: float
    sources: tuple[tuple[str, str], ...] = ()

    def peak_flops(self, precision: str = "bf16") -> float:
        """Dense peak in FLOP/s for ``precision`` ("bf16", "fp8", "tf32")."""
        table = dict(self.tflops)
        if precision not in table:
            raise ValueError(f"{self.name} has no {precision!r} peak; "
                             f"choose from {sorted(table)}")
        return table[precision] * 1e12

    def source(self, name: str) -> str:
        """Where the figure ``name`` comes from."""
        return dict(self.sources)[name]


@dataclass(frozen=True)
class System:
    """A node design: GPUs, their NVLink domain, NICs, PCIe.

    Attributes:
        name: key in :data:`SYSTEMS`.
        gpu: the accelerator.
        gpus_per_node: GPUs in one node (server or compute tray).
        nvlink_domain: GPUs that share one NVLink/NVSwitch fabric
            (8 on a DGX; 72 across 18 trays on GB200 NVL72).
        nvlink: per-GPU NVLink bandwidth (``None`` if the GPUs only have PCIe).
        nic: per-GPU scale-out bandwidth (one NIC per GPU on these systems).
        pcie: the GPU's host link.
        nvls_efficiency: NVLink SHARP (in-switch reduction) efficiency; 0 when
            the NVSwitch cannot reduce (A100).
        base_latency_s: fixed cost of launching one collective.
        nics_per_node: scale-out NICs per node, shared evenly by the GPUs;
            ``None`` = one per GPU (every system in :data:`SYSTEMS`). Fewer
            is a single-rail or cut-down network (:func:`with_nics`).
        sources: (field, source) pairs for the system-level figures.
    """

    name: str
    gpu: GPU
    gpus_per_node: int
    nvlink_domain: int
    nvlink: Link | None
    nic: Link
    pcie: Link
    nvls_efficiency: float = 0.0
    base_latency_s: float = 8.4e-6
    nics_per_node: int | None = None
    sources: tuple[tuple[str, str], ...] = field(default=())

    def source(self, name: str) -> str:
        """Where the figure ``name`` comes from."""
        return dict(self.sources)[name]


@dataclass(frozen=True)
class Cluster:
    """``nodes`` identical nodes of a :class:`System`; GPU ids are global.

    GPU ``g`` sits in node ``g // gpus_per_node`` and NVLink domain
    ``g // nvlink_domain``. See :mod:`warmup_kit.model.topology` for placements.
    """

    system: System
    nodes: int = 1

    @property
    def gpus_per_node(self) -> int:
        return self.system.gpus_per_node

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.system.gpus_per_node

    @property
    def domain_size(self) -> int:
        """GPUs per NVLink domain, capped by the cluster size."""
        return min(self.system.nvlink_domain, self.n_gpus)

    def node_of(self, gpu: int) -> int:
        return gpu // self.system.gpus_per_node

    def domain_of(self, gpu: int) -> int:
        return gpu // self.system.nvlink_domain


# --------------------------------------------------------------- the table
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), 2021"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (SXM5), 2023"
_B200_DS = "NVIDIA DGX B200 datasheet, 2024 (per GPU = system / 8)"
_GB200_DS = "NVIDIA GB200 NVL72 datasheet, 2024 (per GPU = rack / 72)"
_GEMM = ("cuBLAS large BF16 GEMM throughput: ~250 TFLOP/s on A100, "
         "~700-750 on H100 SXM, ~1.6 PFLOP/s on B200 (vendor and "
         "independent matmul benchmarks)")
_STREAM = "device-memory copy benchmarks (nvbandwidth, BabelStream): ~85%"

A100 = GPU("A100-SXM4-80GB",
           (("bf16", 312.0), ("fp16", 312.0), ("tf32", 156.0),
            ("fp32", 19.5)),
           hbm_gb=80.0, hbm_tbps=2.039, gemm_efficiency=0.80,
           hbm_efficiency=0.85,
           sources=(("tflops", _A100_DS), ("hbm_gb", _A100_DS),
                    ("hbm_tbps", _A100_DS), ("gemm_efficiency", _GEMM),
                    ("hbm_efficiency", _STREAM)))
H100 = GPU("H100-SXM5-80GB",
           (("bf16", 989.0), ("fp16", 989.0), ("fp8", 1979.0),
            ("tf32", 494.5), ("fp32", 67.0)),
           hbm_gb=80.0, hbm_tbps=3.35, gemm_efficiency=0.75,
           hbm_efficiency=0.85,
           sources=(("tflops", _H100_DS), ("hbm_gb", _H100_DS),
                    ("hbm_tbps", _H100_DS), ("gemm_efficiency", _GEMM),
                    ("hbm_efficiency", _STREAM)))
B200 = GPU("B200", (("bf16", 2250.0), ("fp16", 2250.0), ("fp8", 4500.0),
                    ("tf32", 1100.0), ("fp32", 75.0)),
           hbm_gb=180.0, hbm_tbps=8.0, gemm_efficiency=0.70,
           hbm_efficiency=0.85,
           sources=(("tflops", _B200_DS), ("hbm_gb", _B200_DS),
                    ("hbm_tbps", _B200_DS), ("gemm_efficiency", _GEMM),
                    ("hbm_efficiency", _STREAM)))
GB200 = GPU("B200 (GB200 superchip)",
            (("bf16", 2500.0), ("fp16", 2500.0), ("fp8", 5000.0),
             ("tf32", 1250.0), ("fp32", 80.0)),
            hbm_gb=186.0, hbm_tbps=8.0, gemm_efficiency=0.70,
            hbm_efficiency=0.85,
            sources=(("tflops", _GB200_DS), ("hbm_gb", _GB200_DS),
                     ("hbm_tbps", _GB200_DS), ("gemm_efficiency", _GEMM),
                     ("hbm_efficiency", _STREAM)))

NVLINK3 = Link("NVLink 3 (12 links)", 300.0, 20.0 / 25.0, 3.4e-6,
               "A100 datasheet: 600 GB/s bidirectional = 12 x 25 GB/s per "
               f"direction; efficiency 20/25 from {NCCL_TOPO}; latency "
               f"from {NCCL_TUNING}")
NVLINK4 = Link("NVLink 4 (18 links)", 450.0, 20.6 / 25.0, 3.4e-6,
               "H100 datasheet: 900 GB/s bidirectional = 18 x 25 GB/s per "
               f"direction; efficiency 20.6/25 from {NCCL_TOPO} (~370 GB/s, "
               "as NCCL's maintainer states in nccl-tests issue #212); "
               f"latency from {NCCL_TUNING}")
NVLINK5 = Link("NVLink 5 (18 links)", 900.0, 40.1 / 50.0, 3.4e-6,
               "B200/GB200 datasheets: 1.8 TB/s bidirectional = 18 x 50 GB/s "
               f"per direction; efficiency 40.1/50 from {NCCL_TOPO}; "
               f"latency from {NCCL_TUNING}")
_NET_LAT = f"latency 14 us per network step from {NCCL_TUNING}"
HDR200 = Link("InfiniBand HDR 200 Gb/s (ConnectX-6)", 25.0, 0.94, 14e-6,
              "DGX A100 user guide: 8x 200 Gb/s HDR for compute; efficiency "
              "23.5/25 GB/s as measured with ib_write_bw / used by "
              f"alibaba astra-sim (CX6_BW); {_NET_LAT}")
NDR400 = Link("InfiniBand NDR 400 Gb/s (ConnectX-7)", 50.0, 0.97, 14e-6,
              "DGX H100 / DGX B200 user guides: 8x 400 Gb/s NDR; efficiency "
              "48.5/50 GB/s as measured with ib_write_bw / used by alibaba "
              f"astra-sim (CX7_BW); {_NET_LAT}")
_PCIE_EFF = "0.8 of line rate after TLP overhead (alibaba astra-sim)"
PCIE4 = Link("PCIe Gen4 x16", 32.0, 0.8, 5.7e-6,
             f"PCI-SIG Gen4: 16 GT/s x16 ~ 32 GB/s per direction; {_PCIE_EFF};"
             f" latency: PCI ring Simple from {NCCL_TUNING}")
PCIE5 = Link("PCIe Gen5 x16", 64.0, 0.8, 5.7e-6,
             f"PCI-SIG Gen5: 32 GT/s x16 ~ 64 GB/s per direction; {_PCIE_EFF};"
             f" latency: PCI ring Simple from {NCCL_TUNING}")

_NVLS = ("NCCL src/graph/tuning.cc nvlsEfficiency (Hopper 0.85, Blackwell "
         "0.74); A100's NVSwitch gen 2 has no SHARP")
_BASE = "NCCL src/graph/tuning.cc baseLat, Simple protocol: 8.4 us"

SYSTEMS: dict[str, System] = {
    "dgx-a100": System(
        "dgx-a100", A100, gpus_per_node=8, nvlink_domain=8, nvlink=NVLINK3,
        nic=HDR200, pcie=PCIE4, nvls_efficiency=0.0,
        sources=(("gpus_per_node", "DGX A100 user guide: 8x A100 SXM4"),
                 ("nvlink_domain", "DGX A100: 6 NVSwitch gen 2, one domain"),
                 ("nvls_efficiency", _NVLS), ("base_latency_s", _BASE))),
    "dgx-h100": System(
        "dgx-h100", H100, gpus_per_node=8, nvlink_domain=8, nvlink=NVLINK4,
        nic=NDR400, pcie=PCIE5, nvls_efficiency=0.85,
        sources=(("gpus_per_node", "DGX H100 user guide: 8x H100 SXM5"),
                 ("nvlink_domain", "DGX H100: 4 NVSwitch gen 3, one domain"),
                 ("nvls_efficiency", _NVLS), ("base_latency_s", _BASE))),
    "dgx-b200": System(
        "dgx-b200", B200, gpus_per_node=8, nvlink_domain=8, nvlink=NVLINK5,
        nic=NDR400, pcie=PCIE5, nvls_efficiency=0.74,
        sources=(("gpus_per_node", _B200_DS),
                 ("nvlink_domain", "DGX B200: 2 NVSwitch chips, one domain"),
                 ("nvls_efficiency", _NVLS), ("base_latency_s", _BASE))),
    "gb200-nvl72": System(
        "gb200-nvl72", GB200, gpus_per_node=4, nvlink_domain=72,
        nvlink=NVLINK5, nic=NDR400, pcie=PCIE5, nvls_efficiency=0.74,
        sources=(("gpus_per_node", "GB200 NVL72: 18 compute trays of "
                  "2 Grace + 4 Blackwell GPUs"),
                 ("nvlink_domain", _GB200_DS + ": 72 GPUs, 9 NVLink switch "
                  "trays, 130 TB/s"),
                 ("nic", "GB200 NVL72 compute tray: one ConnectX-7 400 Gb/s "
                  "per GPU for the scale-out fabric"),
                 ("nvls_efficiency", _NVLS), ("base_latency_s", _BASE))),
}


def cluster(name: str, nodes: int = 1) -> Cluster:
    """A cluster of ``nodes`` nodes of system ``name`` (a :data:`SYSTEMS` key).

    For GB200 NVL72 a node is one compute tray (4 GPUs): 18 nodes = 1 rack.
    """
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from "
                         f"{sorted(SYSTEMS)}")
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be an int >= 1, got {nodes!r}")
    return Cluster(SYSTEMS[name], nodes)


def hierarchy_gbps(name: str) -> dict[str, float]:
    """Line rates per GPU per direction, GB/s: HBM, NVLink, PCIe, NIC.

    The like-for-like NVLink / NIC ratio (Chapter 6) is
    ``h["nvlink"] / h["nic"]``: 12x on DGX A100, 9x on DGX H100.
    """
    s = SYSTEMS[name]
    out = {"hbm": s.gpu.hbm_tbps * 1e3, "pcie": s.pcie.gbps,
           "nic": s.nic.gbps}
    if s.nvlink is not None:
        out["nvlink"] = s.nvlink.gbps
    return out


def with_nics(name: str, nics_per_node: int) -> System:
    """System ``name`` with only ``nics_per_node`` NICs per node (each of
    the node's GPUs reaches the network through its share of them): the
    single-rail network of Chapters 4 and 6 is ``with_nics(name, 1)``."""
    s = SYSTEMS[name]
    if not 1 <= nics_per_node <= s.gpus_per_node or \
            s.gpus_per_node % nics_per_node:
        raise ValueError(f"nics_per_node must divide {s.gpus_per_node}")
    return replace(s, name=f"{name}/{nics_per_node}nic",
                   nics_per_node=nics_per_node)
