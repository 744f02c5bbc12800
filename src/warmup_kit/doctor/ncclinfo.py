"""``NCCL_DEBUG=INFO`` lines: what NCCL says about the job it set up.

Each line looks like ``host:pid:tid [dev] NCCL INFO <message>``; mpirun may
prefix it (``[1,0]<stdout>:``). The messages read here, each kept with its
line as evidence (:class:`~warmup_kit.doctor.records.Facts`):

* ``NCCL version 2.18.5+cuda12.2``
* ``comm 0x... rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 ...``
* ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ... ; OOB eth0:...``
  (``/RoCE`` for RoCE ports), ``NET/Socket : Using [0]eth0:10.0.0.1<0>``,
  ``Using network IB`` / ``Using network Socket`` / ``Using network
  AWS Libfabric``, the OFI plugin's ``Selected Provider is efa (found 4
  nics)`` (aws-ofi-nccl)
* ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA``,
  ``... via P2P/IPC``, ``via P2P/CUMEM/read``, ``via SHM/direct/direct``,
  ``via NET/Socket/0``; and the ring order lines ``Channel 00/24 : 0 1 2 ...``
* ``GPU Direct RDMA Disabled for HCA 0 'mlx5_0'`` (and ``Enabled``)
* ``NVLS multicast support is available on dev 0`` / ``is not available``,
  ``NVLS comm ...``, ``... nvls channels``; CollNet: ``via COLLNET``,
  ``CollNet channels``, ``NCCL_COLLNET_ENABLE set by environment to 1``
* ``Trees [0] 1/-1/-1->0->-1 ...``
"""
from __future__ import annotations

import re

from warmup_kit.doctor.records import Evidence, Facts

MARK = "NCCL INFO"
_VERSION = re.compile(r"NCCL version (\S+)")
_COMM = re.compile(r"nRanks (\d+)(?: nNodes (\d+))?(?: localRanks (\d+))?")
_NIC = re.compile(r"\[(\d+)\]([^\s:\[\]]+)")
_PROVIDER = re.compile(r"[Ss]elected [Pp]rovider is (\w+)"
                       r"(?:.*?found (\d+) nics)?")
_COUNTS = re.compile(r"(\d+) coll channels, (\d+) collnet channels"
                     r"(?:, (\d+) nvls channels)?")
_RING = re.compile(r"Channel \d+/\d+ :(?:\s+\d+)+\s*$")


def _ev(value, n: int, line: str) -> Evidence:
    return Evidence(value, n, line.strip())


def _transport(via: str) -> str:
    """``NET/IB/0/GDRDMA`` -> ``NET/IB``; ``P2P/IPC/read`` -> ``P2P``;
    ``NET/AWS Libfabric/1/GDRDMA`` -> ``NET/AWS Libfabric``."""
    parts = via.split("/")
    if parts[0] in ("NET", "COLLNET") and len(parts) > 1:
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


def read_info(facts: Facts, n: int, line: str, at: int | None = None
              ) -> None:
    """Fold one ``NCCL INFO`` line (number ``n``) into ``facts``; ``at``:
    where ``MARK`` starts in it, if the caller found it already."""
    i = line.find(MARK) if at is None else at
    if i < 0:
        return
    msg = line[i + len(MARK):].strip()
    facts.info_lines += 1
    if msg.startswith("Channel"):
        j = msg.find(" via ")
        if j >= 0:
            # the rest of the line: plugin names may hold a space
            # ("NET/AWS Libfabric/1/GDRDMA")
            via = msg[j + 5:].strip()
            if via in facts.vias and (not via.startswith("NET/") or (
                    facts.gdr is not None and facts.gdr.value)):
                return                   # nothing new (most channel lines)
            facts.vias.add(via)
            kind = _transport(via)
            seen = facts.transports.get(kind)
            if seen is None:
                facts.transports[kind] = _ev(via, n, line)
                if kind.startswith("COLLNET") and facts.collnet is None:
                    facts.collnet = _ev(True, n, line)
            if kind.startswith("NET/"):
                gdr = facts.gdr
                if "GDRDMA" in via:
                    if gdr is None or gdr.value is False:
                        facts.gdr = _ev(True, n, line)
                elif gdr is None:
                    facts.gdr = _ev(False, n, line)
        elif _RING.search(msg):
            facts.rings += 1
        return
    if msg.startswith("NCCL version") and facts.version is None:
        m = _VERSION.search(msg)
        if m:
            facts.version = _ev(m.group(1), n, line)
        return
    if "nRanks" in msg and facts.nranks is None:
        m = _COMM.search(msg)
        if m:
            facts.nranks = _ev(int(m.group(1)), n, line)
            if m.group(2):
                facts.nnodes = _ev(int(m.group(2)), n, line)
            if m.group(3):
                facts.local_ranks = _ev(int(m.group(3)), n, line)
        return
    if msg.startswith("NET/IB") and "Using" in msg:
        nics = _NIC.findall(msg.split(";")[0])
        facts.net = _ev("IB", n, line)
        if facts.nics_in_use is None or len(nics) > facts.nics_in_use.value:
            facts.nics_in_use = _ev(len({d for _, d in nics}), n, line)
        return
    if msg.startswith("NET/Socket") and "Using" in msg:
        if facts.net is None or facts.net.value != "IB":
            facts.net = _ev("Socket", n, line)
            nics = _NIC.findall(msg)
            facts.nics_in_use = _ev(len({d for _, d in nics}) or 1, n, line)
        return
    if msg.startswith("Using network"):
        what = msg[len("Using network"):].strip()
        net = ("IB" if what.startswith("IB") else "Socket"
               if what.startswith("Socket") else "OFI"
               if "fabric" in what.lower() or "ofi" in what.lower()
               else what)
        facts.net = _ev(net, n, line)       # the plugin NCCL settled on
        return
    m = _PROVIDER.search(msg)
    if m and "OFI" in msg:
        facts.ofi_provider = _ev(m.group(1).lower(), n, line)
        if facts.net is None:
            facts.net = _ev("OFI", n, line)
        if m.group(2):
            facts.nics_in_use = _ev(int(m.group(2)), n, line)
        return
    if "GPU Direct RDMA" in msg:
        if "Disabled" in msg and facts.gdr is None:
            facts.gdr = _ev(False, n, line)
        elif "Enabled" in msg:
            facts.gdr = _ev(True, n, line)
        return
    m = _COUNTS.search(msg)
    if m:
        if int(m.group(2)):
            facts.collnet = _ev(True, n, line)
        if m.group(3) is not None:
            facts.nvls = _ev(int(m.group(3)) > 0, n, line)
        return
    if "NVLS" in msg:
        low = msg.lower()
        if "not available" in low or "not supported" in low:
            if facts.nvls is None:
                facts.nvls = _ev(False, n, line)
        elif "available" in low or msg.startswith("NVLS comm") or \
                re.search(r"[1-9]\d* nvls channels", msg):
            facts.nvls = _ev(True, n, line)
        return
    if "CollNet" in msg or "COLLNET" in msg:
        if "COLLNET_ENABLE" in msg:
            on = msg.rstrip().endswith(" 1")
            if facts.collnet is None or on:
                facts.collnet = _ev(on, n, line)
        elif re.search(r"[1-9]\d* collnet channels", msg) or \
                "CollNet channels" in msg or "via COLLNET" in msg:
            facts.collnet = _ev(True, n, line)
        return
    if msg.startswith("Trees"):
        facts.trees += 1
