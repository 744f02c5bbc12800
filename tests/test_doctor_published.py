"""The doctor on publicly posted nccl-tests output (book/data/doctor/, each
file names its source): a run NCCL's maintainer called on target is
healthy, and within 20% of the model at its largest size; a run its
poster called severely degraded is not healthy, and the doctor points at
the size where it collapses."""
from pathlib import Path

import pytest

from warmup_kit.doctor import Flags, examine

DATA = Path(__file__).resolve().parents[1] / "book" / "data" / "doctor"


def test_a100_three_nodes_four_hdr_nics_is_healthy():
    d, = examine([str(DATA / "nccl-tests-issue-119-a100-3x8.log")],
                 Flags(gpu="NVIDIA A100-SXM4-40GB", nodes=3,
                       gpus_per_node=8, nic="4x200G"))
    assert d.verdict == "healthy"
    last = d.rows[-1]
    assert last.row.busbw_gbps == 95.74
    assert last.ratio == pytest.approx(1.0, abs=0.2)
    assert all(c.weight <= 20 for c in d.causes)


def test_h100_three_nodes_across_racks_is_not_healthy():
    d, = examine([str(DATA / "nccl-issue-1453-h100-3x8.log")],
                 Flags(gpu="NVIDIA H100 80GB HBM3", nodes=3,
                       gpus_per_node=8, nic="8x200G"))
    assert len(d.rows) == 10 and d.rows[0].row.inplace_busbw_gbps == 0.87
    assert d.verdict == "broken"
    assert d.causes[0].cause == "busbw collapses above one size"
    assert "32 MiB" in d.causes[0].evidence and "64 MiB" in \
        d.causes[0].evidence
