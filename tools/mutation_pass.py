"""Mutation pass over the model files: does a one-line change fail a test
that names the formula it moved? (issue 31, item 2)

Usage:

    .venv/bin/python tools/mutation_pass.py [--table tools/mutation_table.json]
        [--only TEXT] [--list]

The table (JSON) is a list of groups, one per model: the test files that
cover it and its mutations, each ``{"file", "old", "new", "expect"}``:
``old`` must occur exactly once in ``file`` (so the table notices when the
code moves under it), ``new`` replaces it, and ``expect`` is a piece of
the name of the test that should catch it. For each mutation, one at a
time, the script writes the changed file, runs pytest on the group's test
files only, puts the file back (always, even on Ctrl-C or SIGTERM) and prints

    killed     the run failed, and a failing test's name contains ``expect``
    unnamed    the run failed, but no failing test has ``expect`` in its name
    survived   every test passed

with the failing tests. It exits 1 if any mutation survived or went
unnamed, 2 on a bad table. ``--only`` keeps the mutations whose file, old
text or expect contains TEXT.
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAILED = re.compile(r"^(?:FAILED|ERROR) \S+::(\S+)", re.M)


class BadTable(Exception):
    """The table cannot be read or no longer matches the code."""


def load(path: Path) -> list[dict]:
    """The groups of the table, each mutation checked against its file."""
    try:
        groups = json.loads(path.read_text())
        for g in groups:
            for key in ("model", "tests", "mutations"):
                g[key]
            for mu in g["mutations"]:
                for key in ("file", "old", "new", "expect"):
                    mu[key]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadTable(f"cannot read table {path}: {e!r}")
    problems = []
    for g in groups:
        for t in g["tests"]:
            if not (ROOT / t).is_file():
                problems.append(f"no test file {t}")
        for mu in g["mutations"]:
            f = ROOT / mu["file"]
            if not f.is_file():
                problems.append(f"no file {mu['file']}")
                continue
            n = f.read_text().count(mu["old"])
            if n != 1:
                problems.append(f"{mu['file']}: {mu['old']!r} occurs {n} "
                                "times (must be once)")
    if problems:
        raise BadTable("bad table: " + "; ".join(problems))
    return groups


def run_one(python: str, mu: dict, tests: list[str], timeout: float
            ) -> tuple[str, list[str]]:
    """Apply ``mu``, run ``tests``, restore; (verdict, failing tests)."""
    f = ROOT / mu["file"]
    original = f.read_text()
    try:
        f.write_text(original.replace(mu["old"], mu["new"]))
        try:
            r = subprocess.run(
                [python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "--tb=no", "-rfE", *tests], cwd=ROOT, capture_output=True,
                text=True, timeout=timeout)
            out, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired:
            return "killed(timeout)", []
    finally:
        f.write_text(original)
    failing = sorted(set(FAILED.findall(out)))
    if rc == 0:
        return "survived", []
    if not failing:
        return "unnamed", [out.strip().splitlines()[-1] if out.strip()
                           else f"pytest exit {rc}"]
    if any(mu["expect"] in name for name in failing):
        return "killed", failing
    return "unnamed", failing


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", type=Path,
                    default=ROOT / "tools" / "mutation_table.json")
    ap.add_argument("--only", default="",
                    help="keep mutations whose file, old text or expect "
                         "contains this")
    ap.add_argument("--list", action="store_true",
                    help="print the mutations and exit")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    # SIGTERM (a kill, a CI timeout) unwinds like Ctrl-C, so run_one's
    # finally puts the mutated file back
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        groups = load(a.table)
    except BadTable as e:
        print(f"mutation_pass: {e}", file=sys.stderr)
        return 2
    bad = total = 0
    for g in groups:
        muts = [mu for mu in g["mutations"]
                if a.only in mu["file"] + mu["old"] + mu["expect"]]
        if not muts:
            continue
        print(f"== {g['model']} ({', '.join(g['tests'])})")
        for mu in muts:
            label = (f"{Path(mu['file']).name}: {mu['old'].strip()!r} -> "
                     f"{mu['new'].strip()!r}")
            if a.list:
                print(f"  {label}  [expect {mu['expect']}]")
                continue
            t0 = time.monotonic()
            verdict, failing = run_one(a.python, mu, g["tests"], a.timeout)
            total += 1
            bad += verdict in ("survived", "unnamed")
            shown = [n for n in failing if mu["expect"] in n] or failing
            more = len(failing) - len(shown)
            print(f"  {verdict:9s} {label}\n            by "
                  f"{', '.join(shown[:3]) or '-'}"
                  f"{f' (+{more} more)' if more else ''}"
                  f"  [{time.monotonic() - t0:.1f} s]", flush=True)
    if not a.list:
        print(f"{total - bad} of {total} mutations killed by a test that "
              f"names the term; {bad} survived or unnamed")
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("mutation_pass: stopped (the mutated file was put back)",
              file=sys.stderr)
        sys.exit(130)
