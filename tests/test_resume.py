"""Kill a rank, resume, finish with the same bits (fault injection on real
ranks: sockets, shared memory, MPI).

* a rank SIGKILLed at any step: the restarted run resumes from the last
  complete checkpoint (the newest, or the one before it while the newest
  was still being written) and ends bit-identical to an uninterrupted run;
* a rank SIGKILLed in the middle of writing its shard, or rank 0 before
  it writes the manifest: that checkpoint stays incomplete, the previous
  one is loaded (and the torn one is removed once a later one commits);
* every checkpoint corrupt: the job refuses at once, on every rank, and
  starts over from step 0 only when told to (``fresh=True``);
* resumed on fewer ranks (elastic), same global batch: equal to float
  tolerance (the sums run in another order), not bit for bit;
* under mpiexec the launcher takes the job down; the next mpiexec resumes.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import MPI_SCRIPTS, mpi_run, requires_mpi
from warmup_kit.failures import restart
from warmup_kit.failures.job import JobConfig
from warmup_kit.failures.restart import run_with_restarts
from warmup_kit.failures.verify import NothingVerifies, scan

KINDS = ["ddp", "fsdp"]
REF: dict = {}


def reference(kind: str, world: int, tmp_path_factory) -> dict:
    """The uninterrupted run (one per kind and world, shared by tests)."""
    if (kind, world) not in REF:
        root = tmp_path_factory.mktemp(f"ref-{kind}-{world}")
        REF[kind, world] = run_with_restarts(JobConfig(kind=kind), world,
                                             root, max_restarts=0)["final"]
    return REF[kind, world]


def kill(rank, point="train.step", **match):
    return {"point": point, "rank": rank, "action": "kill", **match}


#: (rank killed, at the start of step): before the first checkpoint, just
#: before and just after one, between two, in the last steps
KILLS = [(2, 0), (1, 3), (3, 4), (0, 7), (2, 13)]


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport,kind,rank,step", [
    ("sockets", kind, r, s) for kind in KINDS for r, s in KILLS] + [
    ("shm", kind, r, s) for kind in KINDS for r, s in KILLS[1:4:2]])
def test_killed_at_any_step_resumes_bit_identical(
        tmp_path, tmp_path_factory, transport, kind, rank, step,
        no_leftover_processes):
    cfg = JobConfig(kind=kind)
    ref = reference(kind, 4, tmp_path_factory)
    out = run_with_restarts(cfg, 4, tmp_path, faults=[kill(rank, step=step)],
                            transport=transport)
    first, last = out["attempts"][0], out["attempts"][-1]
    assert out["restarts"] == 1
    assert first["culprit"] == rank
    # the newest checkpoint before the kill, or (saves are asynchronous,
    # one in flight) the one before it if that one had not committed yet
    newest = (step // cfg.every) * cfg.every
    assert last["resumed_from"] in {newest, max(0, newest - cfg.every)}
    assert out["final"]["digest"] == ref["digest"]
    assert out["final"]["params"] == ref["params"]


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fault", [
    kill(1, "ckpt.write", step=8, bytes=lambda n: n > 0),     # mid-shard
    kill(3, "ckpt.begin", step=8),                            # before it
    kill(0, "ckpt.before_manifest", step=8),                  # no commit
])
def test_killed_while_checkpointing_leaves_the_previous_one_loadable(
        tmp_path, tmp_path_factory, kind, fault, no_leftover_processes):
    cfg = JobConfig(kind=kind)
    ref = reference(kind, 4, tmp_path_factory)
    out = run_with_restarts(cfg, 4, tmp_path, faults=[fault])
    assert out["attempts"][0]["culprit"] == fault["rank"]
    assert out["attempts"][-1]["resumed_from"] == 4     # not the torn 8
    # skipped: the torn 8, and (the survivors may have gone on to save
    # their shards of step 12 before they saw rank 0 was gone) a torn 12
    skipped = out["final"]["skipped"]
    assert [s["step"] for s in skipped] in ([8], [12, 8])
    assert all("incomplete" in s["problem"] for s in skipped)
    assert out["final"]["digest"] == ref["digest"]
    # skipped on resume, and removed once the restarted attempt committed
    # a later step (12): what is left is complete
    left = scan(tmp_path)
    assert [f.step for f in left] == [12, 8] and all(f.complete
                                                      for f in left)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fewer", [2, 3])
def test_elastic_resume_on_fewer_ranks(tmp_path, tmp_path_factory, kind,
                                       fewer, no_leftover_processes):
    cfg = JobConfig(kind=kind)
    ref = reference(kind, 4, tmp_path_factory)
    # killed just after the checkpoint of step 8 commits (a kill at a
    # fixed step can land before an asynchronous save has committed)
    out = run_with_restarts(cfg, 4, tmp_path,
                            faults=[kill(0, "ckpt.committed", step=8)],
                            elastic_world=fewer)
    assert [a["world"] for a in out["attempts"]] == [4, fewer]
    assert out["attempts"][-1]["resumed_from"] == 8
    got, want = np.array(out["final"]["params"]), np.array(ref["params"])
    assert np.allclose(got, want, rtol=1e-12, atol=1e-14)
    # the same global batch, summed in another order: not the same bits
    assert out["final"]["digest"] != ref["digest"]


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_a_corrupted_newest_checkpoint_is_skipped(tmp_path, tmp_path_factory,
                                                  no_leftover_processes):
    cfg = JobConfig()
    ref = reference("ddp", 4, tmp_path_factory)
    out = run_with_restarts(cfg, 4, tmp_path,
                            faults=[kill(0, "ckpt.committed", step=8)])
    assert out["attempts"][-1]["resumed_from"] == 8
    # now flip one bit of the newest checkpoint's shard and resume again
    newest = scan(tmp_path)[0]
    shard = sorted(newest.directory.glob("shard-00001-of-*.bin"))[0]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 1
    shard.write_bytes(bytes(raw))
    again = run_with_restarts(cfg, 4, tmp_path, max_restarts=0)
    assert again["attempts"][0]["resumed_from"] < newest.step
    assert "SHA-256" in again["final"]["skipped"][0]["problem"]
    assert again["final"]["digest"] == ref["digest"]


@pytest.mark.multiproc
@pytest.mark.timeout(90)
def test_when_nothing_verifies_the_job_refuses_until_told_to_start_fresh(
        tmp_path, tmp_path_factory, monkeypatch, no_leftover_processes):
    """Every checkpoint corrupt: the old code started over from step 0 and
    reported ok. Now every rank refuses, the agent does not retry (it
    cannot help), and fresh=True starts from 0, saying so."""
    cfg = JobConfig()
    ref = reference("ddp", 4, tmp_path_factory)
    run_with_restarts(cfg, 4, tmp_path, max_restarts=0)
    for f in scan(tmp_path):
        shard = sorted(f.directory.glob("shard-00002-of-*.bin"))[0]
        raw = bytearray(shard.read_bytes())
        raw[0] ^= 1
        shard.write_bytes(bytes(raw))
    launches = []
    launch = restart.launch
    monkeypatch.setattr(restart, "launch", lambda *a, **k: (
        launches.append(1), launch(*a, **k))[1])
    with pytest.raises(NothingVerifies, match=r"step 12: .*SHA-256.*"
                                              r"fresh=True"):
        run_with_restarts(cfg, 4, tmp_path, max_restarts=3)
    assert len(launches) == 1
    out = run_with_restarts(cfg, 4, tmp_path, fresh=True, max_restarts=0)
    assert out["attempts"][0]["resumed_from"] == 0
    assert out["final"]["started_fresh"]
    assert [s["step"] for s in out["final"]["skipped"]] == [12, 8]
    assert out["final"]["digest"] == ref["digest"]


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_under_mpi_the_launcher_ends_the_job_and_the_next_one_resumes(
        tmp_path, tmp_path_factory):
    ref = reference("ddp", 4, tmp_path_factory)
    first = mpi_run(MPI_SCRIPTS / "resume.py", 4, [tmp_path, 1, 6],
                    timeout=60)
    assert first.returncode != 0, first.describe()
    assert "BAD TERMINATION" in first.stdout + first.stderr, first.describe()
    second = mpi_run(MPI_SCRIPTS / "resume.py", 4, [tmp_path, -1, -1],
                     timeout=60)
    assert second.returncode == 0, second.describe()
    res = second.json()
    assert res["resumed_from"] == 4
    # the same schedule and reduction order on every transport: same bits
    assert res["digest"] == ref["digest"]
