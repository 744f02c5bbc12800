"""Writing a sharded checkpoint: atomic files, checksums, a manifest last.

Layout of one checkpoint (one directory per save)::

    root/step-00000012-<token>/
        shard-00000-of-00004-<writer>.bin   rank 0's bytes, written atomically
        shard-00000-<writer>.json           rank 0's record: size, sha256,
        ...                                 pieces, the writer
        MANIFEST.json               written last, by rank 0: the commit

Every file is written to a temporary name, flushed to the disk
(``fsync``), renamed into place (``os.replace``, atomic on POSIX) and its
directory synced, so a file is either absent or whole: a crash mid-write
leaves a temporary file and no final one. A shard holds pieces of named
global 1-D arrays (``params`` elements 0 to 612 of 1,226, say): that is
what lets a run resume on another number of ranks. The manifest, written
only once every shard's record is in, lists every shard with its size and
SHA-256 and carries a checksum of its own body; reading and checking it
back is :mod:`warmup_kit.failures.verify`.

The ``<token>`` is one per run attempt, agreed by the ranks, so an attempt
that saves the same step as a crashed one never mixes its shards with the
crashed attempt's leftovers. The ``<writer>`` is a random nonce made once
per writing job and agreed by its ranks (:func:`new_writer`, broadcast by
rank 0): every shard file and record names it, and so does the manifest.
Two jobs that share a token (launched twice, or a zombie attempt still
writing) then write different files, never each other's, and a manifest
that lists shards of two writers fails verification.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

#: /2: shards, records and the manifest name their writer
FORMAT = "warmup-kit-checkpoint/2"
MANIFEST = "MANIFEST.json"


class CorruptCheckpoint(ValueError):
    """A checkpoint that must not be loaded; the message says why."""


# ------------------------------------------------------------ atomic files
def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, chunks, *, durable: bool = True,
                 hook=None) -> tuple[int, str]:
    """Write ``chunks`` (bytes-like, in order) to ``path`` atomically.

    Args:
        durable: fsync the file before the rename and the directory after.
        hook: called as ``hook(bytes_written_so_far)`` after each chunk (a
            fault-injection point: tests kill the process there).

    Returns:
        ``(bytes written, sha256 hex)``.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-"
                         f"{secrets.token_hex(4)}")
    digest, n = hashlib.sha256(), 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view:
                k = os.write(fd, view)
                view = view[k:]
            digest.update(chunk)
            n += memoryview(chunk).nbytes
            if hook is not None:
                hook(n)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)
    return n, digest.hexdigest()


def write_json(path: Path, doc, *, durable: bool = True) -> None:
    """Atomically write ``doc`` as JSON."""
    atomic_write(path, [json.dumps(doc, sort_keys=True).encode()],
                 durable=durable)


def body_sha(body) -> str:
    """SHA-256 of a JSON body in canonical form (sorted keys)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()
                          ).hexdigest()


# ------------------------------------------------------------ pieces
@dataclass(frozen=True)
class Piece:
    """Elements ``start:start+count`` of global array ``name`` (``total``
    elements of ``dtype``), at byte ``offset`` of a shard file."""

    name: str
    dtype: str
    total: int
    start: int
    count: int
    offset: int

    def as_dict(self) -> dict:
        return dict(name=self.name, dtype=self.dtype, total=self.total,
                    start=self.start, count=self.count, offset=self.offset)


def new_writer() -> str:
    """A fresh writer nonce (64 random bits, hex). Made once per writing
    job and agreed by its ranks: rank 0 makes it and broadcasts it."""
    return secrets.token_hex(8)


def is_writer(nonce) -> bool:
    """Whether ``nonce`` can name a writer (lower-case hex, 1 to 64
    characters: it goes into file names)."""
    return (isinstance(nonce, str) and 0 < len(nonce) <= 64 and
            all(c in "0123456789abcdef" for c in nonce))


def _checked(writer: str) -> str:
    if not is_writer(writer):
        raise ValueError(f"a writer nonce is 1 to 64 lower-case hex "
                         f"digits, got {writer!r}")
    return writer


def step_dir(root: Path, step: int, token: str) -> Path:
    return Path(root) / f"step-{step:08d}-{token}"


def shard_name(rank: int, world: int, writer: str) -> str:
    """Rank ``rank``'s shard file, of the job whose nonce is ``writer``."""
    return f"shard-{rank:05d}-of-{world:05d}-{_checked(writer)}.bin"


def record_name(rank: int, writer: str) -> str:
    """Rank ``rank``'s record, of the job whose nonce is ``writer``."""
    return f"shard-{rank:05d}-{_checked(writer)}.json"


def write_shard(directory: Path, rank: int, world: int,
                arrays: Mapping[str, tuple[np.ndarray, int, int]],
                meta: dict, *, writer: str, durable: bool = True,
                hook=None) -> dict:
    """Write one rank's shard and then its record (both atomic).

    Args:
        arrays: name -> ``(local 1-D array, global start, global total)``.
        meta: JSON-able scalars of the state (every rank passes the same).
        writer: the nonce of the job writing (the same on its ranks).

    Returns:
        The record: file, bytes, sha256, pieces, the meta's hash, writer.
    """
    pieces, chunks, off = [], [], 0
    for name in sorted(arrays):
        a, start, total = arrays[name]
        a = np.ascontiguousarray(a).reshape(-1)
        if not 0 <= start <= start + a.size <= total:
            raise ValueError(f"{name}: elements {start}:{start + a.size} "
                             f"outside 0:{total}")
        pieces.append(Piece(name, a.dtype.str, int(total), int(start),
                            int(a.size), off))
        chunks.append(a)
        off += a.nbytes
    fname = shard_name(rank, world, writer)
    nbytes, sha = atomic_write(directory / fname, chunks, durable=durable,
                               hook=hook)
    record = {"rank": rank, "world": world, "file": fname, "bytes": nbytes,
              "sha256": sha, "pieces": [p.as_dict() for p in pieces],
              "meta_sha256": body_sha(meta), "writer": writer}
    write_json(directory / record_name(rank, writer), record,
               durable=durable)
    return record


def write_manifest(directory: Path, step: int, world: int, token: str,
                   records: list[dict], meta: dict, *,
                   durable: bool = True) -> None:
    """The commit: the manifest, after every record is in (all of one
    writer's: records of two writers are refused, never committed)."""
    mine = body_sha(meta)
    writer = records[0].get("writer") if records else None
    for r in records:
        if r.get("writer") != writer:
            raise CorruptCheckpoint(
                f"rank {r['rank']}'s shard was written by writer "
                f"{r.get('writer')}, rank {records[0]['rank']}'s by "
                f"{writer}: two writers share this directory")
        if r["meta_sha256"] != mine:
            raise CorruptCheckpoint(f"rank {r['rank']} saved other scalar "
                                    "state than rank 0 (step, optimizer "
                                    "or sampler disagree)")
    body = {"format": FORMAT, "step": step, "world": world, "token": token,
            "writer": writer,
            "shards": sorted(records, key=lambda r: r["rank"]),
            "meta": meta}
    write_json(directory / MANIFEST, {"body": body, "sha256": body_sha(body)},
               durable=durable)
