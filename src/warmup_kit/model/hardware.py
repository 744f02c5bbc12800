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

A node's scale-out network can be swapped: ``cluster(name, nodes,
nic="4x100G")`` (COUNTxSPEED, Gbit/s per NIC) or ``nic="efa-p5"`` (a
:data:`FABRICS` key: count, rate and technology). Fewer NICs than GPUs are
shared (``System.rails``, ``System.gpu_nic``); more are striped into one
port per GPU. ``tests/test_hardware_table.py`` holds the figures against
their sources and the NCCL model against published nccl-tests runs.
"""
from __future__ import annotations

import math
import re
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
        precision_efficiency: (precision, fraction) pairs where a large
            GEMM of that precision reaches another fraction of its peak
            than ``gemm_efficiency`` (Hopper's FP8).
        tensor_clock: sustained tensor throughput as a fraction of the
            datasheet's, below 1 for a part run under a lower power limit
            than its datasheet's (:func:`power_limited`). Times use it; MFU
            still divides by the datasheet peak, as the sources do.
    """

    name: str
    tflops: tuple[tuple[str, float], ...]
    hbm_gb: float
    hbm_tbps: float
    gemm_efficiency: float
    hbm_efficiency: float
    sources: tuple[tuple[str, str], ...] = ()
    precision_efficiency: tuple[tuple[str, float], ...] = ()
    tensor_clock: float = 1.0

    def peak_flops(self, precision: str = "bf16") -> float:
        """Dense peak in FLOP/s for ``precision`` ("bf16", "fp8", "tf32")."""
        table = dict(self.tflops)
        if precision not in table:
            raise ValueError(f"{self.name} has no {precision!r} peak; "
                             f"choose from {sorted(table)}")
        return table[precision] * 1e12

    def gemm_flops(self, precision: str = "bf16") -> float:
        """FLOP/s a large GEMM of ``precision`` sustains: the dense peak x
        that precision's GEMM efficiency x the tensor clock."""
        eff = dict(self.precision_efficiency).get(precision,
                                                  self.gemm_efficiency)
        return self.peak_flops(precision) * eff * self.tensor_clock

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
        nics_per_node: scale-out NIC ports per node as NCCL uses them
            (its rails), shared evenly by the GPUs; ``None`` = one per GPU.
            Fewer is a single-rail or cut-down network (:func:`with_nics`,
            ``cluster(..., nic="4x100G")``).
        intra: how the NVLink-class links join the domain: ``"switch"``
            (NVSwitch: a GPU reaches any peer at its full NVLink rate) or
            ``"mesh"`` (AMD xGMI: ``nvlink_domain - 1`` point-to-point links,
            ``nvlink.gbps`` is their sum, a group of ``k`` GPUs uses ``k-1``).
        nic_count: physical NICs per node when several of them are striped
            into one port per GPU (AWS p5: 32 x 100G EFA, 4 per GPU, which
            the EFA plugin presents to NCCL as one device per GPU); ``None``
            when the ports are the NICs.
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
    intra: str = "switch"
    nic_count: int | None = None

    def source(self, name: str) -> str:
        """Where the figure ``name`` comes from."""
        return dict(self.sources)[name]

    @property
    def rails(self) -> int:
        """NIC ports per node (NCCL's rails)."""
        return self.nics_per_node or self.gpus_per_node

    @property
    def gpus_per_nic(self) -> float:
        """GPUs that share one NIC port (0.5 would mean two ports a GPU;
        such nodes are folded into one wider port per GPU)."""
        return self.gpus_per_node / self.rails

    @property
    def node_nic_gbps(self) -> float:
        """Scale-out line rate of the whole node, GB/s per direction."""
        return self.rails * self.nic.gbps

    @property
    def gpu_nic(self) -> Link:
        """The NIC bandwidth one GPU gets when every GPU of the node sends
        at once: its share of the node's ports (a :class:`Link` at
        ``node_nic_gbps / gpus_per_node``)."""
        if self.rails == self.gpus_per_node:
            return self.nic
        return replace(self.nic, name=f"{self.nic.name}, 1/"
                       f"{self.gpus_per_nic:g} per GPU",
                       gbps=self.node_nic_gbps / self.gpus_per_node)


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
_FP8_GEMM = ("cuBLASLt FP8 GEMM on H100 SXM (Azure ND H100 v5 benchmark "
             "results, AI-benchmarking-guide, CUDA 12.6): 1,290 TFLOP/s at "
             "8192^3 and 1,351 at 6144 x 12288 x 12288, of the 1,979 dense "
             "peak: 0.67")

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
                    ("hbm_efficiency", _STREAM),
                    ("precision_efficiency", _FP8_GEMM)),
           precision_efficiency=(("fp8", 0.67),))
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


