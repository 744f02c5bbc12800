"""Ranks that call a collective with different arguments all raise
CallMismatch, in the default mode, on every transport: promptly (not at the
call's timeout), naming the argument, the two ranks and both values, with
no payload moved; the communicator stays in step (a correct all-reduce
follows). Before the default agreement (warmup_kit.callcheck), a broadcast
whose ranks disagreed on the root returned [0.0, 1.0, 0.0] on 3 ranks.

Cases: tests/mpi/mismatch.py, all in one job per transport and N (the
communicator is usable after each)."""
from __future__ import annotations

import functools
import os
import signal
import subprocess

import numpy as np
import pytest

import mismatch as mm
import warmup_kit as wk
from conftest import MPI_SCRIPTS, PYTHON, ROOT, mpi_script, requires_mpi
from warmup_kit.callcheck import FIELDS, decode, describe

JOB_TIMEOUT_S = 90
#: a raise must come long before the call's own timeout
PROMPT_S = 2.0


@functools.lru_cache(maxsize=None)
def socket_records(n: int) -> list[dict]:
    return wk.launch(mm.run_all, n, timeout=JOB_TIMEOUT_S)


@functools.lru_cache(maxsize=None)
def shm_records(n: int) -> list[dict]:
    return wk.launch(mm.run_all, n, transport="shm", timeout=JOB_TIMEOUT_S)


@functools.lru_cache(maxsize=None)
def mpi_records(n: int) -> list[dict]:
    result = mpi_script("mismatch", n, timeout=JOB_TIMEOUT_S)
    assert result["ranks"] == n
    return result["records"]


