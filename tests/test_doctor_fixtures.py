"""The doctor's parser on every published log of tests/fixtures/doctor/
(collected verbatim from public sources, each with a JSON sidecar naming
its collective and its largest row): it finds the collective and the
largest row the sidecar states. Logs in other formats than nccl-tests /
rccl-tests output (a torch sweep, a hand-edited table) are left out; the
model's verdicts on these logs are tested with the hardware table."""
import json
from pathlib import Path

import pytest

from warmup_kit.doctor.parse import load

DIR = Path(__file__).resolve().parent / "fixtures" / "doctor" / "published"
SIDECARS = sorted(DIR.glob("*.json")) if DIR.is_dir() else []


def _ours(side: dict) -> bool:
    fmt = side.get("format", "")
    return fmt.startswith(("nccl-tests", "rccl-tests")) and \
        "columns removed" not in fmt


@pytest.mark.skipif(not SIDECARS, reason="no published fixtures here")
@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: p.stem)
def test_published_log_parses(sidecar):
    side = json.loads(sidecar.read_text())
    if not _ours(side):
        pytest.skip(f"not nccl-tests output: {side.get('format')}")
    runs = load(str(sidecar.with_suffix(".log")))
    rows = [r for run in runs for r in run.rows]
    big = max(rows, key=lambda r: r.nbytes)
    assert big.collective == side["collective"]
    assert big.nbytes == side["largest"]["bytes"]
    assert big.busbw_gbps == pytest.approx(side["largest"]["busbw_gbps"],
                                           abs=0.01)