# ------------------------------------------------- more systems (issue 28)
# Each figure: the vendor's datasheet (URL and the book/references.bib key in
# the source string); dense peaks are the datasheets' sparse figures / 2.
_A100_40_DS = ("NVIDIA A100 datasheet (SXM4 40GB column), "
               "https://www.nvidia.com/content/dam/en-zz/Solutions/"
               "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-"
               "1758950-r4-web.pdf [nvidia2021a100]")
_H100_PCIE_DS = ("NVIDIA H100 datasheet (H100 PCIe column: BF16 1,513 "
                 "TFLOP/s with sparsity, 2.0 TB/s HBM2e, NVLink bridge "
                 "600 GB/s, PCIe Gen5 128 GB/s), https://resources.nvidia."
                 "com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet "
                 "[nvidia2023h100]")
_H200_DS = ("NVIDIA H200 Tensor Core GPU product page and datasheet (SXM: "
            "141 GB HBM3e at 4.8 TB/s, BF16 1,979 TFLOP/s with sparsity, "
            "NVLink 900 GB/s), https://www.nvidia.com/en-us/data-center/"
            "h200/ [nvidia2024h200]")
_MI300X_DS = ("AMD Instinct MI300X data sheet (192 GB HBM3 at 5.3 TB/s, "
              "BF16 1,307.4 TFLOP/s dense, 7 Infinity Fabric links of "
              "128 GB/s (both directions), PCIe Gen5 x16), https://www.amd."
              "com/content/dam/amd/en/documents/instinct-tech-docs/"
              "data-sheets/amd-instinct-mi300x-data-sheet.pdf [amd2023mi300x]")
_L40S_DS = ("NVIDIA L40S datasheet (48 GB GDDR6 at 864 GB/s, BF16 733 "
            "TFLOP/s with sparsity, PCIe Gen4 x16 64 GB/s both directions, "
            "no NVLink), https://www.nvidia.com/en-us/data-center/l40s/ "
            "[nvidia2023l40s]")
_GEMM_OTHER = ("assumed as the same generation's SXM part (no separate "
               "published large-GEMM figure found)")

A100_40 = replace(A100, name="A100-SXM4-40GB", hbm_gb=40.0, hbm_tbps=1.555,
                  sources=(("tflops", _A100_40_DS), ("hbm_gb", _A100_40_DS),
                           ("hbm_tbps", _A100_40_DS),
                           ("gemm_efficiency", _GEMM),
                           ("hbm_efficiency", _STREAM)))
H100_PCIE = GPU("H100-PCIe-80GB",
                (("bf16", 756.5), ("fp16", 756.5), ("fp8", 1513.0),
                 ("tf32", 378.0), ("fp32", 51.0)),
                hbm_gb=80.0, hbm_tbps=2.0, gemm_efficiency=0.75,
                hbm_efficiency=0.85,
                sources=(("tflops", _H100_PCIE_DS), ("hbm_gb", _H100_PCIE_DS),
                         ("hbm_tbps", _H100_PCIE_DS),
                         ("gemm_efficiency", _GEMM_OTHER),
                         ("hbm_efficiency", _STREAM),
                         ("precision_efficiency", _FP8_GEMM + "; the "
                          "SXM part's, as for BF16")),
                precision_efficiency=(("fp8", 0.67),))
