"""nccl-tests and rccl-tests output: runs, rows, the ``# Using devices``
lines, interleaved ``NCCL_DEBUG=INFO`` lines.

A run starts at its ``# nThread T nGpus G minBytes ...`` line (``-t`` threads
of ``-g`` GPUs per process), lists one ``#  Rank R Group G Pid P on HOST
device D [bus] NAME`` line per rank (older versions have no ``Group``), a
column header, then one row per size, printed by nccl-tests' ``TimeTest``
(``src/common.cu``) as::

    size  count  type  redop  root  | time algbw busbw #wrong | (in-place)

``time`` in us, bandwidths in GB/s, ``#wrong`` an element count (``N/A``
with ``-c 0``; versions before the ``root`` column print a maximum
``error`` instead). It ends with ``# Out of bounds values : N OK`` and
``# Avg bus bandwidth : X``. Several runs may be concatenated in one file;
a run cut short keeps the rows it has.

The table does not name its collective. In order, the doctor takes it from
a ``# Collective test starting: all_reduce_perf`` line (newer versions),
a command line naming a ``*_perf`` binary, the file's name, or else the
columns: ``root`` >= 0 is a rooted collective (``broadcast``, or ``reduce``
when it reduces); ``size / (count x type size)`` is 1 for all-reduce (or
send/recv when nothing is reduced) and the rank count for reduce-scatter
(reduces) or all-gather (does not; all-to-all prints the same columns,
so name it). :attr:`Run.collective_how` says which.
"""
from __future__ import annotations

import re

from warmup_kit.doctor.ncclinfo import MARK, read_info
from warmup_kit.doctor.records import Evidence, Row, Run

#: nccl-tests binary stem -> the model's collective name
BINARIES = {"all_reduce": "allreduce", "all_gather": "all_gather",
            "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all",
            "broadcast": "broadcast", "reduce": "reduce",
            "sendrecv": "sendrecv", "gather": "gather",
            "scatter": "scatter", "hypercube": "hypercube"}
_BINARY = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|"
                     r"broadcast|reduce|sendrecv|gather|scatter|hypercube)"
                     r"_perf\b")
_PREFIX = re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:\s?")
_TAG = re.compile(r"^(\[\d+\])")
_NTHREAD = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_DEVICE = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+"
                     r"(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.*?)\s*$")
#: header lines as some pastes show them, without their leading '#'
_BARE = ("nThread ", "Rank ", "Using devices", "Out of bounds values",
         "Avg bus bandwidth", "Collective test starting")
_NUM = re.compile(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?")
#: bytes per element of nccl-tests' type names
TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "fp8_e4m3": 1,
              "fp8_e5m2": 1, "f8e4m3": 1, "f8e5m2": 1,
              "half": 2, "float16": 2, "bfloat16": 2, "bf16": 2, "fp16": 2,
              "int32": 4, "uint32": 4, "int": 4, "float": 4, "float32": 4,
              "int64": 8, "uint64": 8, "double": 8, "float64": 8}
_NO_REDOP = ("none", "-")


def _float(tok: str) -> float:
    return float(tok)


