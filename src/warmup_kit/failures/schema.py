"""The manifest's schema: every field checked before anything reads it.

A manifest's checksum proves only that its body is what some writer (or
someone with an editor and ``sha256sum``) wrote; it says nothing of the
body's shape. :func:`check_body` checks every field the reader will use
(types, ranges, file names, the writer every shard names) and raises
:class:`~warmup_kit.failures.files.CorruptCheckpoint` naming the first
field that is wrong (``shards[1].pieces[0].offset: missing``), so that a
malformed manifest is one more corrupt checkpoint the loader skips, never
an ``AttributeError`` or ``KeyError`` that escapes it.
"""
from __future__ import annotations

import re

import numpy as np

from warmup_kit.failures.files import (
    FORMAT, CorruptCheckpoint, is_writer, shard_name)

_SHA = re.compile(r"^[0-9a-f]{64}$")
_TOKEN = re.compile(r"^[0-9a-f]+$")


def _bad(where: str, what: str) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"MANIFEST.json malformed: {where}: {what}")


def _field(doc: dict, key: str, where: str):
    if key not in doc:
        raise _bad(f"{where}{key}", "missing")
    return doc[key]


def _dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise _bad(where, f"an object expected, got "
                          f"{type(value).__name__}")
    return value


def _int(doc: dict, key: str, where: str, low: int = 0) -> int:
    v = _field(doc, key, where)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"{where}{key}", f"an integer expected, got {v!r}")
    if v < low:
        raise _bad(f"{where}{key}", f"{v} is below {low}")
    return v


def _str(doc: dict, key: str, where: str, pattern=None) -> str:
    v = _field(doc, key, where)
    if not isinstance(v, str) or (pattern is not None and
                                  not pattern.match(v)):
        raise _bad(f"{where}{key}", f"not a valid value: {v!r}")
    return v


def _dtype(doc: dict, where: str) -> np.dtype:
    v = _str(doc, "dtype", where)
    try:
        dt = np.dtype(v)
    except (TypeError, ValueError):
        raise _bad(f"{where}dtype", f"not a dtype: {v!r}") from None
    if dt.kind not in "biufc" or dt.str != v:
        raise _bad(f"{where}dtype", f"not a numeric dtype: {v!r}")
    return dt


def _piece(p, where: str, nbytes: int) -> None:
    p = _dict(p, where)
    where += "."
    _str(p, "name", where)
    item = _dtype(p, where).itemsize
    total = _int(p, "total", where)
    start, count = _int(p, "start", where), _int(p, "count", where)
    offset = _int(p, "offset", where)
    if start + count > total:
        raise _bad(where[:-1], f"elements {start}:{start + count} outside "
                               f"0:{total}")
    if offset + count * item > nbytes:
        raise _bad(where[:-1], f"bytes {offset}:{offset + count * item} "
                               f"outside the shard's {nbytes} bytes")


def _shard(s, where: str, world: int, writer: str, meta_sha: str) -> int:
    s = _dict(s, where)
    where += "."
    rank = _int(s, "rank", where)
    if _int(s, "world", where) != world:
        raise _bad(f"{where}world", f"{s['world']}, the manifest says "
                                    f"{world}")
    theirs = _field(s, "writer", where)
    if theirs != writer:
        raise CorruptCheckpoint(
            f"the shard of rank {rank} was written by writer {theirs!r}, "
            f"the manifest by {writer!r}: two writers mixed in one "
            "checkpoint (never loaded)")
    if _str(s, "file", where) != shard_name(rank, world, writer):
        raise _bad(f"{where}file", f"{s['file']!r} is not rank {rank}'s "
                                   f"shard of writer {writer}")
    nbytes = _int(s, "bytes", where)
    _str(s, "sha256", where, _SHA)
    if _str(s, "meta_sha256", where, _SHA) != meta_sha:
        raise _bad(f"{where}meta_sha256", "not the hash of the manifest's "
                                          "meta")
    pieces = _field(s, "pieces", where)
    if not isinstance(pieces, list):
        raise _bad(f"{where}pieces", "a list expected")
    for j, p in enumerate(pieces):
        _piece(p, f"{where}pieces[{j}]", nbytes)
    return rank


def check_body(body, meta_sha) -> None:
    """Check a manifest body's every field (its checksum already held).

    Args:
        body: the parsed body.
        meta_sha: a function giving the hash of the body's ``meta`` (the
            one the shard records carry).

    Raises:
        CorruptCheckpoint: naming the first malformed field.
    """
    body = _dict(body, "body")
    if body.get("format") != FORMAT:
        raise CorruptCheckpoint(f"format {body.get('format')!r}, expected "
                                f"{FORMAT!r}")
    _int(body, "step", "")
    world = _int(body, "world", "", low=1)
    _str(body, "token", "", _TOKEN)
    writer = _field(body, "writer", "")
    if not is_writer(writer):
        raise _bad("writer", f"not a writer nonce: {writer!r}")
    meta = _dict(_field(body, "meta", ""), "meta")
    shards = _field(body, "shards", "")
    if not isinstance(shards, list):
        raise _bad("shards", "a list expected")
    mine = meta_sha(meta)
    ranks = [_shard(s, f"shards[{i}]", world, writer, mine)
             for i, s in enumerate(shards)]
    if sorted(ranks) != list(range(world)):
        raise CorruptCheckpoint(f"manifest lists shards of ranks {ranks} "
                                f"for {world} ranks")
