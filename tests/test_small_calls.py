"""The small-message path of the fast executor and the argument agreement:
what keeps an 8-byte all-reduce at a few MPI calls (benchmarks/targets.py
times it against the same messages written with mpi4py).

Each test runs in-process: a recording communicator stands in for the
transport, so what is checked is which calls the executor makes, and that
their results are the reference executor's.
"""
from __future__ import annotations

import numpy as np
import pytest

from warmup_kit.algorithms import build
from warmup_kit.callcheck import check_call, describe
from warmup_kit.comm.base import Comm
from warmup_kit.errors import CallMismatch
from warmup_kit.execute.p2p import run_p2p
from warmup_kit.execute.plan import compile_plan


class Recorder(Comm):
    """Rank ``rank`` of ``size``: every blocking send is recorded, every
    receive is filled from ``inbox`` (peer -> list of arrays, in order);
    the request calls fail the test."""

    def __init__(self, rank, size, inbox):
        super().__init__()
        self.rank, self.size, self.inbox, self.calls = rank, size, inbox, []

    def send_wait(self, buf, dest, tag=0, *, deadline=None):
        self.calls.append(("send", dest, buf.copy()))

    def recv_wait(self, buf, source, tag=0, *, deadline=None):
        self.calls.append(("recv", source))
        buf[:] = self.inbox[source].pop(0)

    def sendrecv(self, sendbuf, dest, recvbuf, source, tag=0, *,
                 deadline=None):
        self.send_wait(sendbuf, dest, tag)
        self.recv_wait(recvbuf, source, tag)

    def isend(self, buf, dest, tag=0):
        raise AssertionError("a small round posted a request")

    irecv = isend

    def waitall(self, reqs, deadline=None):
        raise AssertionError("a small round waited on requests")

    def split(self, color, key=0):
        raise NotImplementedError

    def close(self):
        pass


def _allreduce_n2(values, ufunc=np.add):
    """Both ranks of a 2-rank ring all-reduce of one element, run one after
    the other on recorders (rank 1's first round only sends)."""
    s = build("allreduce", "ring", 2)
    plans = [compile_plan(s, r, 1, 1, np.float64, src=True)
             for r in range(2)]
    outs = [np.full(1, np.nan) for _ in range(2)]
    srcs = [np.array([v]) for v in values]
    # rank 1 sends its value; rank 0 reduces it and sends the sum back
    c1 = Recorder(1, 2, {0: []})
    c0 = Recorder(0, 2, {1: [srcs[1].copy()]})
    run_p2p(plans[0], outs[0], srcs[0], c0, ufunc, None, 7)
    c1.inbox[0] = [outs[0].copy()]
    run_p2p(plans[1], outs[1], srcs[1], c1, ufunc, None, 7)
    return plans, outs, (c0, c1)


def test_one_element_ring_at_two_ranks_is_all_simple_rounds():
    """Each round carries one message one way (the other chunk is
    empty): every round is a single blocking call, none a request."""
    plans, outs, comms = _allreduce_n2([1.5, 2.25])
    for p in plans:
        assert p.quick is not None
        assert all(r.simple for r in p.rounds if r.sends or r.incoming)
    assert outs[0][0] == outs[1][0] == 3.75
    assert [c[0] for c in comms[0].calls] == ["recv", "send"]
    assert [c[0] for c in comms[1].calls] == ["send", "recv"]


def test_quick_rounds_reduce_in_ascending_rank_order():
    """The shortcut applies the operands in the order reduce_ordered does
    (lower rank first): checked with a non-commutative stand-in."""
    first = []

    def note(a, b, out):                 # records which operand came first
        first.append((float(a[0]), float(b[0])))
        np.add(a, b, out=out)
    _allreduce_n2([10.0, 20.0], note)
    assert first == [(10.0, 20.0)]


class Table(Recorder):
    """A communicator that shares every rank's descriptor at once, as
    MPIComm's Allgather does."""

    def __init__(self, rows):
        super().__init__(0, len(rows), {})
        self.rows = rows

    def share_call(self, words, deadline):
        return np.array(self.rows, np.int64)


def _desc(**kw):
    base = dict(collective="allreduce", algorithm="ring", op="sum",
                dtype="<f8", count=1, unit=1, root=0, ranks_per_node=None)
    return describe(**{**base, **kw})


def test_agreement_passes_when_every_descriptor_matches():
    d = _desc()
    check_call(Table([d, d, d]), d, None)


@pytest.mark.parametrize("odd", [1, 2])
def test_agreement_names_the_first_rank_that_differs(odd):
    """The byte comparison of the whole table is only the fast path: a
    difference in any row still raises, naming rank 0 and that rank."""
    d, e = _desc(), _desc(count=2)
    rows = [d, d, d]
    rows[odd] = e
    with pytest.raises(CallMismatch) as info:
        check_call(Table(rows), d, None)
    assert info.value.ranks == (0, odd)
    assert info.value.fields == ("count",)
