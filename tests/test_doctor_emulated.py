"""The doctor on the emulated cluster's faults (book, Chapter 5).

``book/data/faults/NAME.json`` are reports of ``benchmarks/cluster.py
--fault NAME`` (made as root, on this project's 2-core machine): the last
node was put wrong during the experiments only, so each row's model is the
healthy cluster's. The doctor is not told the fault (it ignores the
report's ``fault``); it must name it first wherever it shows, and name no
fault in the healthy stored run. Crafted reports pin each rule's edges."""
import copy
import json
from pathlib import Path

import pytest

from warmup_kit.doctor import DoctorInputError, examine, examine_text
from warmup_kit.doctor import faultcheck
from warmup_kit.doctor.diagnose import HEALTHY
from warmup_kit.doctor.emulated import SLOW_NODE, STALL_FACTOR, STALL_S, \
    WEIGHTS

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "book" / "data" / "faults"
HEALTHY_RUN = ROOT / "book" / "data" / "cluster.json"
OURS = set(WEIGHTS)

LINK = "the link between nodes runs below its model"
SOCKETS = "sockets inside a node instead of shared memory"
SLOW = "one node computes slower than the others"
STALL = "calls stalled: a link dropped and came back"


def stored(name):
    return json.loads((FAULTS / f"{name}.json").read_text())


def diagnosed(doc):
    return examine_text(json.dumps(doc), source="report.json")


def names(d):
    return [c.cause for c in d.causes]


def crosses(d):
    return d.run.stated["nodes"] > 1


# ------------------------------------------------------- the stored faults
def test_every_stored_fault_is_one_the_bench_can_make():
    from warmup_kit.cluster.faults import FAULTS as MADE
    got = {p.stem for p in FAULTS.glob("*.json")}
    assert got == set(MADE)
    for name in got:
        doc = stored(name)
        assert doc["fault"]["name"] == name and doc["fault"]["node"] == 1
        assert all(r["correct"] and r["bytes_match"] for r in doc["rows"])


def test_the_healthy_run_names_none_of_these_faults():
    ds = examine([str(HEALTHY_RUN)])
    assert ds and not any(OURS & set(names(d)) for d in ds)


def test_the_doctor_is_not_told_the_fault():
    for name in ("throttled-link", "slow-node"):
        doc = stored(name)
        told = [(d.verdict, names(d)) for d in diagnosed(doc)]
        del doc["fault"]
        assert [(d.verdict, names(d)) for d in diagnosed(doc)] == told


def test_throttled_link_is_named_on_the_runs_that_cross_nodes():
    ds = diagnosed(stored("throttled-link"))
    inside = [d for d in ds if not crosses(d)]
    across = [d for d in ds if crosses(d)]
    assert inside and all(d.verdict == "healthy" for d in inside)
    assert all(d.verdict != "healthy" for d in across)
    for d in across:
        assert names(d)[0] == LINK, (d.run.rows[0].variant, names(d))
    assert not any({SLOW, SOCKETS, STALL} & set(names(d)) for d in ds)


def test_sockets_in_a_node_are_named_first_everywhere():
    ds = diagnosed(stored("sockets-in-node"))
    for d in ds:
        assert names(d)[0] == SOCKETS
    inside, = [d for d in ds if not crosses(d)]
    # Loopback TCP on this machine comes within ~11% of shared memory at
    # 16-64 MiB, so busbw alone may pass this run: the transport line is
    # what must give it away, with the measured ratio beside it.
    ev = inside.causes[0].evidence
    assert "sockets (TCP)" in ev and "of the model" in ev


def test_slow_node_is_named_with_its_number():
    doc = stored("slow-node")
    ds = diagnosed(doc)
    for d in ds:
        assert names(d)[0] == SLOW
        assert d.causes[0].evidence.startswith("node 1 took")
    # Every run whose ranks on node 1 must keep up with fast tiers slows
    # down; TP split one rank per node moves 0.06 GB/s over the emulated
    # link, which even 15% of a CPU keeps up with, so it may pass.
    bound = [d for d in ds if d.run.rows[0].variant != "split across two"]
    assert len(bound) == 4 and all(d.verdict != "healthy" for d in bound)
    assert not any(LINK in names(d) for d in ds)


def test_flapping_link_stalls_are_named_where_they_hit():
    ds = diagnosed(stored("flapping-link"))
    hit = [d for d in ds if STALL in names(d)]
    assert hit == [d for d in ds if crosses(d)] and len(hit) == 4
    for d in hit:
        assert names(d)[0] == STALL and d.verdict != "healthy"
    inside, = [d for d in ds if not crosses(d)]
    assert STALL not in names(inside)      # no traffic on the link


# ------------------------------------------------------ the rules' edges
def report(**change):
    """The healthy stored run, every row at its model, then ``change``."""
    doc = json.loads(HEALTHY_RUN.read_text())
    for r in doc["rows"]:
        r["measured_ms"] = r["model_ms"]
        r["worst_ms"] = r["model_ms"] * 1.2
        r["calls"] = 10
    doc["nodes"] = [{"node": 0, "probe_ms": 100.0},
                    {"node": 1, "probe_ms": 100.0}]
    for k, v in change.items():
        v(doc)
    return doc


