"""What overlapping communication costs the compute it hides behind.

A collective that runs beside compute is not free. NCCL moves and reduces
data with CUDA kernels, one block per channel on an SM of its own (NCCL
documentation, ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS``), and both
kinds of kernel share the caches and HBM; the compute slows, and so does
the collective, which then may no longer fit behind it.

Measured, the loss is most of what overlap promises. Agrawal et al. 2024
(AMD, "Optimizing ML Concurrent Computation and Communication with GPU DMA
Engines", on AMD GPUs) find that concurrent computation and communication
realise on average 21% of the ideal speedup, the ideal being serial time
over the longer of the two, each timed alone. On NVIDIA A100 and H100,
Lee et al. 2025 ("Characterizing Compute-Communication Overlap in
GPU-Accelerated Distributed Deep Learning") measure compute 18.9% slower
on average (40% at worst) while a collective runs beside it, and
overlapped execution only 10.2% faster than serial on average.

The model takes the first figure, read as a share of the time saved (the
reading of a share of the speedup agrees with it while the collective is
short against the compute, and charges a little less, 0.72 of ``t``
instead of 0.79, when it is half as long): a collective of ``t`` seconds
hidden behind compute costs ``(1 - OVERLAP_REALISED) * t`` of it,
whatever the GPU (neither paper gives a figure per GPU that the other
confirms). An SM count alone (channels over SMs, 16 of 132 on a DGX H100
node) prices about a sixth of that; it left the FSDP runs of Lab 02's
trust table too fast, and the more so the larger their hidden collectives
were against their compute.
"""
from __future__ import annotations

#: Fraction of the ideal time saving that concurrent compute and
#: communication realise (Agrawal et al. 2024, the average over their ML
#: workloads)
OVERLAP_REALISED = 0.21


def contention_s(hidden_s: float, shape: tuple[int, int, int]) -> float:
    """Compute time lost while ``hidden_s`` seconds of a collective on a
    group of ``shape`` (ranks, nodes, ranks per node) run behind it: the
    part of the saving that overlap does not realise."""
    if shape[0] < 2:
        return 0.0
    return max(0.0, hidden_s) * (1.0 - OVERLAP_REALISED)
