"""Every collective over ShmComm ranks (launch(transport="shm")), N = 1..4.

The case table of tests/mpi/collective_cases.py, as for sockets and MPI: a
case fails when any rank's result differs from numpy, the input changed, the
bytes read out of peers' segments differ from ``traffic()`` of the schedule,
or the ranks' results are not bit-for-bit identical where they must be.
"""
from __future__ import annotations

import functools

import pytest

import collective_cases as cc
import warmup_kit as wk

WORLDS = range(1, 5)
LAUNCH_TIMEOUT_S = 400


@functools.lru_cache(maxsize=None)
def shm_report(n: int) -> dict:
    per_rank = wk.launch(cc.run_all, n, args=(n,), transport="shm",
                         timeout=LAUNCH_TIMEOUT_S)
    return cc.report(n, per_rank)


def _params():
    return [pytest.param(n, g, id=f"N{n}-{g}") for n in WORLDS
            for g in cc.groups(n)]


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT_S + 60)
@pytest.mark.parametrize("n,group", _params())
def test_collective_shm(n, group):
    report = shm_report(n)
    assert group in report, f"no case of {group} ran"
    cases = report[group]
    bad = {cid: found for cid, found in cases.items() if found}
    assert not bad, (f"{len(bad)} of {len(cases)} cases wrong:\n" + "\n".join(
        f"{cid}: {'; '.join(found[:4])}" for cid, found in list(bad.items())[:12]))