@functools.lru_cache(maxsize=None)
def hybrid_records(n: int) -> list[dict]:
    """Two loopback nodes of n // 2 ranks (shared memory inside, TCP
    across), started by warmup_kit.run as the multi-host tests do."""
    from test_multihost import free_port
    port, procs = free_port(), []
    env = {**os.environ, "WARMUP_KIT_SECRET": os.urandom(16).hex()}
    try:
        for node in range(2):
            procs.append(subprocess.Popen(
                [PYTHON, "-m", "warmup_kit.run", "--nnodes", "2",
                 "--node-rank", str(node), "--nproc-per-node", str(n // 2),
                 "--master-addr", "127.0.0.1", "--master-port", str(port),
                 "--transport", "hybrid", "--timeout", str(JOB_TIMEOUT_S),
                 str(MPI_SCRIPTS / "mismatch.py"), "--hybrid"],
                env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True))
        outs = [p.communicate(timeout=JOB_TIMEOUT_S + 30) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    assert [p.returncode for p in procs] == [0, 0], outs
    line = [ln for ln in outs[0][0].splitlines() if ln.startswith("{")][-1]
    import json
    result = json.loads(line)
    assert result["ranks"] == n
    return result["records"]


RUNS = {"sockets": (socket_records, (2, 3, 4, 5)),
        "shm": (shm_records, (2, 3, 5)),
        "mpi": (mpi_records, (2, 3, 5)),
        "hybrid": (hybrid_records, (4,))}


def _params():
    out = []
    for t, (_, worlds) in RUNS.items():
        marks = ([pytest.mark.mpi, requires_mpi] if t == "mpi"
                 else [pytest.mark.multiproc])
        out += [pytest.param(t, n, name, id=f"{t}-N{n}-{name}", marks=marks)
                for n in worlds for name in mm.CASES]
    return out


@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
@pytest.mark.parametrize("transport,n,name", _params())
def test_every_rank_raises_call_mismatch(transport, n, name):
    field, _ = mm.CASES[name]
    records = RUNS[transport][0](n)
    messages = set()
    for r, rec in enumerate(records):
        out = rec[name]
        assert out["kind"] == "CallMismatch", \
            f"rank {r}: {out['kind']}: {out['message']}"
        assert field in out["fields"], out
        assert f"{field}=" in out["message"], out["message"]
        a, b = out["ranks"]
        assert f"rank {a}" in out["message"] and f"rank {b}" in \
            out["message"], out["message"]
        assert len(out["values"]) == 2 and out["values"][0] != \
            out["values"][1], out
        assert out["elapsed_s"] < PROMPT_S, f"rank {r} waited {out}"
        assert out["payload"] == [0, 0], f"rank {r} moved payload: {out}"
        assert out["follow_up"] is None, f"rank {r}: {out['follow_up']}"
        messages.add(out["message"].split(": ", 1)[1])
    assert len(messages) == 1, messages       # one story on every rank


# -------------------------------------------------- single process checks
def test_descriptor_round_trips():
    fields = dict(collective="reduce_scatter", algorithm="recursive_doubling",
                  op="prod", dtype="<c16", count=1 << 40, unit=3, root=4,
                  ranks_per_node=2)
    assert decode(describe(**fields)) == fields
    assert [k for k, _ in FIELDS] == list(fields)


@pytest.mark.parametrize("n", range(2, 10))
def test_every_rank_ends_with_the_same_verdict(n):
    """The dissemination, simulated: for any pattern of descriptors, after
    ceil(log2 N) rounds every rank's summary is (rank 0's descriptor, the
    lowest rank that differs and its descriptor)."""
    from warmup_kit.callcheck import WORDS, _merge
    w = WORDS + 1
    rng = np.random.default_rng(n)
    for _ in range(200):
        kinds = rng.integers(0, rng.integers(1, 4), n)
        descs = [describe(collective="broadcast", algorithm="tree", op=None,
                          dtype="<f8", count=6, unit=1, root=int(k),
                          ranks_per_node=None) for k in kinds]
        states = []
        for r in range(n):
            st = np.full(2 * w, -1, np.int64)
            st[0], st[1:w] = r, descs[r]
            states.append(st)
        dist = 1
        while dist < n:
            before = [st.copy() for st in states]
            for r in range(n):
                _merge(states[r], before[(r - dist) % n])
            dist <<= 1
        other = next((r for r in range(n) if kinds[r] != kinds[0]), None)
        for st in states:
            assert st[0] == 0 and np.array_equal(st[1:w], descs[0])
            if other is None:
                assert st[w] == -1
            else:
                assert st[w] == other and np.array_equal(st[w + 1:],
                                                         descs[other])


def test_the_error_pickles_and_is_a_value_error():
    import pickle
    exc = wk.CallMismatch("m", fields=("root",), ranks=(0, 1),
                          values=((0,), (1,)))
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, ValueError) and isinstance(back, wk.ProtocolError)
    assert (back.fields, back.ranks, back.values) == (
        exc.fields, exc.ranks, exc.values)


def _opt_out(comm):
    comm.reset_stats()
    y = wk.allreduce(np.ones(4), comm, timeout=10)
    with_check = comm.stats.control_bytes_sent
    comm.check_calls = False
    comm.reset_stats()
    wk.allreduce(np.ones(4), comm, timeout=10)
    return with_check, comm.stats.control_bytes_sent, float(y[0])


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_the_check_is_control_traffic_and_can_be_turned_off():
    """ceil(log2 3) = 2 agreement messages per rank, counted apart from the
    payload; comm.check_calls = False sends none."""
    from warmup_kit.callcheck import WORDS
    for on, off, total in wk.launch(_opt_out, 3, timeout=30):
        assert on == 2 * 8 * 2 * (WORDS + 1) and off == 0 and total == 3.0


@requires_mpi
@pytest.mark.multiproc
@pytest.mark.timeout(90)
def test_a_blocking_mpi_exchange_checks_what_arrived():
    """MPIComm.sendrecv without a deadline (the executor's small-message
    path) raises ProtocolError on a rank that receives another tag or
    size, names both, and the next exchange is right."""
    result = mpi_script("arrival", 2, timeout=60)
    calls = {r["rank"]: r["calls"] for r in result["records"]}
    for me, peer in ((0, 1), (1, 0)):
        kinds = [c["kind"] for c in calls[me]]
        # rank 1 gets 24 of the 32 bytes it expects in the "size" case
        assert kinds == ["returned", "ProtocolError",
                         "ProtocolError" if me == 1 else "returned",
                         "returned"], calls[me]
        tag_err = calls[me][1]["message"]
        assert (f"rank {peer} sent a message with tag {5 if me == 0 else 6}"
                f" and 32 bytes where tag {6 if me == 0 else 5}") in tag_err
        assert calls[me][-1]["got"] == [float(peer)] * 4
    assert "24 bytes where tag 5 and 32 bytes" in calls[1][2]["message"]
