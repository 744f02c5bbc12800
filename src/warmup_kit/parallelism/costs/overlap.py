"""What overlapping communication costs the compute it hides behind.

NCCL runs each channel of a collective as one CUDA block on its own SM
(NCCL documentation, ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS``:
"each channel uses one CUDA block"), so while a collective is in flight
behind compute, the compute kernels have ``channels`` fewer SMs. Over a
hidden collective of ``t`` seconds the compute loses ``t * channels /
SMs`` seconds of work. The channel count is the NCCL model's
(:func:`warmup_kit.model.nccl.channels`: two per rank of the island, at
most 32).
"""
from __future__ import annotations

from warmup_kit.model.nccl import channels

#: Streaming multiprocessors per GPU (NVIDIA A100 Tensor Core GPU
#: architecture whitepaper: 108 SMs; H100 whitepaper: 132 SMs on SXM5;
#: Blackwell architecture technical brief: 148 SMs on B200)
SMS = (("A100", 108), ("H100", 132), ("H200", 132), ("B200", 148))


def sms_of(gpu_name: str) -> int:
    """SMs of the GPU whose name contains a :data:`SMS` key (132 if none
    matches)."""
    for key, n in SMS:
        if key in gpu_name:
            return n
    return 132


def sm_share(gpu_name: str, shape: tuple[int, int, int]) -> float:
    """Fraction of the GPU's SMs a collective on a group of ``shape``
    occupies."""
    n, _, k = shape
    if n < 2:
        return 0.0
    return min(1.0, channels(k) / sms_of(gpu_name))


def contention_s(gpu_name: str, hidden_s: float,
                 shape: tuple[int, int, int]) -> float:
    """Compute time lost while ``hidden_s`` seconds of a collective on a
    group of ``shape`` run behind it."""
    return max(0.0, hidden_s) * sm_share(gpu_name, shape)