H200 = replace(H100, name="H200-SXM-141GB", hbm_gb=141.0, hbm_tbps=4.8,
               sources=(("tflops", _H200_DS), ("hbm_gb", _H200_DS),
                        ("hbm_tbps", _H200_DS), ("gemm_efficiency", _GEMM),
                        ("hbm_efficiency", _STREAM),
                        ("precision_efficiency", _FP8_GEMM)))
MI300X = GPU("AMD Instinct MI300X",
             (("bf16", 1307.4), ("fp16", 1307.4), ("fp8", 2614.9),
              ("tf32", 653.7), ("fp32", 163.4)),
             hbm_gb=192.0, hbm_tbps=5.3, gemm_efficiency=0.55,
             hbm_efficiency=0.85,
             sources=(("tflops", _MI300X_DS), ("hbm_gb", _MI300X_DS),
                      ("hbm_tbps", _MI300X_DS),
                      ("gemm_efficiency", "independent MI300X GEMM "
                       "benchmarks: ~650-750 BF16 TFLOP/s of 1,307 on large "
                       "shapes (SemiAnalysis, Dec 2024)"),
                      ("hbm_efficiency", _STREAM)))
L40S = GPU("L40S", (("bf16", 366.5), ("fp16", 366.5), ("fp8", 733.0),
                    ("tf32", 183.0), ("fp32", 91.6)),
           hbm_gb=48.0, hbm_tbps=0.864, gemm_efficiency=0.70,
           hbm_efficiency=0.85,
           sources=(("tflops", _L40S_DS), ("hbm_gb", _L40S_DS),
                    ("hbm_tbps", _L40S_DS), ("gemm_efficiency", _GEMM_OTHER),
                    ("hbm_efficiency", _STREAM)))

NVLINK4_BRIDGE = Link("NVLink 4 bridge (pair of H100 PCIe)", 300.0,
                      20.6 / 25.0, 3.4e-6,
                      "H100 PCIe datasheet: NVLink bridge 600 GB/s "
                      "bidirectional between two cards = 300 GB/s per "
                      f"direction [nvidia2023h100]; efficiency as NVLink 4 "
                      f"from {NCCL_TOPO}; latency from {NCCL_TUNING}")
XGMI_MI300X = Link("Infinity Fabric / xGMI (7 links, full mesh)", 448.0, 0.8,
                   3.4e-6,
                   "MI300X data sheet: 7 links x 128 GB/s bidirectional = "
                   "7 x 64 GB/s per direction, one link to each other GPU "
                   "of the 8-GPU platform [amd2023mi300x]; efficiency 0.8 "
                   "assumed as NVLink's NCCL figure (RCCL states none); "
                   f"latency as NVLink from {NCCL_TUNING}")

# --- scale-out fabrics: one NIC (port) each, per direction.
_MLE = ("S. Bekman, Machine Learning Engineering Open Book, network chapter "
        "(NICs per node and rate per interface), https://github.com/stas00/"
        "ml-engineering/blob/master/network/README.md "
        "[bekman2024mlengineering]")
_AWS_NET = ("AWS EC2 accelerated computing instance network specifications, "
            "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html "
            "[aws2025ec2network]")
_GCP_TCPX = ("Google Cloud, Maximize GPU network bandwidth with GPUDirect-"
             "TCPX/TCPXO, https://cloud.google.com/kubernetes-engine/docs/"
             "how-to/gpu-bandwidth-gpudirect-tcpx [gcp2024tcpx]")
_NO_EFF = ("efficiency assumed as InfiniBand NDR's (no published per-NIC "
           "figure found)")


@dataclass(frozen=True)
class Fabric:
    """A scale-out network as one node sees it.

    Attributes:
        key: name in :data:`FABRICS` (what ``cluster(..., nic=KEY)`` takes).
        link: one NIC port, per direction.
        nics: NICs per node; ``None`` = one per GPU of the system it is put on.
        source: where the NIC count and rate come from.
    """

    key: str
    link: Link
    nics: int | None
    source: str


