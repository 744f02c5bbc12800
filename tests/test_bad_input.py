"""Bad input raises a clear ValueError or TypeError, before any byte is
sent; ranks that disagree get a ValueError naming what differs in the debug
mode, and, with the default agreement turned off, fail loudly on the tag
check (never a wrong result from a rank that receives).
Cases: tests/mpi/bad_input.py; run over sockets, shared memory and MPI."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import bad_input as bi
import warmup_kit as wk
from conftest import mpi_script, requires_mpi
from warmup_kit.comm import SocketComm

LAUNCH_TIMEOUT_S = 120


@functools.lru_cache(maxsize=None)
def socket_records(n: int) -> list[dict]:
    return wk.launch(bi.run_all, n, timeout=LAUNCH_TIMEOUT_S)


@functools.lru_cache(maxsize=None)
def shm_records(n: int) -> list[dict]:
    return wk.launch(bi.run_all, n, transport="shm", timeout=LAUNCH_TIMEOUT_S)


@functools.lru_cache(maxsize=None)
def mpi_records(n: int) -> list[dict]:
    result = mpi_script("bad_input", n, timeout=LAUNCH_TIMEOUT_S)
    assert result["ranks"] == n
    return result["records"]


TRANSPORTS = {"sockets": socket_records, "shm": shm_records,
              "mpi": mpi_records}


def _marks(transport):
    if transport == "mpi":
        return [pytest.mark.mpi, requires_mpi]
    return [pytest.mark.multiproc]


def _params(names, worlds, multi=()):
    return [pytest.param(t, n, name, id=f"{t}-N{n}-{name}",
                         marks=_marks(t))
            for t in TRANSPORTS for n in worlds
            for name in list(names) + (list(multi) if n > 1 else [])]


ALL_LOCAL = {**bi.LOCAL, **bi.LOCAL_MULTI}


def _check_follow_up(records, key):
    for r, rec in enumerate(records):
        assert rec[key]["follow_up"] is None, f"rank {r}: {rec[key]['follow_up']}"


@pytest.mark.timeout(LAUNCH_TIMEOUT_S + 30)
@pytest.mark.parametrize("transport,n,name",
                         _params(bi.LOCAL, (1, 3), bi.LOCAL_MULTI))
def test_bad_input_is_refused_before_any_byte(transport, n, name):
    types, words, _ = ALL_LOCAL[name]
    records = TRANSPORTS[transport](n)
    for r, rec in enumerate(records):
        out = rec[f"local:{name}"]
        ok_type = any(out["type_error"] if t is TypeError else
                      out["value_error"] for t in types) \
            if out["kind"] != "returned" else False
        assert ok_type, f"rank {r}: {out['kind']}: {out['message']}"
        for word in words:
            assert word in out["message"], \
                f"rank {r}: {word!r} not in {out['message']!r}"
        assert out["stats"] == [0] * 6, \
            f"rank {r} moved bytes before refusing: {out['stats']}"
    _check_follow_up(records, f"local:{name}")


@pytest.mark.timeout(LAUNCH_TIMEOUT_S + 30)
@pytest.mark.parametrize("transport,n,name", _params(bi.DISAGREE, (2, 3)))
def test_debug_mode_ranks_that_disagree_all_get_a_value_error(transport, n,
                                                              name):
    word, _ = bi.DISAGREE[name]
    records = TRANSPORTS[transport](n)
    for r, rec in enumerate(records):
        out = rec[f"disagree:{name}"]
        assert out["kind"] == "ValueError", \
            f"rank {r}: {out['kind']}: {out['message']}"
        assert "disagree" in out["message"] and word in out["message"], \
            out["message"]
        assert f"rank {r}" in out["message"], out["message"]
        assert out["elapsed_s"] < bi.CALL_TIMEOUT_S, "waited for a timeout"
        # only the small agreement message moved; the payload never did
        assert out["stats"][:2] == [0, 0], out["stats"]
        assert out["stats"][4] > 0 and out["stats"][5] > 0, out["stats"]
    _check_follow_up(records, f"disagree:{name}")


@pytest.mark.multiproc
@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
@pytest.mark.parametrize("name", bi.DEFAULT_MODE)
def test_default_mode_disagreement_fails_loudly_on_every_rank(transport,
                                                              name):
    """With the default agreement off (comm.check_calls = False; with it
    on, see test_mismatch.py), the fingerprint in every message's tag is the
    check. The first rank to receive a message of another call raises
    ProtocolError naming the sender; its peers then time out or lose it.
    No rank that receives returns a (wrong) result; a rank that only sends
    (a broadcast's root) may finish, as an MPI root's send does."""
    records = wk.launch(functools.partial(bi.run_default, name=name), 3,
                        transport=transport, timeout=60)
    kinds = [r["kind"] for r in records if r["received"] or
             r["kind"] != "returned"]
    assert "returned" not in kinds, records
    assert set(kinds) <= {"ProtocolError", "CollectiveTimeout", "PeerLost"}, \
        records
    assert "ProtocolError" in kinds, records
    for r in records:
        if r["kind"] == "ProtocolError":
            assert "different" in r["message"], r["message"]
        assert r["elapsed_s"] < bi.DEFAULT_TIMEOUT_S + 5, records


# -------------------------------------------------- single process checks
def test_single_rank_refuses_the_same_inputs():
    """N = 1 needs no peer to refuse bad input (and sends nothing anyway)."""
    with SocketComm(0, 1, [("127.0.0.1", 0)]) as comm:
        assert comm.stats.bytes_sent == 0
        for name, (types, words, call) in bi.LOCAL.items():
            with pytest.raises(types) as info:
                call(comm)
            for word in words:
                assert word in str(info.value), (name, str(info.value))


@pytest.mark.parametrize("dtype", ["int8", "uint64", "float16", "complex128",
                                   "longdouble"])
def test_every_numeric_dtype_is_accepted_on_one_rank(dtype):
    with SocketComm(0, 1, [("127.0.0.1", 0)]) as comm:
        x = np.arange(5).astype(dtype)
        y = wk.allreduce(x, comm)
        assert y.dtype == x.dtype and np.array_equal(x, y) and y is not x
