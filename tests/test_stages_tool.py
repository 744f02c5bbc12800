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


def test_files_that_cache_launches_are_kept_whole():
    """Every test file with a module-scoped fixture or an lru_cache is in
    conftest's CACHING_FILES (or the timing group): under pytest-xdist it
    must run whole on one worker."""
    import re
    from conftest import CACHING_FILES, TIMING_FILES
    caching = {p.name for p in (ROOT / "tests").glob("test_*.py")
               if p.name != "test_stages_tool.py" and re.search(r"lru_cache|functools\.cache\b|scope=[\"']module",
                            p.read_text())}
    assert caching <= CACHING_FILES | TIMING_FILES, caching - (
        CACHING_FILES | TIMING_FILES)