def _fabric(key: str, name: str, gbit: float, eff: float, eff_src: str,
            nics: int | None, source: str) -> Fabric:
    return Fabric(key, Link(name, gbit / 8, eff, 14e-6,
                            f"{source}; {eff_src}; {_NET_LAT}"), nics, source)


FABRICS: dict[str, Fabric] = {f.key: f for f in (
    Fabric("ib-hdr", HDR200, None, HDR200.source),
    Fabric("ib-ndr", NDR400, None, NDR400.source),
    _fabric("ib-ndr200", "InfiniBand NDR200 200 Gb/s (ConnectX-7)", 200.0,
            0.97, "efficiency as NDR (same adapter)", None,
            "NVIDIA ConnectX-7 datasheet: NDR200 ports, " + _MLE),
    _fabric("roce-200g", "RoCE v2 200 GbE (ConnectX-6/7)", 200.0, 0.94,
            "efficiency as HDR's ib_write_bw figure (same adapter family)",
            None, _MLE),
    _fabric("roce-400g", "RoCE v2 400 GbE (ConnectX-7 / Spectrum-X)", 400.0,
            0.97, "efficiency as NDR's ib_write_bw figure (same adapter)",
            None, _MLE),
    _fabric("efa-p4d", "AWS EFA v1 100 Gb/s", 100.0, 0.85,
            "efficiency 340 of 400 Gb/s reached by all-reduce tests "
            "[bekman2024mlengineering]", 4,
            f"p4d.24xlarge: 4 x 100 Gb/s EFA, 400 Gb/s; {_AWS_NET}; {_MLE}"),
    _fabric("efa-p5", "AWS EFA v2 100 Gb/s", 100.0, 0.85,
            "efficiency as EFA v1 (no separate figure found)", 32,
            f"p5.48xlarge: 32 x 100 Gb/s EFA, 3,200 Gb/s; {_AWS_NET}; {_MLE}"),
    _fabric("efa-p5en", "AWS EFA v3 200 Gb/s", 200.0, 0.85,
            "efficiency as EFA v1 (no separate figure found)", 16,
            f"p5en.48xlarge: 16 x 200 Gb/s EFA, 3,200 Gb/s; {_AWS_NET}; "
            f"{_MLE}"),
    _fabric("efa-p6-b200", "AWS EFA v4 400 Gb/s", 400.0, 0.85,
            "efficiency as EFA v1 (no separate figure found)", 8,
            f"p6-b200.48xlarge: 8 x 400 Gb/s EFA, 3,200 Gb/s; {_AWS_NET}; "
            f"{_MLE}"),
    _fabric("gcp-tcpx", "GCP GPUDirect-TCPX 200 Gb/s (A3 High)", 200.0, 0.97,
            _NO_EFF, 4,
            f"a3-highgpu-8g: 4 GPU NICs x 200 Gb/s (the fifth, host NIC "
            f"carries no collectives); {_GCP_TCPX}; {_MLE}"),
    _fabric("gcp-tcpxo", "GCP GPUDirect-TCPXO 200 Gb/s (A3 Mega)", 200.0,
            0.97, _NO_EFF, 8,
            f"a3-megagpu-8g: 8 GPU NICs x 200 Gb/s; {_GCP_TCPX}; {_MLE}"),
    _fabric("opa-100", "Omni-Path 100 Gb/s (Intel OPA / Cornelis CN-100)",
            100.0, 0.97, _NO_EFF, None,
            "Cornelis CN-100HFA specifications: 100 Gb/s per adapter; "
            + _MLE),
    _fabric("opa-cn5000", "Omni-Path CN5000 400 Gb/s", 400.0, 0.97, _NO_EFF,
            None, "Cornelis CN5000 launch: 400 Gb/s per adapter; " + _MLE),
)}

