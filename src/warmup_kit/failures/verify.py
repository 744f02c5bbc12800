"""Reading a sharded checkpoint back, and deciding whether it may be read.

A checkpoint (the layout of :mod:`warmup_kit.failures.files`) is complete
if and only if its manifest parses, the manifest's own checksum holds,
every field of it is well formed (:mod:`warmup_kit.failures.schema`),
every shard it lists names the manifest's writer, its pieces tile every
array exactly once, and every shard file it lists has the size and SHA-256
it lists. :func:`verify` checks all of that and
raises :class:`~warmup_kit.failures.files.CorruptCheckpoint` naming the
first problem; :func:`scan` reports every checkpoint under a root;
:func:`latest_complete` is what a resume loads: the newest checkpoint
that verifies, and the newer ones it skipped, each with its reason. Nothing
that has not been verified is ever read. A checkpoint that was committed
(it has a manifest) and fails is *corrupt*; one without a manifest is
*incomplete* (a save cut short: normal after a crash). :func:`resume_point`
is the resume's decision: when corrupt checkpoints are all there is, it
refuses (:class:`NothingVerifies`) unless the caller asks to start fresh.

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

from warmup_kit.failures.files import MANIFEST, CorruptCheckpoint, body_sha
from warmup_kit.failures.schema import check_body

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
    token: str = ""              # the attempt's (the directory's name)
    writer: str = ""             # the nonce every shard names


class Incomplete(CorruptCheckpoint):
    """A checkpoint never committed: it has no manifest."""


class NothingVerifies(RuntimeError):
    """Checkpoints were committed under a root and none verifies: a resume
    refuses to start over from step 0 unless told to (``fresh=True``)."""


def read_manifest(directory: Path) -> Manifest:
    """Parse and check the manifest (not the shard files).

    Raises:
        Incomplete: no manifest (never committed).
        CorruptCheckpoint: not JSON, its checksum does not hold, a field
            is malformed, its shards name two writers, or its pieces do
            not tile each array.
    """
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise Incomplete("no MANIFEST.json: incomplete (the job stopped "
                         "before every shard was written)")
    try:
        doc = json.loads(path.read_bytes())
        body, sha = doc["body"], doc["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(f"MANIFEST.json unreadable ({exc})") \
            from None
    if not isinstance(sha, str) or body_sha(body) != sha:
        raise CorruptCheckpoint("MANIFEST.json fails its checksum "
                                "(corrupted)")
    check_body(body, body_sha)
    m = Manifest(Path(directory), body["step"], body["world"],
                 body["shards"], body["meta"], token=body["token"],
                 writer=body["writer"])
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
        # named by rank, not by file: the file's name carries the writer's
        # random nonce, and a report should read the same on every run
        who = f"rank {s['rank']}'s shard"
        if not path.exists():
            raise CorruptCheckpoint(f"{who} missing")
        size = path.stat().st_size
        if size != s["bytes"]:
            raise CorruptCheckpoint(f"{who}: {size:,} bytes, the manifest "
                                    f"says {s['bytes']:,} (truncated or "
                                    "overwritten)")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != s["sha256"]:
            raise CorruptCheckpoint(f"{who}: SHA-256 differs from the "
                                    "manifest's (corrupted)")
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
    committed: bool = True       # False: no manifest (incomplete)

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
    m, problem, committed = None, None, True
    match = _DIR.match(Path(directory).name)
    try:
        m = verify(directory)
        if m.step != step:
            problem = (f"manifest says step {m.step} in the directory of "
                       f"step {step}")
        elif match and m.token != match.group(2):
            problem = (f"manifest of attempt {m.token} in the directory of "
                       f"attempt {match.group(2)}")
    except Incomplete as exc:
        problem, committed = str(exc), False
    except CorruptCheckpoint as exc:
        problem = str(exc)
    except OSError as exc:              # unreadable, not there any more
        problem = f"unreadable ({type(exc).__name__}: {exc})"
    return (Found(step, Path(directory), problem, committed),
            m if problem is None else None)


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


def resume_point(root: Path, *, fresh: bool = False
                 ) -> tuple[Manifest | None, list[Found]]:
    """What a resume loads: :func:`latest_complete`, unless nothing
    verifies though checkpoints were committed (all of them corrupt).

    Incomplete checkpoints alone (a job that died before its first save
    committed) are a start from step 0, as is an empty root.

    Args:
        fresh: start from step 0 (return ``(None, skipped)``) even when
            every committed checkpoint is corrupt.

    Raises:
        NothingVerifies: every committed checkpoint is corrupt and
            ``fresh`` is false; the message lists each one's problem.
    """
    m, skipped = latest_complete(root)
    corrupt = [f for f in skipped if f.committed]
    if m is None and corrupt and not fresh:
        why = "; ".join(f"step {f.step}: {f.problem}" for f in corrupt)
        raise NothingVerifies(
            f"no checkpoint under {root} verifies ({why}); refusing to "
            "start over from step 0: pass fresh=True to do so")
    return m, skipped
