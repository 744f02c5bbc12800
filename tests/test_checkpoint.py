"""Checkpoints on disk: atomic files, a manifest with checksums written
last, verification that finds truncation, bit flips and missing pieces,
the newest complete checkpoint chosen, asynchronous saving, and a resume
that is bit-identical (in one process; the multi-rank cases, with real
kills, are in test_resume.py)."""
from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from warmup_kit.comm.sockets import SocketComm
from warmup_kit.failures import inject
from warmup_kit.failures.checkpoint import Checkpointer
from warmup_kit.failures.files import (
    FORMAT, MANIFEST, CorruptCheckpoint, atomic_write, body_sha, shard_name,
    step_dir, write_manifest, write_shard)
from warmup_kit.failures.job import Job, JobConfig, flat_slice, part
from warmup_kit.failures.restart import train
from warmup_kit.failures.verify import (
    NothingVerifies, latest_complete, read_array, resume_point, scan,
    verify)

META = {"step": 3, "note": "same on every rank"}


W = "feed"                             # the writer nonce of save()


def save(root: Path, step: int, world: int = 3, token: str = "ab",
         total: int = 10, writer: str = W) -> Path:
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
                                META, writer=writer))
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
    f = d / shard_name(1, 3, W)
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        verify(d)


@pytest.mark.parametrize("byte", [0, 17, -1])
def test_a_flipped_bit_in_a_shard_is_detected(tmp_path, byte):
    d = save(tmp_path, 5)
    f = d / shard_name(2, 3, W)
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
    (d / shard_name(0, 3, W)).unlink()
    with pytest.raises(CorruptCheckpoint, match="missing"):
        verify(d)


def test_pieces_that_do_not_tile_are_refused(tmp_path):
    d = step_dir(tmp_path, 1, "ab")
    d.mkdir()
    a = np.arange(4.0)
    recs = [write_shard(d, 0, 2, {"x": (a[:2], 0, 4)}, META, writer=W),
            write_shard(d, 1, 2, {"x": (a[1:3], 1, 4)}, META,
                        writer=W)]                               # overlap
    write_manifest(d, 1, 2, "ab", recs, META)
    with pytest.raises(CorruptCheckpoint, match="gap or overlap"):
        verify(d)


def test_ranks_that_disagree_on_the_scalar_state_do_not_commit(tmp_path):
    d = step_dir(tmp_path, 1, "ab")
    d.mkdir()
    a = np.arange(4.0)
    recs = [write_shard(d, 0, 2, {"x": (a[:2], 0, 4)}, {"step": 1},
                        writer=W),
            write_shard(d, 1, 2, {"x": (a[2:], 2, 4)}, {"step": 2},
                        writer=W)]
    with pytest.raises(CorruptCheckpoint, match="rank 1"):
        write_manifest(d, 1, 2, "ab", recs, {"step": 1})
    assert not (d / MANIFEST).exists()


def test_the_newest_complete_checkpoint_is_chosen_and_the_rest_reported(
        tmp_path):
    save(tmp_path, 4)
    good = save(tmp_path, 8)
    bad = save(tmp_path, 12)
    (bad / shard_name(1, 3, W)).write_bytes(b"\0" * 7)            # truncated
    partial = step_dir(tmp_path, 16, "cd")
    partial.mkdir()
    write_shard(partial, 0, 3, {"x": (np.ones(3), 0, 10)}, META, writer=W)
    m, skipped = latest_complete(tmp_path)
    assert m.directory == good and m.step == 8
    assert [(f.step, "incomplete" in f.problem or "truncated" in f.problem)
            for f in skipped] == [(16, True), (12, True)]
    found = scan(tmp_path)
    assert [f.step for f in found] == [16, 12, 8, 4]
    assert [f.complete for f in found] == [False, False, True, True]


def test_no_checkpoint_at_all(tmp_path):
    assert latest_complete(tmp_path / "nothing") == (None, [])