_PCIE_BOX = ("8 PCIe cards in one server, no NVLink: NCCL's intra-node "
             "path is P2P over PCIe (or SHM through host memory)")
SYSTEMS.update({
    "dgx-a100-40gb": replace(
        SYSTEMS["dgx-a100"], name="dgx-a100-40gb", gpu=A100_40,
        sources=(("gpus_per_node", "DGX A100 (320 GB): 8x A100 SXM4 40GB "
                  "[nvidia2020dgxa100]"),
                 ("nvlink_domain", "DGX A100: 6 NVSwitch gen 2, one domain"),
                 ("nvls_efficiency", _NVLS), ("base_latency_s", _BASE))),
    "hgx-h200": System(
        "hgx-h200", H200, gpus_per_node=8, nvlink_domain=8, nvlink=NVLINK4,
        nic=NDR400, pcie=PCIE5, nvls_efficiency=0.85,
        sources=(("gpus_per_node", "DGX H200 / HGX H200: 8x H200 SXM, 8x "
                  "ConnectX-7 400 Gb/s [nvidia2023dgxh100]"),
                 ("nvlink_domain", "HGX H200: 4 NVSwitch gen 3, one domain"),
                 ("nvls_efficiency", _NVLS), ("base_latency_s", _BASE))),
    "h100-pcie": System(
        "h100-pcie", H100_PCIE, gpus_per_node=8, nvlink_domain=8,
        nvlink=None, nic=NDR400, pcie=PCIE5, nvls_efficiency=0.0,
        sources=(("gpus_per_node", _PCIE_BOX + "; " + _H100_PCIE_DS),
                 ("nvlink_domain", "no NVLink: the node is the island"),
                 ("nic", "one 400 Gb/s NIC per GPU assumed; set nic="),
                 ("nvls_efficiency", "no NVSwitch"),
                 ("base_latency_s", _BASE))),
    "h100-pcie-nvlink": System(
        "h100-pcie-nvlink", H100_PCIE, gpus_per_node=8, nvlink_domain=2,
        nvlink=NVLINK4_BRIDGE, nic=NDR400, pcie=PCIE5, nvls_efficiency=0.0,
        sources=(("gpus_per_node", _PCIE_BOX + ", cards bridged in pairs; "
                  + _H100_PCIE_DS),
                 ("nvlink_domain", "NVLink bridge joins 2 cards: islands "
                  "of 2, PCIe between them [nvidia2023h100]"),
                 ("nic", "one 400 Gb/s NIC per GPU assumed; set nic="),
                 ("nvls_efficiency", "no NVSwitch"),
                 ("base_latency_s", _BASE))),
    "mi300x": System(
        "mi300x", MI300X, gpus_per_node=8, nvlink_domain=8, nvlink=XGMI_MI300X,
        nic=NDR400, pcie=PCIE5, nvls_efficiency=0.0, intra="mesh",
        sources=(("gpus_per_node", "AMD Instinct MI300X platform: 8 OAM "
                  "GPUs, fully connected by xGMI [amd2023mi300x]"),
                 ("nvlink_domain", "one xGMI mesh of 8"),
                 ("nic", "one 400 Gb/s NIC per GPU (e.g. 8x ConnectX-7 or "
                  "Pollara 400) assumed; set nic="),
                 ("nvls_efficiency", "no in-switch reduction (no switch)"),
                 ("base_latency_s", _BASE + " (RCCL's are not modelled)"))),
    "l40s-8x": System(
        "l40s-8x", L40S, gpus_per_node=8, nvlink_domain=8, nvlink=None,
        nic=FABRICS["roce-200g"].link, pcie=PCIE4, nvls_efficiency=0.0,
        nics_per_node=4,
        sources=(("gpus_per_node", _PCIE_BOX + "; " + _L40S_DS),
                 ("nvlink_domain", "no NVLink: the node is the island"),
                 ("nic", "4 x 200 Gb/s (one per two GPUs) assumed, a common "
                  "OVX-style build; set nic="),
                 ("nvls_efficiency", "no NVSwitch"),
                 ("base_latency_s", _BASE))),
})
#: cloud instances: a system with its fabric, for readers who name those
SYSTEMS.update({
    "p4d": replace(SYSTEMS["dgx-a100-40gb"], name="p4d",
                   nic=FABRICS["efa-p4d"].link, nics_per_node=4),
    "p5": replace(SYSTEMS["dgx-h100"], name="p5",
                  nic=replace(FABRICS["efa-p5"].link,
                              name="4 x AWS EFA v2 100 Gb/s, striped",
                              gbps=4 * 12.5),
                  nics_per_node=8, nic_count=32),
})


