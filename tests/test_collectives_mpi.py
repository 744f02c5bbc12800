"""Every collective over MPIComm under mpiexec, N = 1..5, against numpy and
against MPI's own Allreduce / Reduce_scatter / Allgather / Bcast / Reduce /
Alltoall on the same inputs.

The same case table as the socket tests (tests/mpi/collective_cases.py), run
by tests/mpi/collectives.py in one ``mpiexec -n N python -m mpi4py`` per N;
each test reports one group of cases.
"""
from __future__ import annotations

import functools

import pytest

import collective_cases as cc
from conftest import mpi_script, requires_mpi

WORLDS = range(1, 6)
RUN_TIMEOUT_S = 400


@functools.lru_cache(maxsize=None)
def mpi_report(n: int) -> dict:
    result = mpi_script("collectives", n, timeout=RUN_TIMEOUT_S)
    assert result["ranks"] == n
    assert result["cases"] == len(cc.cases(n))
    return result["report"]


def _params():
    return [pytest.param(n, g, id=f"N{n}-{g}") for n in WORLDS
            for g in cc.groups(n)]


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("n,group", _params())
def test_collective_mpi(n, group):
    report = mpi_report(n)
    assert group in report, f"no case of {group} ran"
    cases = report[group]
    bad = {cid: found for cid, found in cases.items() if found}
    assert not bad, (f"{len(bad)} of {len(cases)} cases wrong:\n" + "\n".join(
        f"{cid}: {'; '.join(found[:4])}" for cid, found in list(bad.items())[:12]))
