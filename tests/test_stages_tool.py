"""tools/test_stages.py, which runs `make test`'s stages side by side: its
reading of pytest's closing line and its lanes."""
import importlib.util
import sys

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location(
    "test_stages", ROOT / "tools" / "test_stages.py")
TS = importlib.util.module_from_spec(spec)
sys.modules["test_stages"] = TS
spec.loader.exec_module(TS)


def test_counts_read_from_pytests_closing_line():
    log = ("....\n=== short test summary info ===\nXFAIL x - y\n"
           "7409 passed, 2 failed, 1 error, 9 xfailed in 574.53s (0:09:34)\n")
    assert TS.pytest_counts(log) == {"passed": 7409, "failed": 2,
                                     "errors": 1, "xfailed": 9}
    assert TS.pytest_counts("213 passed in 245.61s\n") == {"passed": 213}
    assert TS.pytest_counts("no tests ran in 0.01s\n") == {}
    assert TS.pytest_counts("make: *** [book] Error 2\n") == {}


def test_every_stage_is_in_one_lane_and_needs_come_first():
    names = [s.name for s in TS.stages(4)]
    flat = sum(TS.LANES, [])
    assert sorted(flat) == sorted(names)
    for st in TS.stages(4):
        for need in st.needs:
            lane = next(l for l in TS.LANES if st.name in l)
            # a need in the same lane must run before it; elsewhere the
            # runner waits for it
            if need in lane:
                assert lane.index(need) < lane.index(st.name)


def test_the_book_is_built_alone_first():
    """Its notebook times are what a reader waits: nothing beside it."""
    for st in TS.stages(4):
        if st.name != "book":
            assert "book" in st.needs + st.after, st.name


def test_the_bulk_stages_yield_to_the_browser_checks():
    """pytest and nbval run niced; the browser checks keep priority 0."""
    for st in TS.stages(4):
        assert st.nice == (TS.BULK_NICE if st.name in ("pytest", "nbval")
                           else 0), st.name
    assert TS.BULK_NICE >= 10


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_stage_runs_at_its_niceness(tmp_path, monkeypatch):
    import os
    monkeypatch.setattr(TS, "LOGS", tmp_path)
    show = [sys.executable, "-c", "import os; print(os.nice(0))"]
    low, same = TS.Stage("low", show, nice=7), TS.Stage("same", show)
    for s in (low, same):
        s.log = tmp_path / f"{s.name}.log"
    assert TS.run([low, same], [["low"], ["same"]]) == 0
    base = os.nice(0)
    assert int(same.log.read_text()) == base
    assert int(low.log.read_text()) == min(base + 7, 19)


@pytest.mark.slow
def test_a_stage_that_fails_fails_the_run_and_its_dependants_do_not_run(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(TS, "LOGS", tmp_path)
    py = sys.executable
    a = TS.Stage("a", [py, "-c", "print('3 passed, 1 failed in 0.1s');"
                                 "raise SystemExit(1)"])
    b = TS.Stage("b", [py, "-c", "print('never')"], needs=("a",))
    c = TS.Stage("c", [py, "-c", "print('2 passed in 0.1s')"])
    for s in (a, b, c):
        s.log = tmp_path / f"{s.name}.log"
    rc = TS.run([a, b, c], [["a", "b"], ["c"]])
    out = capsys.readouterr().out
    assert rc == 1
    assert (a.rc, b.rc, c.rc) == (1, -1, 0)
    assert "never" not in out and "failed stages: a, b" in out
    assert out.rstrip().splitlines()[-1] == "tests: 5 passed, 1 failed"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_stages_cpu_time_counts_its_children(tmp_path, monkeypatch, capsys):
    """The CPU column is wait4's: a stage that only waits on a child that
    spins for 0.6 s is charged the child's CPU, not its own idle wall."""
    monkeypatch.setattr(TS, "LOGS", tmp_path)
    spin = ("import time; t = time.process_time()\n"
            "while time.process_time() - t < 0.6: pass")
    a = TS.Stage("a", [sys.executable, "-c",
                       "import subprocess, sys; subprocess.run("
                       f"[sys.executable, '-c', {spin!r}], check=True)"])
    idle = TS.Stage("idle", [sys.executable, "-c",
                             "import time; time.sleep(0.6)"])
    for s in (a, idle):
        s.log = tmp_path / f"{s.name}.log"
    assert TS.run([a, idle], [["a"], ["idle"]]) == 0
    assert 0.6 <= a.cpu_s < 5, a.cpu_s
    assert idle.cpu_s < 0.4, idle.cpu_s
    assert "CPU s" in capsys.readouterr().out


def test_xdist_units_are_whole_files_and_the_timing_files_together():
    from conftest import TIMING_FILES, xdist_scope
    assert xdist_scope("tests/test_collectives_mpi.py::test_x[N4-a]") == \
        xdist_scope("tests/test_collectives_mpi.py::test_y") == \
        "tests/test_collectives_mpi.py"
    assert {xdist_scope(f"tests/{f}::test_a") for f in TIMING_FILES} == \
        {"timing"}
    assert xdist_scope("tests/test_units.py::test_a") != "timing"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_xdist_runs_each_unit_on_one_worker():
    """Live, under make test's --dist loadfile: a file's tests on one
    worker, and two timing files on the same one."""
    import re
    import subprocess
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
         "-n", "2", "--dist", "loadfile", "tests/test_project_files.py",
         "tests/test_units.py", "tests/test_frames.py",
         "tests/test_straggler.py", "-m", "not slow and not multiproc"],
        cwd=ROOT, capture_output=True, text=True, timeout=100).stdout
    where: dict[str, set[str]] = {}
    for gw, path in re.findall(r"\[(gw\d+)\].*?PASSED (tests/\S+?\.py)::",
                               out):
        where.setdefault(path, set()).add(gw)
    assert len(where) == 4, out[-3000:]
    assert all(len(w) == 1 for w in where.values()), where
    assert where["tests/test_frames.py"] == where["tests/test_straggler.py"]
