"""A real network partition (benchmarks/partition.py, Chapter 8): pulling one
emulated node's cable mid-collective is caught by the same deadlines that
catch a hung rank, and every rank names one across the cut. The live test
needs root; the stored run is checked everywhere."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from warmup_kit.cluster import why_unavailable

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "partition.py"
STORED = ROOT / "book" / "data" / "partition.json"


def _load_bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location("partition_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_stored_partition_names_ranks_across_the_cut():
    doc = json.loads(STORED.read_text())
    bench = _load_bench()
    assert bench.named_across(doc)
    assert {r["rank"] for r in doc["ranks"]} == {0, 1, 2, 3}
    for r in doc["ranks"]:
        # caught by the collective's own deadline: no sooner, and not much
        # later (the first wait that passes it raises)
        assert r["detected_after_s"] >= 0
        assert f"waiting for rank" in r["message"]
    assert doc["cluster"]["pulled"] == "node1"


def test_named_across_rejects_a_rank_blamed_on_its_own_side():
    bench = _load_bench()
    doc = {"ranks": [{"rank": 0, "node": 0, "error": "CollectiveTimeout",
                      "peer": 1, "peer_node": 0}]}
    assert not bench.named_across(doc)
    doc["ranks"][0].update(peer=3, peer_node=1)
    assert bench.named_across(doc)
    doc["ranks"].append({"rank": 2, "node": 1, "error": None})
    assert not bench.named_across(doc)




@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.skipif(why_unavailable() is not None,
                    reason=f"emulated cluster: {why_unavailable()}")
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_pulled_cable_is_named_by_every_rank(tmp_path, algorithm):
    out = tmp_path / "partition.json"
    run = subprocess.run([sys.executable, str(BENCH), "--algorithm",
                          algorithm, "--timeout", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads(out.read_text())
    assert _load_bench().named_across(doc)
    for r in doc["ranks"]:
        assert r["error"] == "CollectiveTimeout"
        assert r["peer_node"] != r["node"]
