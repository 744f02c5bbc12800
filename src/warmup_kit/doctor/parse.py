"""Read one file the doctor was given: nccl-tests / rccl-tests text (with
any ``NCCL_DEBUG=INFO`` lines), a ``warmup-bench --json`` file or an
emulated-cluster report. Anything else is a :class:`DoctorInputError` with
a one-line reason: a missing, empty or binary file, JSON of another shape,
a log with no result rows, two GPU models in one run or one file."""
from __future__ import annotations

import json
import os

from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.doctor.kitjson import bench_runs, kind_of, report_runs
from warmup_kit.doctor.nccltests import parse_nccl_tests
from warmup_kit.doctor.records import Run

#: a file larger than this is refused (a log of 10^6 rows is ~100 MB)
MAX_BYTES = 512 << 20


def read_text(path: str) -> str:
    """The file's text; refuses missing, empty, huge and binary files."""
    try:
        size = os.path.getsize(path)
        if os.path.isdir(path):
            raise DoctorInputError(f"{path}: is a directory, not a log")
        if size > MAX_BYTES:
            raise DoctorInputError(f"{path}: {size} bytes is more than the "
                                   f"{MAX_BYTES >> 20} MiB a log can be")
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise DoctorInputError(f"{path}: cannot read it "
                               f"({exc.strerror or exc})") from None
    if not raw.strip():
        raise DoctorInputError(f"{path}: the file is empty")
    if b"\0" in raw[:65536]:
        raise DoctorInputError(f"{path}: a binary file, not a text log")
    text = raw.decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(16, len(text) // 100):
        raise DoctorInputError(f"{path}: not UTF-8 text (a binary file?)")
    return text


def parse_text(text: str, source: str = "<text>", hint: str = "") -> list[Run]:
    """Runs in ``text`` (see :func:`load`)."""
    if text.lstrip()[:1] == "{":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DoctorInputError(f"{source}: starts like JSON but is not "
                                   f"(line {exc.lineno}: {exc.msg})") from None
        kind = kind_of(doc)
        if kind is None:
            raise DoctorInputError(
                f"{source}: JSON, but neither a warmup-bench --json file "
                "(keys header, rows) nor an emulated-cluster report (keys "
                "machine, cluster, tiers, rows)")
        runs = (bench_runs(doc, source) if kind == "warmup-bench"
                else report_runs(doc, source))
    else:
        runs = parse_nccl_tests(text, source, hint)
    if not runs:
        raise DoctorInputError(
            f"{source}: no result rows (nccl-tests rows look like "
            "'  1048576  262144  float  sum  -1  ...'); is this the "
            "benchmark's output?")
    names = {}
    for r in runs:
        if len(r.gpu_names) > 1:
            raise DoctorInputError(
                f"{source}: run {r.index + 1} mixes GPU models "
                f"({', '.join(r.gpu_names)}); the doctor judges one system "
                "at a time")
        for g in r.gpu_names:
            names.setdefault(g, r.index)
    if len(names) > 1:
        raise DoctorInputError(
            f"{source}: mixes two systems ({' and '.join(names)}); split "
            "the file, one system per file")
    return runs


def load(path: str) -> list[Run]:
    """Every run in the file ``path``."""
    return parse_text(read_text(path), path, os.path.basename(path))
