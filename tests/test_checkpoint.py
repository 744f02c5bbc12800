"""Checkpoints on disk: atomic files, a manifest with checksums written
last, verification that finds truncation, bit flips and missing pieces,
the newest complete checkpoint chosen, asynchronous saving, and a resume
that is bit-identical (in one process; the multi-rank cases, with real
kills, are in test_resume.py)."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from warmup_kit.comm.sockets import SocketComm
from warmup_kit.failures import inject
from warmup_kit.failures.checkpoint import Checkpointer
from warmup_kit.failures.files import (
    MANIFEST, CorruptCheckpoint, atomic_write, shard_name,
    step_dir, write_manifest, write_shard)
from warmup_kit.failures.job import Job, JobConfig, flat_slice, part
from warmup_kit.failures.restart import train
from warmup_kit.failures.verify import (
    latest_complete, read_array, scan, verify)

META = {"step": 3, "note": "same on every rank"}


def save(root: Path, step: int, world: int = 3, token: str = "ab",
         total: int = 10) -> Path:
    """A complete checkpoint of arrays x (float64) and y (int32) written by
    ``world`` ranks, each its contiguous part."""
    d = step_dir(root, step, token)
    d.mkdir(parents=True)
    x = np.arange(total, dtype=np.float64) + step
    y = np.arange(total, dtype=np.int32) * 2
    recs = []
    for r in range(world):
        lo, hi = part(total, r, world)
        recs.append(write_shard(d, r, world, {"x": (x[lo:hi], lo, total),
                                              "y": (y[lo:hi], lo, total)},
                                META))
    write_manifest(d, step, world, token, recs, META)
    return d


# ------------------------------------------------------------ atomic files
def test_atomic_write_leaves_whole_files_and_no_temporaries(tmp_path):
    p = tmp_path / "f.bin"
    n, sha = atomic_write(p, [b"abc", memoryview(b"defg")])
    assert p.read_bytes() == b"abcdefg" and n == 7
    assert sorted(os.listdir(tmp_path)) == ["f.bin"]
    import hashlib
    assert sha == hashlib.sha256(b"abcdefg").hexdigest()


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path):
    p = tmp_path / "f.bin"
    atomic_write(p, [b"old"])

    def boom(n):
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        atomic_write(p, [b"new", b"er"], hook=boom)
    assert p.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["f.bin"]


# ------------------------------------------------------------ verification
def test_round_trip_on_another_number_of_ranks(tmp_path):
    d = save(tmp_path, 5, world=3)
    m = verify(d)
    assert (m.step, m.world, m.meta) == (5, 3, META)
    assert np.array_equal(read_array(m, "x"), np.arange(10) + 5.0)
    # a reader on 4 ranks takes other ranges, across shard boundaries
    for r in range(4):
        lo, hi = part(10, r, 4)
        assert np.array_equal(read_array(m, "y", lo, hi),
                              np.arange(lo, hi, dtype=np.int32) * 2)
    assert read_array(m, "y").dtype == np.int32


def test_truncated_shard_is_detected(tmp_path):
    d = save(tmp_path, 5)
    f = d / shard_name(1, 3)
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        verify(d)


@pytest.mark.parametrize("byte", [0, 17, -1])
def test_a_flipped_bit_in_a_shard_is_detected(tmp_path, byte):
    d = save(tmp_path, 5)
    f = d / shard_name(2, 3)
    raw = bytearray(f.read_bytes())
    raw[byte] ^= 0x10
    f.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpoint, match="SHA-256"):
        verify(d)


def test_a_flipped_bit_in_the_manifest_is_detected(tmp_path):
    d = save(tmp_path, 5)
    raw = (d / MANIFEST).read_bytes()
    # change one digit of the step (still valid JSON)
    i = raw.index(b'"step": 5')
    doctored = raw[:i] + b'"step": 6' + raw[i + 9:]
    (d / MANIFEST).write_bytes(doctored)
    with pytest.raises(CorruptCheckpoint, match="checksum"):
        verify(d)
    (d / MANIFEST).write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CorruptCheckpoint, match="unreadable"):
        verify(d)


def test_no_manifest_means_incomplete(tmp_path):
    d = save(tmp_path, 5)
    (d / MANIFEST).unlink()
    with pytest.raises(CorruptCheckpoint, match="incomplete"):
        verify(d)


def test_a_missing_shard_is_detected(tmp_path):
    d = save(tmp_path, 5)
    (d / shard_name(0, 3)).unlink()
    with pytest.raises(CorruptCheckpoint, match="missing"):
        verify(d)


def test_pieces_that_do_not_tile_are_refused(tmp_path):
    d = step_dir(tmp_path, 1, "ab")
    d.mkdir()
    a = np.arange(4.0)
    recs = [write_shard(d, 0, 2, {"x": (a[:2], 0, 4)}, META),
            write_shard(d, 1, 2, {"x": (a[1:3], 1, 4)}, META)]   # overlap
    write_manifest(d, 1, 2, "ab", recs, META)
    with pytest.raises(CorruptCheckpoint, match="gap or overlap"):
        verify(d)


def test_ranks_that_disagree_on_the_scalar_state_do_not_commit(tmp_path):
    d = step_dir(tmp_path, 1, "ab")
    d.mkdir()
    a = np.arange(4.0)
    recs = [write_shard(d, 0, 2, {"x": (a[:2], 0, 4)}, {"step": 1}),
            write_shard(d, 1, 2, {"x": (a[2:], 2, 4)}, {"step": 2})]
    with pytest.raises(CorruptCheckpoint, match="rank 1"):
        write_manifest(d, 1, 2, "ab", recs, {"step": 1})
    assert not (d / MANIFEST).exists()


def test_the_newest_complete_checkpoint_is_chosen_and_the_rest_reported(
        tmp_path):
    save(tmp_path, 4)
    good = save(tmp_path, 8)
    bad = save(tmp_path, 12)
    (bad / shard_name(1, 3)).write_bytes(b"\0" * 7)            # truncated
    partial = step_dir(tmp_path, 16, "cd")
    partial.mkdir()
    write_shard(partial, 0, 3, {"x": (np.ones(3), 0, 10)}, META)
    m, skipped = latest_complete(tmp_path)
    assert m.directory == good and m.step == 8
    assert [(f.step, "incomplete" in f.problem or "truncated" in f.problem)
            for f in skipped] == [(16, True), (12, True)]
    found = scan(tmp_path)
    assert [f.step for f in found] == [16, 12, 8, 4]
    assert [f.complete for f in found] == [False, False, True, True]


def test_no_checkpoint_at_all(tmp_path):
    assert latest_complete(tmp_path / "nothing") == (None, [])


# ------------------------------------------------------------ asynchrony
def test_save_returns_before_the_write_and_training_goes_on(tmp_path):
    """The writer is held inside the shard write; the training thread
    returns from save() at once and keeps counting steps."""
    gate = threading.Event()
    inject.arm("ckpt.write", lambda **kw: gate.wait(10), step=2)
    try:
        ck = Checkpointer(tmp_path, 0, 1, "ab")
        t0 = time.perf_counter()
        entry = ck.save(2, {"x": (np.ones(1000), 0, 1000)}, META)
        assert time.perf_counter() - t0 < 1.0
        assert entry["write_s"] is None                  # still writing
        for _ in range(5):
            ck.steps_done += 1                           # training steps
        gate.set()
        ck.close(10)
    finally:
        inject.disarm_all()
    assert entry["committed"] and entry["steps_during"] == 5
    assert entry["stall_s"] < 0.5 and entry["bytes"] == 8000
    assert latest_complete(tmp_path)[0].step == 2


def test_the_writer_s_error_surfaces_on_the_next_save(tmp_path):
    inject.arm("ckpt.begin", lambda **kw: (_ for _ in ()).throw(
        OSError("no space left on device")), step=1)
    try:
        ck = Checkpointer(tmp_path, 0, 1, "ab")
        ck.save(1, {"x": (np.ones(4), 0, 4)}, META)
        with pytest.raises(OSError, match="no space"):
            ck.save(2, {"x": (np.ones(4), 0, 4)}, META)
        ck.save(2, {"x": (np.ones(4), 0, 4)}, META)       # the next one
        ck.close(10)
    finally:
        inject.disarm_all()
    assert latest_complete(tmp_path)[0].step == 2


def test_snapshots_do_not_see_later_changes(tmp_path):
    ck = Checkpointer(tmp_path, 0, 1, "ab")
    a = np.zeros(5)
    ck.save(1, {"x": (a, 0, 5)}, {"v": [1]})
    a += 99                            # training moves on
    ck.close(10)
    m, _ = latest_complete(tmp_path)
    assert np.all(read_array(m, "x") == 0)


def test_rank_zero_gives_up_on_a_missing_rank(tmp_path):
    ck = Checkpointer(tmp_path, 0, 2, "ab", commit_timeout_s=0.3)
    ck.save(1, {"x": (np.ones(2), 0, 4)}, META)
    with pytest.raises(TimeoutError, match="ranks \\[1\\]"):
        ck.wait(10)
    ck.close(10)
    assert latest_complete(tmp_path)[0] is None


def test_only_the_newest_complete_ones_are_kept(tmp_path):
    ck = Checkpointer(tmp_path, 0, 1, "ab", keep=2)
    for step in (1, 2, 3, 4):
        ck.save(step, {"x": (np.ones(2), 0, 2)}, META)
    ck.close(10)
    assert [f.step for f in scan(tmp_path)] == [4, 3]


# ------------------------------------------------------------ the job, 1 rank
@pytest.fixture
def one_rank():
    c = SocketComm(0, 1, [("127.0.0.1", 0)])
    yield c
    c.close()


def boom(**kw):
    raise RuntimeError("injected failure")


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
@pytest.mark.parametrize("fail_at", [1, 5, 8, 13])
def test_resume_is_bit_identical(one_rank, tmp_path, kind, fail_at):
    cfg = JobConfig(kind=kind)
    ref = train(one_rank, cfg, tmp_path / "ref")
    first = train(one_rank, cfg, tmp_path / "run", faults=[
        {"point": "train.step", "rank": 0, "step": fail_at,
         "action": boom}])
    assert not first["ok"] and first["failed_at"] == fail_at
    again = train(one_rank, cfg, tmp_path / "run")
    assert again["ok"]
    assert again["resumed_from"] == (fail_at // cfg.every) * cfg.every
    assert again["digest"] == ref["digest"]


@pytest.mark.parametrize("forget", ["adam moments", "adam step counter",
                                    "sampler", "step counter"])
def test_each_part_of_the_state_is_needed(one_rank, tmp_path, monkeypatch,
                                          forget):
    """Negative controls: a resume that forgets any one part of the state
    finishes with other bits than the run that never stopped."""
    cfg = JobConfig()
    ref = train(one_rank, cfg, tmp_path / "ref")
    train(one_rank, cfg, tmp_path / "run", faults=[
        {"point": "train.step", "rank": 0, "step": 6, "action": boom}])
    load = Job.load

    def forgetful(self, m):
        keep = (self.opt.m[0].copy(), self.opt.t, self.sampler.state(),
                self.step_count)
        load(self, m)
        if forget == "adam moments":
            for a in self.opt.m + self.opt.v:
                a[:] = 0
        elif forget == "adam step counter":
            self.opt.t = keep[1]
        elif forget == "sampler":
            self.sampler.load_state(keep[2])
        else:
            self.step_count = keep[3] + 1      # resumes at the wrong step
    monkeypatch.setattr(Job, "load", forgetful)
    again = train(one_rank, cfg, tmp_path / "run")
    assert again["ok"] and again["digest"] != ref["digest"]


def test_a_checkpoint_of_another_job_is_refused(one_rank, tmp_path):
    train(one_rank, JobConfig(steps=5), tmp_path)
    with pytest.raises(ValueError, match="another job"):
        Job(JobConfig(steps=5, lr=0.02), one_rank).resume(tmp_path)


def test_flat_slices():
    arrays = [np.arange(3.0), np.arange(3.0, 7.0).reshape(2, 2),
              np.arange(7.0, 8.0)]
    for lo in range(9):
        for hi in range(lo, 9):
            assert np.array_equal(flat_slice(arrays, lo, hi),
                                  np.arange(lo, hi, dtype=float))
    assert [part(10, r, 4) for r in range(4)] == [(0, 3), (3, 6), (6, 8),
                                                  (8, 10)]
