"""Run `make test`'s stages side by side, then say how long each took.

Usage: ``python tools/test_stages.py [--only NAME ...] [--serial]``

The stages are independent programs (pytest on tests/, nbval on the
notebooks, the book build, the site and JupyterLab checks); most of their
time is spent waiting (on ranks, kernels, a browser), so on a 2-core machine
they overlap well. Each stage writes its output to
``_build/test-logs/<stage>.log``; the whole log is printed when the stage
ends (never interleaved with another's), and the run ends with a table of
every stage's wall time and a closing ``N passed, N failed`` line counting
the pytest items of the stages that ran pytest. Exit status: 0 if every
stage passed.

A stage starts once the stages it needs have passed (the site check needs
the built book) and those it comes after have ended; ``LANES`` says which
stages share a lane (one after the other), lanes run at the same time.

The book is built first and alone: the build's time for each notebook is
what a reader waits for it (``tools/notebook_times.py`` holds each under a
limit), and would not be with other stages sharing the cores (beside pytest
and nbval, even at nice 10, lab01 took 41 s instead of 13 s). The rest of
the run is CPU-bound on 2 cores (the closing table gives each stage's CPU
seconds), so the stages that burn CPU in bulk, pytest and nbval, run at a
lower priority (``nice`` :data:`BULK_NICE`) and soak up whatever the
browser checks leave: those mostly wait, and are slow only when starved
(check-site took 235 s of wall for 19 CPU-s beside pytest's workers at the
same priority).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "_build" / "test-logs"
PY = sys.executable


@dataclass
class Stage:
    name: str
    cmd: list[str]
    needs: tuple[str, ...] = ()      # must have passed first
    after: tuple[str, ...] = ()      # must have ended first (pass or fail)
    nice: int = 0                    # added to the stage's niceness
    rc: int | None = None
    start_s: float = 0.0
    end_s: float = 0.0
    cpu_s: float = 0.0               # user + system, the stage's processes
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = LOGS / f"{self.name}.log"


def stages(workers: int) -> list[Stage]:
    make = os.environ.get("MAKE", "make")
    book = ("book",)
    return [
        Stage("book", [make, "--no-print-directory", "book"]),
        Stage("pytest", [PY, "-m", "pytest", "-q", "tests", "-p",
                         "no:cacheprovider", "-n", str(workers),
                         "--dist", "loadfile"], after=book, nice=BULK_NICE),
        Stage("nbval", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--nbval", "book", "-n", "2", "--dist", "loadfile"],
              after=book, nice=BULK_NICE),
        Stage("check-site", [make, "--no-print-directory", "check-site"],
              needs=book),
    ] + [Stage(f"check-lab-{i}", [make, "--no-print-directory", "check-lab",
                                   f"LAB_SHARD={i}/{LAB_SHARDS}"], after=book)
         for i in range(1, LAB_SHARDS + 1)]


#: niceness of the bulk stages (pytest, nbval): at 10 a process weighs
#: about a tenth of one at 0 in Linux's scheduler, so the browser checks
#: keep their pace beside them (``CPU s`` and ``wall s`` of the table)
BULK_NICE = 10


#: JupyterLab checks run as this many shards, one at the end of each lane:
#: alone the check keeps the 2 cores 25-55% busy (it waits on kernels and
#: on a browser), so two side by side finish in about half its time
LAB_SHARDS = 2


#: stages in one lane run one after another; lanes run side by side.
#: after the book, pytest and nbval start at a lower priority beside the
#: site check and one lab shard; the other shard follows nbval (two lab
#: shards side by side keep their kernels and browsers busy in turn)
LANES = [["book", "check-site", "check-lab-1"],
         ["pytest"],
         ["nbval", "check-lab-2"]]

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|xfailed|xpassed|skipped)")


def pytest_counts(text: str) -> dict[str, int]:
    """The counts of pytest's closing line (``7409 passed, 9 xfailed in
    ...``) in a stage's log; empty if there is none."""
    for line in reversed(text.splitlines()):
        if re.search(r"\b(passed|failed|error)\b.* in [\d.]+s", line):
            out: dict[str, int] = {}
            for n, what in _COUNT.findall(line):
                what = "errors" if what.startswith("error") else what
                out[what] = out.get(what, 0) + int(n)
            return out
    return {}


