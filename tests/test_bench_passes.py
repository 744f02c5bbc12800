"""warmup-bench --passes: the sweep repeated, samples of every pass kept."""
import json

import pytest

from conftest import PYTHON, run_command
from warmup_kit.bench.output import parse_table


@pytest.mark.multiproc
@pytest.mark.timeout(150)
def test_passes_repeat_the_sweep_and_pool_the_samples(tmp_path):
    out = tmp_path / "b.json"
    run = run_command([PYTHON, "-m", "warmup_kit.bench", "--world", "2",
                       "-b", "8", "-e", "512", "-f", "8", "-n", "2", "-w",
                       "1", "--passes", "3", "--algorithms", "ring,tree",
                       "--json", out], timeout=120)
    assert run.returncode == 0, run.describe()
    rows = parse_table(run.stdout)
    assert [(r["size"], r["algorithm"]) for r in rows] == [
        (8, "ring"), (8, "tree"), (64, "ring"), (64, "tree"),
        (512, "ring"), (512, "tree")]
    assert all(r["wrong"] == 0 for r in rows)
    data = json.loads(out.read_text())
    assert all(len(r["times_us"]) == 6 for r in data["rows"])