class _Parser:
    def __init__(self, source: str, hint: str = "") -> None:
        self.source = source
        self.runs: list[Run] = []
        self.run: Run | None = None
        self.pending: tuple[str, str] | None = None
        m = _BINARY.search(hint)
        self.file_marker = ((BINARIES[m.group(1)], f"file name {hint!r}")
                            if m else None)
        self.legacy = False          # "error" column instead of "#wrong"
        self.root_col: bool | None = None
        self.redops: list[tuple[str, int, int, str]] = []

    # ------------------------------------------------------------ runs
    def new_run(self) -> Run:
        self.finish()
        self.run = Run(self.source, index=len(self.runs))
        self.redops = []
        if self.pending:
            self.run.collective, self.run.collective_how = self.pending
            self.pending = None
        return self.run

    def current(self) -> Run:
        return self.run if self.run is not None else self.new_run()

    def finish(self) -> None:
        r = self.run
        if r is None:
            return
        self.run = None
        if not r.rows:
            return                     # cut before its first row
        if not r.collective:
            r.collective, r.collective_how = self.infer(r)
        for row in r.rows:
            row.collective = r.collective
        self.runs.append(r)

    def infer(self, r: Run) -> tuple[str, str]:
        if self.file_marker:
            return self.file_marker
        n = len(r.devices) or (r.facts.nranks.value if r.facts.nranks
                               else 0)
        votes: dict[str, int] = {}
        for redop, root, ratio, _ in self.redops:
            reduces = redop.lower() not in _NO_REDOP
            if root >= 0:
                c = "reduce" if reduces else "broadcast"
            elif ratio <= 1:
                c = "allreduce" if reduces else "sendrecv"
            else:
                c = "reduce_scatter" if reduces else "all_gather"
            votes[c] = votes.get(c, 0) + 1
        if not votes:
            return "allreduce", "assumed (no columns to infer from)"
        c = max(votes, key=votes.get)
        why = {"allreduce": "size = count x type size, and it reduces",
               "sendrecv": "size = count x type size, no reduction",
               "reduce_scatter": f"size = {n or 'ranks'} x count x type "
                                 "size, and it reduces",
               "all_gather": f"size = {n or 'ranks'} x count x type size, "
                             "no reduction (all-to-all looks the same: "
                             "name it with the file or command line)",
               "reduce": "a root column and a reduction",
               "broadcast": "a root column, no reduction"}[c]
        return c, f"inferred from the columns: {why}"

    # ------------------------------------------------------------ lines
    def marker(self, coll: str, how: str) -> None:
        if self.run is not None and not self.run.rows:
            self.run.collective, self.run.collective_how = coll, how
        else:
            self.finish()
            self.pending = (coll, how)

    def comment(self, n: int, line: str) -> None:
        body = line.lstrip()[1:].strip()
        if body.startswith("nThread"):
            r = self.run
            if r is None or r.rows or r.nthread is not None:
                r = self.new_run()
            m = _NTHREAD.search(body)
            if m:
                r.nthread, r.ngpus = int(m.group(1)), int(m.group(2))
            return
        if body.startswith("Collective test starting"):
            m = _BINARY.search(body)
            if m:
                self.marker(BINARIES[m.group(1)], f"line {n}: {body}")
            return
        if body.startswith("Rank") or body.startswith("Using devices"):
            m = _DEVICE.search(body)
            if m:
                r = self.current()
                if r.rows:
                    r = self.new_run()
                r.devices.append((int(m.group(1)), m.group(2),
                                  int(m.group(3)), m.group(4)))
            return
        if "size" in body and "count" in body and \
                ("#wrong" in body or "error" in body or "busbw" in body):
            self.legacy = "#wrong" not in body and "error" in body
            self.root_col = "root" in body
            if self.run is not None and self.run.rows:
                self.new_run()
            return
        if body.startswith("Out of bounds values"):
            m = _NUM.search(body.split(":", 1)[-1])
            if m and self.run is not None:
                self.run.out_of_bounds = Evidence(int(float(m.group())), n,
                                                  line.strip())
            return
        if body.startswith("Avg bus bandwidth"):
            m = _NUM.search(body.split(":", 1)[-1])
            if m and self.run is not None:
                self.run.avg_busbw = Evidence(float(m.group()), n,
                                              line.strip())
            return

    def row(self, n: int, line: str, tok: list[str]) -> bool:
        """Parse a result row; False if ``tok`` is not one."""
        try:
            size, count = int(tok[0]), int(tok[1])
        except ValueError:
            return False
        dtype, redop = tok[2], tok[3]
        if not dtype[:1].isalpha():
            return False
        rest = tok[4:]
        root = -1
        has_root = self.root_col
        if has_root is None:
            has_root = len(rest) % 4 != 0
        if has_root:
            if not rest:
                self.current().truncated = True
                return True
            try:
                root = int(rest[0])
            except ValueError:
                return False
            rest = rest[1:]
        groups = [rest[i:i + 4] for i in range(0, len(rest) - len(rest) % 4,
                                               4)][:2]
        if not groups or len(rest) not in (4, 5, 8, 9):
            self.current().truncated = True
            return True
        meas = []
        try:
            for g in groups:
                t, alg, bus = _float(g[0]), _float(g[1]), _float(g[2])
                w = None
                if not self.legacy and g[3] != "N/A":
                    w = int(_float(g[3]))
                meas.append((t, alg, bus, w))
        except ValueError:
            self.current().truncated = True
            return True
        r = self.current()
        wrong = None
        if any(m[3] is not None for m in meas):
            wrong = sum(m[3] or 0 for m in meas)
        first = meas[0]
        if size and r.rows and r.restart is None and \
                0 < size <= r.rows[-1].nbytes:
            r.restart = Row(size, "", first[2], line=n, text=line.strip())
        ws = TYPE_BYTES.get(dtype.lower())
        ratio = round(size / (count * ws)) if ws and count else 1
        self.redops.append((redop, root, ratio, dtype))
        r.rows.append(Row(nbytes=size, collective="", busbw_gbps=first[2],
                          time_us=first[0], algbw_gbps=first[1],
                          inplace_busbw_gbps=(meas[1][2] if len(meas) > 1
                                              else None),
                          wrong=wrong, dtype=dtype, line=n,
                          text=line.strip()))
        return True

    def feed(self, n: int, line: str) -> None:
        at = line.find(MARK)
        if at >= 0:
            read_info(self.run.facts if self.run is not None else
                      self.current().facts, n, line, at)
            return
        if line.startswith("["):
            line = _PREFIX.sub("", line)
            m = _TAG.match(line)
            if m:                       # srun -l / per-rank tags: "[0]"
                line = line.replace(m.group(1), " ")
        s = line.lstrip()
        if not s:
            return
        if s[0] == "#":
            self.comment(n, s)
            return
        if s.startswith(_BARE):      # a paste that lost its '#' prefixes
            self.comment(n, "# " + s)
            return
        if s[0].isdigit():
            tok = s.split()
            if len(tok) >= 5 and self.row(n, line, tok):
                return
            if tok[0].isdigit() and self.run is not None and self.run.rows:
                self.run.truncated = True     # a row cut short
                return
        if "_perf" in s:
            m = _BINARY.search(s)
            if m:
                self.marker(BINARIES[m.group(1)], f"line {n}: {s.strip()}")


def parse_nccl_tests(text: str, source: str, hint: str = "") -> list[Run]:
    """Every run of nccl-tests / rccl-tests output in ``text``.

    ``hint`` is the file's name (a ``*_perf`` stem names the collective).
    INFO lines belong to the run they appear in (from its ``# nThread``
    line, or from the top of the file for the first run). A run cut before
    its first row is dropped.
    """
    p = _Parser(source, hint)
    for n, line in enumerate(text.splitlines(), 1):
        p.feed(n, line)
    p.finish()
    runs = p.runs
    for r in runs:
        if any("AMD" in g or "Instinct" in g or "Radeon" in g
               for g in r.gpu_names) or (r.facts.version and "RCCL"
                                          in r.facts.version.text):
            r.kind = "rccl-tests"
    return runs

