"""Every fast executor (MPI and socket point-to-point, zero-copy shared
memory) against the short reference executor, bit for bit, for every
collective and algorithm, N = 1..8, uneven lengths (tests/mpi/executors.py).
"""
from __future__ import annotations

import pytest

import executors
import warmup_kit as wk
from conftest import mpi_script, requires_mpi

WORLDS = range(1, 9)


def _assert_clean(per_rank, n):
    assert len(per_rank) == n
    for r, out in enumerate(per_rank):
        assert out["checked"] > 100, out["checked"]
        assert not out["bad"], f"rank {r}: " + "\n".join(out["bad"][:8])


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
@pytest.mark.parametrize("n", WORLDS)
def test_fast_executor_equals_reference(transport, n):
    per_rank = wk.launch(executors.check, n, transport=transport,
                         timeout=240)
    _assert_clean(per_rank, n)


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", WORLDS)
def test_fast_executor_equals_reference_mpi(n):
    result = mpi_script("executors", n, timeout=240)
    _assert_clean(result["per_rank"], n)
