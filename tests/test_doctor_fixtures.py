"""The doctor's parser on every published log of tests/fixtures/doctor/
(collected verbatim from public sources, each with a JSON sidecar naming
its collective and its largest row): it finds the collective and the
largest row the sidecar states, and gives the verdict the source gave
(healthy or not), but for the recorded misses. Logs in other formats than
nccl-tests / rccl-tests output (a torch sweep, a hand-edited table) are
left out; the model's error at each log's largest size is tested with the
hardware table."""
import json
from pathlib import Path

import pytest

from warmup_kit.doctor import Flags, examine
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


#: published healthy runs the doctor does not call healthy, with its
#: verdict and median ratio today and why (kept, not dropped: the model's
#: known misses; test_recorded_miss_is_the_current_error in
#: test_hardware_table.py holds the same runs' errors at the largest size)
VERDICT_MISSES = {
    "coreweave-gb200-nvl72-2rack": (
        "degraded", 0.78, "two NVL72 racks: NVLS-tree at 0.78 of the model "
        "(the model grants 0.74 of NVLink 5 inside each rack)"),
    "coreweave-gb200-nvl72-20rack": (
        "broken", 0.38, "1,440 GPUs: the model has no scale penalty, and "
        "the run still climbs at 16 GiB"),
    "dstack-gcp-a3high-tcpx-2node-allgather": (
        "degraded", 0.52, "GPUDirect-TCPX reaches about half of its "
        "4 x 200 Gb/s; the table assumes NDR's efficiency"),
}


def _verdict_params():
    out = []
    for p in SIDECARS:
        marks = []
        if p.stem in VERDICT_MISSES:
            v, r, why = VERDICT_MISSES[p.stem]
            marks.append(pytest.mark.xfail(
                strict=True, reason=f"{v} at median {r:.2f}: {why}"))
        out.append(pytest.param(p, marks=marks, id=p.stem))
    return out


@pytest.mark.skipif(not SIDECARS, reason="no published fixtures here")
@pytest.mark.parametrize("sidecar", _verdict_params())
def test_published_run_gets_its_posters_verdict(sidecar):
    """The doctor on each published log, with the flags its sidecar
    states (system, nodes, GPUs per node, NICs): a run its source calls
    healthy is healthy; a degraded one is not."""
    side = json.loads(sidecar.read_text())
    if not _ours(side):
        pytest.skip(f"not nccl-tests output: {side.get('format')}")
    ds = examine([str(sidecar.with_suffix(".log"))],
                 Flags(system=side["system"], nodes=side["nodes"],
                       gpus_per_node=side["gpus_per_node"],
                       nic=side.get("nic")))
    verdicts = {d.verdict for d in ds}
    if side["health"] == "healthy":
        assert verdicts == {"healthy"}, [(d.verdict, d.ratio) for d in ds]
    else:
        assert "healthy" not in verdicts


@pytest.mark.parametrize("name", sorted(VERDICT_MISSES))
def test_recorded_verdict_miss_is_todays(name):
    side = json.loads((DIR / f"{name}.json").read_text())
    d, = examine([str(DIR / f"{name}.log")],
                 Flags(system=side["system"], nodes=side["nodes"],
                       gpus_per_node=side["gpus_per_node"],
                       nic=side.get("nic")))
    verdict, ratio, _ = VERDICT_MISSES[name]
    assert (d.verdict, round(d.ratio, 2)) == (verdict, pytest.approx(
        ratio, abs=0.02))
