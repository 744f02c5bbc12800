"""The test harness's own promises (tests/conftest.py): a job run through
``run_command`` leaves no MPICH shared-memory segment behind, and keeps
one that a live process still maps."""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from conftest import run_command
from warmup_kit.comm.mpirun import SHM_DIR as SHM

pytestmark = [pytest.mark.multiproc,
              pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm")]


def test_a_finished_jobs_segments_are_swept_and_a_mapped_one_is_kept():
    tag = uuid.uuid4().hex[:8]
    left = SHM / f"mpich_shm_{tag}_0"      # as a job killed on its deadline
    held = SHM / f"mpich_shm_{tag}_1"      # one another process maps
    flag = SHM / f"wk-test-{tag}-mapped"
    # a process outside the job waits for the job's second segment, maps
    # it and says so
    keeper = subprocess.Popen([sys.executable, "-c", (
        "import mmap, os, time\n"
        f"while not os.path.exists({str(held)!r}): time.sleep(0.01)\n"
        f"f = open({str(held)!r}, 'r+b')\n"
        "m = mmap.mmap(f.fileno(), 4096); f.close()\n"
        f"open({str(flag)!r}, 'w').close(); time.sleep(60)\n")])
    try:
        job = (
            "import os, time\n"
            f"open({str(left)!r}, 'wb').write(bytes(4096))\n"
            f"open({str(held)!r} + '.new', 'wb').write(bytes(4096))\n"
            f"os.rename({str(held)!r} + '.new', {str(held)!r})\n"
            "end = time.monotonic() + 30\n"
            f"while not os.path.exists({str(flag)!r}) and "
            "time.monotonic() < end: time.sleep(0.01)\n")
        run = run_command([sys.executable, "-c", job], timeout=60)
        assert run.returncode == 0, run.describe()
        assert flag.exists(), "the keeper never mapped the segment"
        assert not left.exists()
        assert held.exists()
    finally:
        keeper.kill()
        keeper.wait(timeout=10)
        for p in (left, held, flag):
            p.unlink(missing_ok=True)