def test_model_numbers_name_nothing():
    ds = diagnosed(report())
    assert all(d.verdict == "healthy" and not d.causes for d in ds)


def _stall(beyond_s, factor_of_median):
    """One point's slowest call ``beyond_s`` past its median and
    ``factor_of_median`` times it."""
    def go(doc):
        r = next(r for r in doc["rows"] if r["variant"] == "flat ring"
                 and r["nbytes"] == 1 << 20)
        median_ms = beyond_s * 1e3 / (factor_of_median - 1)
        r["measured_ms"] = r["model_ms"] = median_ms
        r["worst_ms"] = median_ms * factor_of_median
    return go


@pytest.mark.parametrize("beyond,factor,named", [
    (STALL_S * 1.001, STALL_FACTOR * 1.001, True),
    (STALL_S * 0.95, 10, False), (1.0, STALL_FACTOR * 0.95, False)])
def test_a_stall_is_long_and_far_above_its_median(beyond, factor, named):
    ds = diagnosed(report(x=_stall(beyond, factor)))
    ring = next(d for d in ds if d.run.rows[0].variant == "flat ring")
    assert (STALL in names(ring)) is named
    assert ring.verdict == ("degraded" if named else "healthy")
    assert all(STALL not in names(d) for d in ds if d is not ring)


@pytest.mark.parametrize("x,named", [(SLOW_NODE, True),
                                     (SLOW_NODE * 0.95, False)])
def test_a_slow_node_is_one_probe_well_above_the_fastest(x, named):
    def slow(doc):
        doc["nodes"][0]["probe_ms"] = 100.0 * x
    ds = diagnosed(report(x=slow))
    assert all((SLOW in names(d)) is named for d in ds)
    if named:
        assert ds[0].causes[0].evidence.startswith("node 0 took")


def test_a_slow_node_explains_long_calls_instead_of_a_stall():
    def both(doc):
        _stall(1.0, 3.0)(doc)
        doc["nodes"][1]["probe_ms"] = 100.0 * SLOW_NODE * 2
    ds = diagnosed(report(x=both))
    assert all(names(d)[0] == SLOW and STALL not in names(d) for d in ds)


def _across(factor):
    def go(doc):
        for r in doc["rows"]:
            if not (r["experiment"] == "tp" and
                    r["variant"] == "inside one node"):
                r["measured_ms"] = r["model_ms"] / factor
    return go


def test_link_below_model_needs_the_inside_runs_healthy():
    ds = diagnosed(report(x=_across(0.5)))
    assert all((LINK in names(d)) is crosses(d) for d in ds)
    both = report(x=_across(0.5))
    for r in both["rows"]:
        r["measured_ms"] = r["model_ms"] / 0.5
    assert not any(LINK in names(d) for d in diagnosed(both))
    fine = diagnosed(report(x=_across(HEALTHY + 0.05)))
    assert not any(LINK in names(d) for d in fine)


def test_sockets_are_named_from_the_report_transports():
    def sockets(doc):
        doc["cluster"]["transports"]["inside a node"] = "sockets (TCP)"
    ds = diagnosed(report(x=sockets))
    assert all(names(d)[0] == SOCKETS for d in ds)


@pytest.mark.parametrize("nodes", [
    "fast", [{"node": 0}], [{"node": 0, "probe_ms": -1.0}],
    [{"node": "a", "probe_ms": 1.0}]])
def test_a_bad_probe_is_a_one_line_error(nodes):
    doc = report()
    doc["nodes"] = nodes
    with pytest.raises(DoctorInputError, match="'nodes' is not a list"):
        diagnosed(doc)


def test_reports_without_the_new_fields_still_read():
    doc = copy.deepcopy(json.loads(HEALTHY_RUN.read_text()))
    doc.pop("nodes", None)
    for r in doc["rows"]:
        r.pop("worst_ms", None)
    ds = diagnosed(doc)
    assert ds and all(d.verdict != "unknown" for d in ds)


# ------------------------------------------------ the book's fault table
def test_the_fault_table_sets_each_answer_beside_its_truth():
    paths = sorted(str(p) for p in FAULTS.glob("*.json"))
    checks = [faultcheck.check(p) for p in paths]
    right = {"throttled-link": LINK, "flapping-link": STALL,
             "slow-node": SLOW, "sockets-in-node": SOCKETS}
    assert sorted(c.fault for c in checks) == sorted(right)
    for c in checks:
        assert c.first == right[c.fault] and c.named >= 4, c
    text = faultcheck.fault_table(paths)
    assert max(map(len, text.splitlines())) <= 84
    for c in checks:
        assert f"{c.fault} (node 1)" in text and c.first in text


def test_a_report_without_a_fault_is_refused_in_one_line(tmp_path):
    p = tmp_path / "plain.json"
    p.write_text(HEALTHY_RUN.read_text())
    with pytest.raises(DoctorInputError, match="not a fault report"):
        faultcheck.check(str(p))
