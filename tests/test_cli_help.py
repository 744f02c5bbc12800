"""Every command-line tool a reader is told about answers --help with exit
0 and a usage line (argparse formats help lazily, so a bad help string only
fails when someone asks for help: benchmarks/overlap.py's did)."""
from __future__ import annotations

import subprocess

import pytest

from conftest import PYTHON, ROOT

SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in
                 [*(ROOT / "labs").glob("lab*.py"),
                  *(ROOT / "benchmarks").glob("*.py"),
                  *(ROOT / "tools").glob("check_*.py")])
MODULES = ["warmup_kit.bench", "warmup_kit.measure.fit",
           "warmup_kit.failures.goodput_cli", "warmup_kit.cluster", "warmup_kit.run",
           "warmup_kit.doctor"]


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("cmd", [[s] for s in SCRIPTS] +
                         [["-m", m] for m in MODULES],
                         ids=lambda c: c[-1])
def test_help_answers(cmd):
    done = subprocess.run([PYTHON, *cmd, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:200]
