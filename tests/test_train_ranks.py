"""The Chapter 7 training job on real ranks: sockets, shared memory, MPI.

One launch per (transport, N) runs tests/mpi/train_cases.py's job; the
tests check what it reports:

* data parallel = single-process training on the same global batch (float
  tolerance), and bit-identical parameters on every rank;
* overlap on and off give bit-identical gradients at every step;
* FSDP (ZeRO-3) = data parallel;
* traffic counted by the transport: DDP sends ``2 (N-1)`` times the
  parameter bytes in all, FSDP ``3 (N-1)`` times its padded parameters.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import train_cases as tc
import warmup_kit as wk
from conftest import mpi_script, requires_mpi

LAUNCH_TIMEOUT_S = 120
CASES = [("sockets", 2), ("sockets", 3), ("shm", 2), ("shm", 4)]


@functools.lru_cache(maxsize=None)
def job(transport: str, n: int) -> tuple:
    if transport == "mpi":
        return tuple(mpi_script("train", n, timeout=LAUNCH_TIMEOUT_S)
                     ["per_rank"])
    return tuple(wk.launch(tc.run_job, n, transport=transport,
                           timeout=LAUNCH_TIMEOUT_S))


def _cases():
    marks = [pytest.mark.multiproc, pytest.mark.timeout(LAUNCH_TIMEOUT_S + 60)]
    out = [pytest.param(t, n, id=f"{t}-N{n}", marks=marks) for t, n in CASES]
    out.append(pytest.param("mpi", 2, id="mpi-N2", marks=marks + [
        pytest.mark.mpi, requires_mpi]))
    return out


@pytest.mark.parametrize("transport,n", _cases())
def test_dp_equals_single_process(transport, n):
    ref = tc.reference_params()
    ranks = job(transport, n)
    assert [r["rank"] for r in ranks] == list(range(n))
    for r in ranks:
        got = np.array(r["dp_params"])
        assert not np.array_equal(got, tc.flat(tc.MLP(tc.WIDTHS).params))
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("transport,n", _cases())
def test_dp_is_bit_identical_across_ranks(transport, n):
    ranks = job(transport, n)
    assert len({r["dp_digest"] for r in ranks}) == 1
    assert len({r["off_digest"] for r in ranks}) == 1


@pytest.mark.parametrize("transport,n", _cases())
def test_overlap_and_no_overlap_give_identical_gradients(transport, n):
    ranks = job(transport, n)
    assert all(r["grads_identical"] for r in ranks)
    assert len({r["dp_digest"] for r in ranks} |
               {r["off_digest"] for r in ranks}) == 1
    assert len(ranks[0]["buckets"]) > 2          # several buckets overlapped


@pytest.mark.parametrize("transport,n", _cases())
def test_fsdp_equals_dp(transport, n):
    for r in job(transport, n):
        np.testing.assert_allclose(r["fsdp_params"], r["dp_params"],
                                   rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("transport,n", _cases())
def test_fsdp_moves_three_halves_of_dp(transport, n):
    ranks = job(transport, n)
    p, padded = ranks[0]["param_bytes"], ranks[0]["padded_bytes"]
    dp = sum(r["dp_bytes"] for r in ranks)
    fsdp = sum(r["fsdp_bytes"] for r in ranks)
    assert dp == 2 * (n - 1) * p                  # one ring all-reduce
    assert fsdp == 3 * (n - 1) * padded           # 2 all-gathers + 1 RS
    assert fsdp / dp == pytest.approx(1.5, rel=0.02)
    for r in ranks:                               # 1/N of the parameters
        assert r["shard_bytes"] * n == padded


@pytest.mark.multiproc
@pytest.mark.timeout(LAUNCH_TIMEOUT_S + 60)
@pytest.mark.parametrize("transport", ["sockets", "shm"])
def test_measured_steps_are_well_formed(transport):
    """The benchmark's measurement on a tiny job: every setting, every step
    with its layer and bucket spans in order; no timing is asserted."""
    from warmup_kit.train import run as R
    # a 64 B cap gives every tensor a bucket of its own (6), enough all-reduce
    # sizes for the host model's fit (a bucket closes once it reaches the cap)
    cfg = R.Config(widths=(16, 32, 32, 8), batch_per_rank=4,
                   bucket_sizes=(64, 1 << 20), steps=3, warmup=1,
                   sweep_bytes=(1024, 8192), timeout_s=30.0)
    rec = wk.launch(R.measure, 2, args=(cfg,), transport=transport,
                    timeout=LAUNCH_TIMEOUT_S)[0]
    assert rec["ranks"] == 2 and len(rec["runs"]) == 4
    assert len(rec["sweep"]) == 4
    for run in rec["runs"]:
        assert len(run["steps"]) == 3
        assert len(run["ready_after"]) == len(run["bucket_nbytes"])
        assert sum(run["bucket_nbytes"]) == 8 * (16 * 32 + 32 + 32 * 32 + 32
                                                 + 32 * 8 + 8)
        for st in run["steps"]:
            assert [layer for layer, _, _ in st["layers"]] == [2, 1, 0]
            assert st["lag_s"] >= 0
            assert [b[0] for b in st["buckets"]] == list(
                range(len(run["bucket_nbytes"])))
            for _, ready, start, end in st["buckets"]:
                assert start <= end <= st["step_s"]
                assert ready <= start + 1e-3 or not run["overlap"]
            ends = [b[3] for b in st["buckets"]]
            assert ends == sorted(ends)               # one stream, in order
            if not run["overlap"]:                    # after the backward
                assert st["buckets"][0][2] >= st["layers"][-1][2]
    from warmup_kit.train.analysis import table_rows
    assert len(table_rows(rec)) == 4
