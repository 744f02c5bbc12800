"""Self-check: the NCCL knobs to reach for when a collective is slow
(Chapter 5)."""
from __future__ import annotations

from warmup_kit.exercises.result import Result, failed, passed, unanswered

#: variables that help diagnose or steer a slow collective, and what for
KNOBS = {
    "NCCL_DEBUG": "log the topology, rings/trees and choices (INFO)",
    "NCCL_DEBUG_SUBSYS": "narrow the log (INIT, GRAPH, TUNING, NET...)",
    "NCCL_ALGO": "force ring, tree, NVLS... to test the choice",
    "NCCL_PROTO": "force LL, LL128 or Simple",
    "NCCL_IB_HCA": "which InfiniBand devices (rails) NCCL may use",
    "NCCL_SOCKET_IFNAME": "which interface bootstrap and socket traffic use",
    "NCCL_NET_GDR_LEVEL": "when GPUDirect RDMA is used",
    "NCCL_P2P_LEVEL": "when GPUs talk peer to peer (NVLink/PCIe)",
    "NCCL_P2P_DISABLE": "turn peer-to-peer off (a test, not a fix)",
    "NCCL_MIN_NCHANNELS": "more channels (parallel rings)",
    "NCCL_MAX_NCHANNELS": "fewer channels",
    "NCCL_TOPO_DUMP_FILE": "write the detected topology to a file",
}

#: names people reach for that are not NCCL variables, and the truth
NOT_NCCL = {
    "NCCL_TIMEOUT": "not an NCCL variable: the collective timeout is the "
                    "framework's (PyTorch's process-group timeout and "
                    "TORCH_NCCL_ASYNC_ERROR_HANDLING)",
    "NCCL_ASYNC_ERROR_HANDLING": "the old name of PyTorch's "
                                 "TORCH_NCCL_ASYNC_ERROR_HANDLING; a "
                                 "framework variable, not NCCL's",
    "NCCL_BLOCKING_WAIT": "the old name of PyTorch's "
                          "TORCH_NCCL_BLOCKING_WAIT, not NCCL's",
}


def slow_collective_knobs(answer) -> Result:
    """Grade a list of environment variables for a slow collective.

    Right when it starts from the log (``NCCL_DEBUG``), can force the
    algorithm or protocol, and checks the network's devices
    (``NCCL_IB_HCA`` or ``NCCL_SOCKET_IFNAME``); and names nothing that is
    not an NCCL variable."""
    ex = "NCCL knobs for a slow collective"
    if answer is ...:
        return unanswered(ex, 'a list of variable names, e.g. ["NCCL_..."]')
    if isinstance(answer, str) or not all(isinstance(a, str)
                                          for a in answer):
        raise TypeError("answer must be a list of variable names (strings)")
    names = {a.strip().split("=")[0].upper() for a in answer}
    if not names:
        raise ValueError("answer is empty: name at least one variable")
    wrong = sorted(names & set(NOT_NCCL))
    if wrong:
        return failed(ex, "; ".join(f"{w} is {NOT_NCCL[w]}"
                                    for w in wrong))
    unknown = sorted(n for n in names if n not in KNOBS)
    if unknown:
        return failed(ex, f"not a knob this book teaches: {unknown}; "
                          f"see {sorted(KNOBS)}")
    missing = []
    if "NCCL_DEBUG" not in names:
        missing.append("the first stop is the log: what does NCCL think "
                       "the topology is, which algorithm did it pick?")
    if not names & {"NCCL_ALGO", "NCCL_PROTO"}:
        missing.append("how would you test whether its choice of algorithm "
                       "or protocol is the problem?")
    if not names & {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"}:
        missing.append("which variable says which NICs (rails) it uses?")
    if missing:
        return failed(ex, " ".join(missing))
    return passed(ex, "; ".join(f"{n}: {KNOBS[n]}" for n in sorted(names)))