def run(selected: list[Stage], lanes: list[list[str]]) -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    by_name = {s.name: s for s in selected}
    queues = [[by_name[n] for n in lane if n in by_name] for lane in lanes]
    queues = [q for q in queues if q]
    running: dict[int, tuple[Stage, subprocess.Popen, object]] = {}
    t0 = time.monotonic()
    while queues or running:
        for i, q in enumerate(queues):
            if i in running or not q:
                continue
            st = q[0]
            if any(by_name[n].rc is None for n in st.needs + st.after
                   if n in by_name):
                continue
            q.pop(0)
            if any(by_name[n].rc for n in st.needs if n in by_name):
                st.rc = -1              # what it needs failed: not run
                st.log.write_text(f"not run: {', '.join(st.needs)} failed\n")
                continue
            f = open(st.log, "w")
            st.start_s = time.monotonic() - t0
            print(f"[{st.start_s:6.0f} s] start {st.name}"
                  + (f" (nice +{st.nice})" if st.nice else "")
                  + f": {' '.join(map(str, st.cmd))}", flush=True)
            running[i] = (st, subprocess.Popen(
                st.cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=(lambda n=st.nice: os.nice(n)) if st.nice
                else None), f)
        for i, (st, proc, f) in list(running.items()):
            ended = reap(proc)
            if ended is None:
                continue
            f.close()
            st.rc, st.cpu_s = ended
            st.end_s = time.monotonic() - t0
            del running[i]
            print(f"\n{'=' * 20} {st.name}: exit {st.rc} after "
                  f"{st.end_s - st.start_s:.0f} s {'=' * 20}", flush=True)
            sys.stdout.write(st.log.read_text(errors="replace"))
            sys.stdout.flush()
        if all(not q for q in queues):
            queues = []
        time.sleep(0.2)
    return summary(selected, time.monotonic() - t0)


def reap(proc: subprocess.Popen) -> tuple[int, float] | None:
    """(exit status, CPU seconds) of a stage that has ended, else None. The
    CPU time is ``wait4``'s: user + system of the stage's process and of
    every descendant it waited for (pytest's workers, ranks, kernels)."""
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def summary(selected: list[Stage], total_s: float) -> int:
    print(f"\n{'stage':<12} {'result':<8} {'from s':>7} {'to s':>7} "
          f"{'wall s':>7} {'CPU s':>7}")
    totals: dict[str, int] = {}
    for st in selected:
        result = {0: "ok", -1: "not run", None: "not run"}.get(st.rc, "FAILED")
        wall = st.end_s - st.start_s if st.rc not in (None, -1) else 0.0
        print(f"{st.name:<12} {result:<8} {st.start_s:7.0f} {st.end_s:7.0f} "
              f"{wall:7.0f} {st.cpu_s:7.0f}")
        if st.rc is not None and st.log.exists():
            for k, v in pytest_counts(st.log.read_text(errors="replace")).items():
                totals[k] = totals.get(k, 0) + v
    cpu = sum(st.cpu_s for st in selected)
    print(f"{'all':<12} {'':<8} {'':>7} {total_s:7.0f} {total_s:7.0f} "
          f"{cpu:7.0f}  (wall; CPU = user + system, on {os.cpu_count()} "
          f"cores: {cpu / max(total_s, 1e-9) / (os.cpu_count() or 1):.0%} "
          f"busy)")
    failed = [st.name for st in selected if st.rc != 0]
    if failed:
        print(f"failed stages: {', '.join(failed)}")
    # the plain closing line: pytest items of every stage that ran pytest
    print(f"tests: {totals.get('passed', 0)} passed, "
          f"{totals.get('failed', 0) + totals.get('errors', 0)} failed"
          + (f", {totals['skipped']} skipped" if totals.get("skipped") else ""))
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", default=[], metavar="STAGE",
                   help="run only this stage (repeatable)")
    p.add_argument("--serial", action="store_true",
                   help="one stage at a time, in the lanes' order")
    p.add_argument("--workers", type=int, default=4,
                   help="pytest-xdist workers for tests/ (default 4: the "
                        "multi-process tests mostly wait)")
    a = p.parse_args(argv)
    if a.workers < 1:
        p.error("--workers must be at least 1")
    every = stages(a.workers)
    names = [s.name for s in every]
    for n in a.only:
        if n not in names:
            p.error(f"no stage {n!r}; the stages: {', '.join(names)}")
    selected = [s for s in every if not a.only or s.name in a.only]
    lanes = [sum(LANES, [])] if a.serial else LANES
    return run(selected, lanes)


if __name__ == "__main__":
    sys.exit(main())