NIC_SPEC = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+(?:\.\d+)?)\s*"
                      r"(g|gb|gbe|gbps|gbit|gbit/s|gb/s|t|tb/s|tbps)?\s*$",
                      re.IGNORECASE)


def parse_nic(spec: str) -> tuple[int, float]:
    """``"4x100G"`` -> ``(4, 100.0)``: NIC count and Gbit/s per NIC.

    Units: none or G (Gbit/s, also Gb, Gbps, GbE, Gb/s), or T (Tbit/s).
    """
    m = NIC_SPEC.match(spec) if isinstance(spec, str) else None
    if not m:
        raise ValueError(f"nic must be COUNTxSPEED (e.g. '4x100G', Gbit/s "
                         f"per NIC) or a fabric key {sorted(FABRICS)}; got "
                         f"{spec!r}")
    count, speed = int(m.group(1)), float(m.group(2))
    if (m.group(3) or "g").lower().startswith("t"):
        speed *= 1000.0
    if count < 1 or not 0 < speed <= 10_000:
        raise ValueError(f"nic {spec!r}: need >= 1 NIC of 0-10000 Gbit/s")
    return count, speed


def with_nic(system: str | System, nic: str) -> System:
    """``system`` with other scale-out NICs: ``nic`` is ``"COUNTxSPEED"``
    (Gbit/s per NIC; the NIC technology, i.e. its efficiency and latency,
    stays the system's own) or a :data:`FABRICS` key (count, rate and
    technology of that fabric).

    Fewer NICs than GPUs are shared (4 NICs, 8 GPUs: two GPUs per NIC, 4
    rails); more NICs than GPUs are striped, ``COUNT / GPUs`` per GPU, into
    one port per GPU, as AWS's EFA plugin presents them to NCCL.
    """
    s = SYSTEMS[system] if isinstance(system, str) else system
    g = s.gpus_per_node
    if isinstance(nic, str) and nic.strip().lower() in FABRICS:
        f = FABRICS[nic.strip().lower()]
        count, link, label = f.nics or g, f.link, f.key
    else:
        count, speed = parse_nic(nic)
        link = replace(s.nic, name=f"{speed:g} Gb/s ({s.nic.name})",
                       gbps=speed / 8,
                       source=f"nic={nic!r}: {speed:g} Gbit/s per NIC; "
                              f"efficiency and latency of {s.nic.source}")
        label = f"{count}x{speed:g}G"
    if count <= g and g % count == 0:
        return replace(s, name=f"{s.name}/{label}", nic=link,
                       nics_per_node=count, nic_count=None)
    if count > g and count % g == 0:
        m = count // g
        port = replace(link, name=f"{m} x {link.name}, striped",
                       gbps=link.gbps * m)
        return replace(s, name=f"{s.name}/{label}", nic=port,
                       nics_per_node=g, nic_count=count)
    raise ValueError(f"nic {nic!r}: {count} NICs do not split evenly over "
                     f"{g} GPUs per node (use a divisor or a multiple of {g})")


