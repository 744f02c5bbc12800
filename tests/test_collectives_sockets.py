"""Every collective over SocketComm ranks (warmup_kit.launch), N = 1..6.

One launch per N runs every case of tests/mpi/collective_cases.py on every
rank (launching costs ~0.3 s; a call costs milliseconds); each test below
reports one group of cases: one (algorithm, dtype) for all-reduce, one dtype
for the other collectives. A case fails when any rank's result differs from
numpy, the input array changed, the measured bytes and messages differ from
``traffic()`` of the schedule, or (all-reduce, broadcast, all-gather) the
ranks' results are not bit-for-bit identical.
"""
from __future__ import annotations

import functools

import pytest

import collective_cases as cc
import warmup_kit as wk

WORLDS = range(1, 7)
LAUNCH_TIMEOUT_S = 400


@functools.lru_cache(maxsize=None)
def socket_report(n: int) -> dict:
    per_rank = wk.launch(cc.run_all, n, args=(n,), timeout=LAUNCH_TIMEOUT_S)
    return cc.report(n, per_rank)


def _params():
    return [pytest.param(n, g, id=f"N{n}-{g}") for n in WORLDS
            for g in cc.groups(n)]


@pytest.mark.multiproc
@pytest.mark.timeout(LAUNCH_TIMEOUT_S + 60)
@pytest.mark.parametrize("n,group", _params())
def test_collective_sockets(n, group):
    report = socket_report(n)
    assert group in report, f"no case of {group} ran"
    cases = report[group]
    bad = {cid: found for cid, found in cases.items() if found}
    assert not bad, (f"{len(bad)} of {len(cases)} cases wrong:\n" + "\n".join(
        f"{cid}: {'; '.join(found[:4])}" for cid, found in list(bad.items())[:12]))


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_every_case_ran_on_every_rank():
    """The case table is the same on every rank and nothing was skipped."""
    for n in (1, 4):
        report = socket_report(n)
        ran = sum(len(c) for c in report.values())
        assert ran == len(cc.cases(n))