# ------------------------------------------------------------ malformed
def doctor(d: Path, edit) -> None:
    """Edit a manifest's body as a hand (or a buggy writer) would, and
    recompute its checksum so that it still holds."""
    doc = json.loads((d / MANIFEST).read_bytes())
    body = edit(doc["body"])
    (d / MANIFEST).write_text(json.dumps({"body": body,
                                          "sha256": body_sha(body)}))


def _drop(keys):
    def edit(body):
        at = body
        for k in keys[:-1]:
            at = at[k]
        del at[keys[-1]]
        return body
    return edit


def _set(keys, value):
    def edit(body):
        at = body
        for k in keys[:-1]:
            at = at[k]
        at[keys[-1]] = value
        return body
    return edit


PIECE = ["shards", 1, "pieces", 0]
MALFORMED = {
    "body null": (lambda b: None, "body: an object expected"),
    "body a list": (lambda b: [b], "body: an object expected"),
    "offset missing": (_drop(PIECE + ["offset"]), r"pieces\[0\]\.offset: "
                                                  "missing"),
    "offset a string": (_set(PIECE + ["offset"], "0"), "offset: an integer"),
    "offset past the end": (_set(PIECE + ["offset"], 10 ** 6),
                            "outside the shard"),
    "count negative": (_set(PIECE + ["count"], -1), "count: -1 is below"),
    "dtype object": (_set(PIECE + ["dtype"], "|O"), "dtype"),
    "dtype nonsense": (_set(PIECE + ["dtype"], "<z9"), "dtype"),
    "piece a string": (_set(PIECE, "x"), r"pieces\[0\]: an object"),
    "step a string": (_set(["step"], "8"), "step: an integer"),
    "step true": (_set(["step"], True), "step: an integer"),
    "world a float": (_set(["world"], 3.0), "world: an integer"),
    "world zero": (_set(["world"], 0), "world: 0 is below 1"),
    "rank a string": (_set(["shards", 1, "rank"], "1"), "rank: an integer"),
    "shards an object": (_set(["shards"], {}), "shards: a list"),
    "shard null": (_set(["shards", 2], None), r"shards\[2\]: an object"),
    "meta null": (_set(["meta"], None), "meta: an object"),
    "file elsewhere": (_set(["shards", 0, "file"], "../../etc/passwd"),
                       "file"),
    "sha256 a number": (_set(["shards", 0, "sha256"], 7), "sha256"),
    "writer missing": (_drop(["writer"]), "writer: missing"),
    "format missing": (_drop(["format"]), "format None"),
    "pieces missing": (_drop(["shards", 0, "pieces"]), "pieces: missing"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_manifest_is_corrupt_and_the_loader_falls_back(
        tmp_path, case):
    """A manifest whose checksum holds but whose body is malformed (edited
    by hand, or by a buggy writer): that checkpoint is corrupt, with the
    field named, and the one before it is loaded."""
    edit, why = MALFORMED[case]
    save(tmp_path, 4)
    doctor(save(tmp_path, 8), edit)
    m, skipped = latest_complete(tmp_path)
    assert m is not None and m.step == 4
    assert np.array_equal(read_array(m, "x"), np.arange(10) + 4.0)
    assert [f.step for f in skipped] == [8]
    assert re.search(why, skipped[0].problem), skipped[0].problem
    assert skipped[0].committed
    assert [f.complete for f in scan(tmp_path)] == [False, True]


def test_a_manifest_that_is_not_an_object_is_unreadable(tmp_path):
    d = save(tmp_path, 4)
    for doc in (b"null", b"[1, 2]", b'{"body": {}}', b'"text"'):
        (d / MANIFEST).write_bytes(doc)
        with pytest.raises(CorruptCheckpoint, match="unreadable|checksum"):
            verify(d)


def test_a_manifest_of_another_attempt_is_not_loaded(tmp_path):
    d = save(tmp_path, 4, token="ab")
    d.rename(step_dir(tmp_path, 4, "cd"))
    m, skipped = latest_complete(tmp_path)
    assert m is None and "attempt ab" in skipped[0].problem


# ------------------------------------------------------------ writers
def _two_writer_dir(root: Path) -> tuple[Path, list, list]:
    """Step 4 of token ab: writers aa and bb each wrote all 3 shards."""
    d = step_dir(root, 4, "ab")
    d.mkdir()
    recs = {}
    for w, v in (("aa", 1.0), ("bb", 2.0)):
        recs[w] = [write_shard(d, r, 3, {"x": (np.full(2, v), 2 * r, 6)},
                               META, writer=w) for r in range(3)]
    return d, recs["aa"], recs["bb"]


def test_a_manifest_listing_shards_of_two_writers_never_verifies(tmp_path):
    d, a, b = _two_writer_dir(tmp_path)
    body = {"format": FORMAT, "step": 4, "world": 3, "token": "ab",
            "writer": "aa", "shards": [a[0], b[1], a[2]], "meta": META}
    (d / MANIFEST).write_text(json.dumps({"body": body,
                                          "sha256": body_sha(body)}))
    with pytest.raises(CorruptCheckpoint, match="two writers mixed"):
        verify(d)
    m, skipped = latest_complete(tmp_path)
    assert m is None and "two writers" in skipped[0].problem
    # and the writer never commits such a set in the first place
    with pytest.raises(CorruptCheckpoint, match="two writers"):
        write_manifest(d, 4, 3, "ab", [a[0], b[1], a[2]], META)


#: the order in which two jobs' ranks (writer aa: values 1, bb: values 2;
#: one token, ab) save step 4: rank 1 writes, rank 0 writes and commits
ORDERS = [("a1", "b1", "a0", "b0"), ("a1", "b1", "b0", "a0"),
          ("b1", "a1", "a0", "b0"), ("a1", "a0", "b1", "b0")]


@pytest.mark.parametrize("order", ORDERS, ids="-".join)
def test_two_writers_with_one_token_never_mix_their_shards(tmp_path, order):
    """A job launched twice (or a zombie attempt) with the same token:
    whatever the interleaving, what loads is one writer's whole set, the
    last to commit (on the old code, rank 0 of one job committed the
    other's shard of rank 1: a mixed checkpoint that verified)."""
    for who in order:
        writer, value = {"a": ("aa", 1.0), "b": ("bb", 2.0)}[who[0]]
        rank = int(who[1])
        ck = Checkpointer(tmp_path, rank, 2, "ab", writer=writer,
                          commit_timeout_s=2.0)
        ck.save(4, {"x": (np.full(2, value), 2 * rank, 4)}, META)
        ck.close(10)
        m, _ = latest_complete(tmp_path)
        assert m is None or len(set(read_array(m, "x"))) == 1
        if rank == 0:                   # a commit: the committer's set
            assert np.array_equal(read_array(m, "x"), np.full(4, value))
            assert m.writer == writer


def test_a_rank_whose_shard_only_another_job_wrote_does_not_commit(
        tmp_path):
    """Rank 1 of this job (writer aa) never wrote; a zombie's rank 1
    (writer bb, same token) did: rank 0 gives up, naming the stranger."""
    zombie = Checkpointer(tmp_path, 1, 2, "ab", writer="bb")
    zombie.save(4, {"x": (np.full(2, 2.0), 2, 4)}, META)
    zombie.close(10)
    ck = Checkpointer(tmp_path, 0, 2, "ab", writer="aa",
                      commit_timeout_s=0.3)
    ck.save(4, {"x": (np.full(2, 1.0), 0, 4)}, META)
    with pytest.raises(TimeoutError, match=r"ranks \[1\].*other writers "
                                           r"\['bb'\]"):
        ck.wait(10)
    ck.close(10)
    assert latest_complete(tmp_path)[0] is None


def test_ranks_of_a_job_must_be_given_their_writer(tmp_path):
    with pytest.raises(ValueError, match="writer="):
        Checkpointer(tmp_path, 1, 4, "ab")
    with pytest.raises(ValueError, match="hex"):
        Checkpointer(tmp_path, 0, 1, "ab", writer="../x")
    one = Checkpointer(tmp_path, 0, 1, "ab")       # one rank: its own
    assert one.writer != Checkpointer(tmp_path, 0, 1, "ab").writer


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
    ck = Checkpointer(tmp_path, 0, 2, "ab", writer=W, commit_timeout_s=0.3)
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


def test_incomplete_checkpoints_older_than_a_commit_are_removed(tmp_path):
    """Incomplete checkpoints of earlier steps (a crashed attempt's), or of
    the same step by another attempt, are removed once a checkpoint
    commits; a later step's (maybe still being written) and corrupt ones
    (evidence) stay."""
    torn = step_dir(tmp_path, 2, "cd")
    torn.mkdir()
    write_shard(torn, 0, 2, {"x": (np.ones(1), 0, 2)}, META, writer="cc")
    same = step_dir(tmp_path, 4, "cd")             # the step committed
    same.mkdir()
    corrupt = save(tmp_path, 1, token="ef")
    (corrupt / shard_name(0, 3, W)).write_bytes(b"\0")
    later = step_dir(tmp_path, 9, "cd")
    later.mkdir()
    ck = Checkpointer(tmp_path, 0, 1, "ab", keep=2)
    ck.save(4, {"x": (np.ones(2), 0, 2)}, META)
    ck.close(10)
    left = {(f.step, f.directory.name[-2:], f.complete)
            for f in scan(tmp_path)}
    assert left == {(9, "cd", False), (4, "ab", True), (1, "ef", False)}
    assert not torn.exists() and not same.exists()


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


def _corrupt(d: Path) -> None:
    shard = sorted(d.glob("shard-00000-of-*.bin"))[0]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 1
    shard.write_bytes(bytes(raw))


def test_a_malformed_newest_manifest_resumes_from_the_one_before(
        one_rank, tmp_path):
    """Step 8's manifest loses a piece's offset (checksum recomputed): the
    resume skips it, with why, and loads step 4 (the old code loaded step
    8 and failed with KeyError inside the load)."""
    cfg = JobConfig()
    ref = train(one_rank, cfg, tmp_path / "ref")
    train(one_rank, cfg, tmp_path / "run", faults=[
        {"point": "train.step", "rank": 0, "step": 10, "action": boom}])
    d = scan(tmp_path / "run")[0].directory
    doctor(d, _drop(["shards", 0, "pieces", 0, "offset"]))
    again = train(one_rank, cfg, tmp_path / "run")
    assert again["ok"] and again["resumed_from"] == 4
    assert "offset: missing" in again["skipped"][0]["problem"]
    assert again["digest"] == ref["digest"]


def test_when_every_checkpoint_is_corrupt_the_resume_refuses(one_rank,
                                                            tmp_path):
    """Nothing verifies: no silent start from step 0 (the old code's ok
    True); with fresh=True it starts from 0 and says so."""
    cfg = JobConfig()
    ref = train(one_rank, cfg, tmp_path)
    kept = [f.directory for f in scan(tmp_path)]
    assert len(kept) == 2
    for d in kept:
        _corrupt(d)
    out = train(one_rank, cfg, tmp_path)
    assert not out["ok"] and out["refused"]
    assert "NothingVerifies" in out["error"]
    assert "fresh=True" in out["error"] and "SHA-256" in out["error"]
    assert out.get("steps_run", 0) == 0
    with pytest.raises(NothingVerifies, match="step 12: .*SHA-256"):
        resume_point(tmp_path)
    fresh = train(one_rank, cfg, tmp_path, fresh=True)
    assert fresh["ok"] and fresh["resumed_from"] == 0
    assert fresh["started_fresh"]
    assert [s["step"] for s in fresh["skipped"]] == [12, 8]
    assert fresh["digest"] == ref["digest"]


def test_incomplete_checkpoints_alone_are_a_start_from_zero(tmp_path):
    """A job killed before its first save committed left only incomplete
    checkpoints: that is no reason to refuse."""
    d = step_dir(tmp_path, 4, "ab")
    d.mkdir()
    write_shard(d, 0, 2, {"x": (np.ones(1), 0, 2)}, META, writer=W)
    m, skipped = resume_point(tmp_path)
    assert m is None and [f.committed for f in skipped] == [False]
    assert resume_point(tmp_path / "empty") == (None, [])