def cluster(name: str, nodes: int = 1, nic: str | None = None) -> Cluster:
    """A cluster of ``nodes`` nodes of system ``name`` (a :data:`SYSTEMS` key).

    For GB200 NVL72 a node is one compute tray (4 GPUs): 18 nodes = 1 rack.
    ``nic`` replaces the node's scale-out NICs (:func:`with_nic`):
    ``cluster("dgx-a100", 4, nic="4x100G")`` is four DGX A100 nodes with
    four 100 Gbit/s NICs each, two GPUs per NIC.
    """
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from "
                         f"{sorted(SYSTEMS)}")
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be an int >= 1, got {nodes!r}")
    s = SYSTEMS[name] if nic is None else with_nic(name, nic)
    return Cluster(s, nodes)


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


def with_nics(system: str | System, nics_per_node: int) -> System:
    """``system`` (a :data:`SYSTEMS` key or a system) with only
    ``nics_per_node`` of its NICs per node (each of the node's GPUs reaches
    the network through its share of them): the single-rail network of
    Chapters 4 and 6 is ``with_nics(name, 1)``."""
    s = SYSTEMS[system] if isinstance(system, str) else system
    if not 1 <= nics_per_node <= s.gpus_per_node or \
            s.gpus_per_node % nics_per_node:
        raise ValueError(f"nics_per_node must divide {s.gpus_per_node}")
    name = system if isinstance(system, str) else s.name
    return replace(s, name=f"{name}/{nics_per_node}nic",
                   nics_per_node=nics_per_node)


# ------------------------------------------------------- power limits
#: Two datasheet operating points of the same GH100 silicon (132 SMs): the
#: H100 NVL at 400 W (BF16 1,671 TFLOP/s with sparsity: 835.5 dense) and
#: the H100 SXM at 700 W (1,979: 989.5 dense). Their tensor peaks differ
#: only by the clock each power limit allows. NVIDIA H100 datasheet, NVL
#: and SXM columns, https://resources.nvidia.com/en-us-tensor-core/
#: nvidia-tensor-core-gpu-datasheet [nvidia2023h100]
H100_OPERATING_POINTS = ((400.0, 835.5), (700.0, 989.5))


def power_exponent(points=H100_OPERATING_POINTS) -> float:
    """The exponent ``k`` of ``clock ~ power ** k`` through two operating
    points (dynamic power grows with clock times voltage squared, and
    voltage with clock, so ``k`` is well below 1): 0.30 for the H100's."""
    (p0, f0), (p1, f1) = points
    return math.log(f1 / f0) / math.log(p1 / p0)


def power_limited(gpu: GPU, watts: float,
                  points=H100_OPERATING_POINTS) -> GPU:
    """``gpu`` (an H100-class part whose datasheet peak is the 700 W one)
    run under a power limit of ``watts``: its sustained tensor clock,
    ``(watts / 700) ** k`` of the datasheet's, with ``k`` from
    :func:`power_exponent`. HBM bandwidth is left as it is (its clock is
    not the SMs'). torchtitan's Grand Teton H100s run at 500 W and their
    authors put the peak "between SXM and NVL" (torchtitan
    benchmarks/llama3_h100_202412_torchtitan.md): 0.90 of the SXM's."""
    lo, hi = points[0][0], points[-1][0]
    bf16 = dict(gpu.tflops).get("bf16", 0.0)
    if abs(bf16 / points[-1][1] - 1) > 0.01:     # not a 700 W GH100 part
        raise ValueError(f"no published power operating points for "
                         f"{gpu.name}: power_limited knows the 700 W GH100 "
                         f"parts (H100 SXM, H200), whose BF16 peak is "
                         f"{points[-1][1]} TFLOP/s")
    if not lo / 2 <= watts <= hi:
        raise ValueError(f"power limit must be {lo / 2:.0f}..{hi:.0f} W, "
                         f"got {watts}")
    clock = (watts / hi) ** power_exponent(points)
    return replace(gpu, name=f"{gpu.name} at {watts:.0f} W",
                   tensor_clock=gpu.tensor_clock * clock,
                   sources=gpu.sources + (
                       ("tensor_clock", "power_limited: clock ~ power^k "
                        "through the H100 NVL (400 W) and SXM (700 W) "
                        "datasheet peaks"),))
