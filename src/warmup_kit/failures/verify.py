"""Reading a sharded checkpoint back, and deciding whether it may be read.

A checkpoint (the layout of :mod:`warmup_kit.failures.files`) is complete
if and only if its manifest parses, the manifest's own checksum holds, its
pieces tile every array exactly once, and every shard file it lists has
the size and SHA-256 it lists. :func:`verify` checks all of that and
raises :class:`~warmup_kit.failures.files.CorruptCheckpoint` naming the
first problem; :func:`scan` reports every checkpoint under a root;
:func:`latest_complete` is what a resume loads: the newest checkpoint
that verifies, and the newer ones it skipped, each with its reason. Nothing
that has not been verified is ever read.

:func:`read_array` reads any range of a global array from whichever shards
hold it, so a run saved by 4 ranks can be loaded by 2 (an elastic
restart).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from warmup_kit.failures.files import (
    FORMAT, MANIFEST, CorruptCheckpoint, body_sha)

_DIR = re.compile(r"^step-(\d{8})-([0-9a-f]+)$")


@dataclass
class Manifest:
    """A verified manifest: the checkpoint's step, world, shards, meta."""

    directory: Path
    step: int
    world: int
    shards: list[dict]
    meta: dict
    arrays: dict = field(default_factory=dict)   # name -> (dtype, total)


def read_manifest(directory: Path) -> Manifest:
    """Parse and check the manifest (not the shard files).

    Raises:
        CorruptCheckpoint: no manifest, not JSON, wrong format, its
            checksum does not hold, or its pieces do not tile each array.
    """
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise CorruptCheckpoint("no MANIFEST.json: incomplete (the job "
                                "stopped before every shard was written)")
    try:
        doc = json.loads(path.read_bytes())
        body, sha = doc["body"], doc["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(f"MANIFEST.json unreadable ({exc})") \
            from None
    if body_sha(body) != sha:
        raise CorruptCheckpoint("MANIFEST.json fails its checksum "
                                "(corrupted)")
    if body.get("format") != FORMAT:
        raise CorruptCheckpoint(f"format {body.get('format')!r}, expected "
                                f"{FORMAT!r}")
    m = Manifest(Path(directory), int(body["step"]), int(body["world"]),
                 body["shards"], body["meta"])
    if sorted(s["rank"] for s in m.shards) != list(range(m.world)):
        raise CorruptCheckpoint(f"manifest lists shards of ranks "
                                f"{[s['rank'] for s in m.shards]} for "
                                f"{m.world} ranks")
    _index(m)
    return m


def _index(m: Manifest) -> None:
    """Every array's pieces must tile 0:total exactly once."""
    spans: dict[str, list] = {}
    for s in m.shards:
        for p in s["pieces"]:
            dt, total = m.arrays.setdefault(p["name"],
                                            (p["dtype"], p["total"]))
            if (dt, total) != (p["dtype"], p["total"]):
                raise CorruptCheckpoint(f"{p['name']}: shards disagree on "
                                        "its dtype or length")
            spans.setdefault(p["name"], []).append((p["start"], p["count"]))
    for name, parts in spans.items():
        at = 0
        for start, count in sorted(parts):
            if count == 0:
                continue
            if start != at:
                raise CorruptCheckpoint(f"{name}: pieces leave a gap or "
                                        f"overlap at element {at}")
            at += count
        if at != m.arrays[name][1]:
            raise CorruptCheckpoint(f"{name}: pieces cover {at} of "
                                    f"{m.arrays[name][1]} elements")


def verify(directory: Path) -> Manifest:
    """The manifest, after every shard file's size and SHA-256 is checked.

    Raises:
        CorruptCheckpoint: naming the first problem found.
    """
    m = read_manifest(directory)
    for s in m.shards:
        path = m.directory / s["file"]
        if not path.exists():
            raise CorruptCheckpoint(f"{s['file']} missing")
        size = path.stat().st_size
        if size != s["bytes"]:
            raise CorruptCheckpoint(f"{s['file']}: {size:,} bytes, the "
                                    f"manifest says {s['bytes']:,} "
                                    "(truncated or overwritten)")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != s["sha256"]:
            raise CorruptCheckpoint(f"{s['file']}: SHA-256 differs from "
                                    "the manifest's (corrupted)")
    return m


def read_array(m: Manifest, name: str, start: int = 0,
               stop: int | None = None) -> np.ndarray:
    """Elements ``start:stop`` of global array ``name``, from whichever
    shards hold them (any number of ranks may have written them)."""
    if name not in m.arrays:
        raise KeyError(f"checkpoint has no array {name!r}; it has "
                       f"{sorted(m.arrays)}")
    dt, total = m.arrays[name]
    stop = total if stop is None else stop
    if not 0 <= start <= stop <= total:
        raise ValueError(f"{name}: {start}:{stop} outside 0:{total}")
    out = np.empty(stop - start, np.dtype(dt))
    item = out.itemsize
    for s in m.shards:
        for p in s["pieces"]:
            if p["name"] != name:
                continue
            lo, hi = max(start, p["start"]), min(stop, p["start"] +
                                                 p["count"])
            if lo >= hi:
                continue
            with open(m.directory / s["file"], "rb") as f:
                f.seek(p["offset"] + (lo - p["start"]) * item)
                raw = f.read((hi - lo) * item)
            out[lo - start:hi - start] = np.frombuffer(raw, out.dtype)
    return out


@dataclass(frozen=True)
class Found:
    """One checkpoint directory under a root and what :func:`verify` said."""

    step: int
    directory: Path
    problem: str | None          # None: complete

    @property
    def complete(self) -> bool:
        return self.problem is None


def candidates(root: Path) -> list[tuple[int, Path]]:
    """Checkpoint directories under ``root``, newest step first (ties:
    the most recently written first), not yet verified."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        match = _DIR.match(d.name)
        if match and d.is_dir():
            out.append((int(match.group(1)), d.stat().st_mtime, d))
    return [(step, d) for step, _, d in sorted(out, key=lambda x: x[:2],
                                               reverse=True)]


def check(step: int, directory: Path) -> tuple[Found, Manifest | None]:
    """Verify one candidate: what was found, and the manifest if it is
    complete."""
    m = None
    try:
        m = verify(directory)
        problem = None if m.step == step else \
            f"manifest says step {m.step} in the directory of step {step}"
    except CorruptCheckpoint as exc:
        problem = str(exc)
    return Found(step, Path(directory), problem), (m if problem is None
                                                   else None)


def scan(root: Path) -> list[Found]:
    """Every checkpoint under ``root``, newest first, each verified."""
    return [check(step, d)[0] for step, d in candidates(root)]


def latest_complete(root: Path) -> tuple[Manifest | None, list[Found]]:
    """The newest checkpoint that verifies (None if none does), and the
    newer ones skipped on the way, each with its problem."""
    skipped = []
    for step, d in candidates(root):
        f, m = check(step, d)
        if m is not None:
            return m, skipped
        skipped.append(f)
    return None, skipped
