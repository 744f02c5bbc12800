"""The success criteria's graders: right answers pass, wrong ones fail with
a hint, the placeholder is 'not answered', bad input is a clear error."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

import warmup_kit as wk
import warmup_kit.selfcheck as sc
from warmup_kit.measure.lab import run_lab01
from warmup_kit.model.hardware import hierarchy_gbps
from warmup_kit.parallelism.placement import tp_spread
from warmup_kit.parallelism.step import Transformer

FAULT_DIR = Path(__file__).resolve().parents[1] / "book" / "data" / "faults"


def fault_report(name: str) -> dict:
    return json.loads((FAULT_DIR / f"{name}.json").read_text())


GPT18 = Transformer(layers=40, hidden=6144, heads=48, seq=2048, vocab=51200)


def wrong(v: sc.Result) -> bool:
    return v.answered and not v.passed and len(v.verdict) > 20


# (grader call with the right answer, with a wrong one, with bad input)
CASES = {
    "nvlink_bound": (lambda: sc.nvlink_bound("tensor parallel"),
                     lambda: sc.nvlink_bound("DP"),
                     lambda: sc.nvlink_bound("zero")),
    "ring_bytes": (lambda: sc.ring_bytes(8, 800, 1400),
                   lambda: sc.ring_bytes(8, 800, 5600),
                   lambda: sc.ring_bytes(0, 800, 1400)),
    "faster_small": (lambda: sc.faster(1024, 8, 5e-6, 25e9, "tree"),
                     lambda: sc.faster(1024, 8, 5e-6, 25e9, "ring"),
                     lambda: sc.faster(1024, 1, 5e-6, 25e9, "ring")),
    "faster_large": (lambda: sc.faster(1 << 26, 8, 5e-6, 25e9, "ring"),
                     lambda: sc.faster(1 << 26, 8, 5e-6, 25e9, "tree"),
                     lambda: sc.faster(1 << 26, 8, -1.0, 25e9, "ring")),
    "crossover": (lambda: sc.crossover(8, 5e-6, 25e9, 1.5e5),
                  lambda: sc.crossover(8, 5e-6, 25e9, 1e8),
                  lambda: sc.crossover(8, 5e-6, 25e9, "big")),
    "hier_small": (lambda: sc.hierarchical_wins("dgx-h100", 4, 1 << 20,
                                                "hierarchical"),
                   lambda: sc.hierarchical_wins("dgx-h100", 4, 1 << 20,
                                                "flat"),
                   lambda: sc.hierarchical_wins("dgx-h100", 1, 1 << 20,
                                                "flat")),
    "knobs": (lambda: sc.slow_collective_knobs(
                  ["NCCL_DEBUG=INFO", "NCCL_ALGO", "NCCL_IB_HCA"]),
              lambda: sc.slow_collective_knobs(
                  ["NCCL_DEBUG", "NCCL_ALGO", "NCCL_IB_HCA", "NCCL_TIMEOUT"]),
              lambda: sc.slow_collective_knobs("NCCL_DEBUG")),
    "ratio": (lambda: sc.nvlink_nic_ratio("dgx-a100", 12),
              lambda: sc.nvlink_nic_ratio("dgx-h100", 18),
              lambda: sc.nvlink_nic_ratio("dgx-z100", 9)),
    "tp_slowdown": (lambda: sc.tp_slowdown(
                        GPT18, "dgx-h100", 2,
                        tp_spread(GPT18, "dgx-h100", span=2)["slowdown"]),
                    lambda: sc.tp_slowdown(GPT18, "dgx-h100", 2, 3.0),
                    lambda: sc.tp_slowdown("gpt", "dgx-h100", 2, 3.0)),
    "culprit": (lambda: sc.culprit([5, 5, 4, 5], 2),
                lambda: sc.culprit([5, 5, 4, 5], 0),
                lambda: sc.culprit([5, 5, 4, 5], 7)),
    "network": (lambda: sc.culprit([5, 5, 5], None),
                lambda: sc.culprit([5, 5, 5], 1),
                lambda: sc.culprit([5], None)),
    "kv_cache": (lambda: sc.kv_cache_bytes("Llama 3 70B", 80 * 2 * 8 * 128 * 2),
                 lambda: sc.kv_cache_bytes("Llama 3 70B", 80 * 2 * 64 * 128 * 2),
                 lambda: sc.kv_cache_bytes("Llama 9", 1000)),
    "fault": (lambda: sc.emulated_fault(fault_report("flapping-link"),
                                        "Flapping link"),
              lambda: sc.emulated_fault(fault_report("flapping-link"),
                                        "slow-node"),
              lambda: sc.emulated_fault(fault_report("flapping-link"),
                                        "cosmic rays")),
    "interval": (lambda: sc.checkpoint_interval(30.0, 3 * 3600, 820),
                 lambda: sc.checkpoint_interval(30.0, 3 * 3600, 4 * 3600),
                 lambda: sc.checkpoint_interval(0, 3 * 3600, 820)),
}


@pytest.mark.parametrize("name", CASES)
def test_right_passes_wrong_fails_with_a_hint_bad_input_raises(name):
    right, bad_answer, bad_input = CASES[name]
    v = right()
    assert v.passed and v.answered and bool(v), v
    w = bad_answer()
    assert wrong(w), w
    assert str(w).startswith("[NOT YET] ")
    with pytest.raises((ValueError, TypeError)):
        bad_input()


def test_placeholder_is_not_answered_and_not_an_error():
    for v in (sc.nvlink_bound(...), sc.ring_bytes(4, 64, ...),
              sc.culprit([1, 0], ...), sc.largest_loss(BUDGET, ...),
              sc.slow_collective_knobs(...),
              sc.emulated_fault(fault_report("slow-node"), ...)):
        assert not v.passed and not v.answered
        assert str(v).startswith("[NOT ANSWERED YET] ")
        assert ": replace ... with " in str(v)


def test_ring_bytes_hints_name_the_mistake():
    n, v = 4, 4096
    assert "naive" in sc.ring_bytes(n, v, (n - 1) * v).verdict
    assert "reduce-scatter" in sc.ring_bytes(n, v, (n - 1) / n * v).verdict
    assert "limit" in sc.ring_bytes(n, v, 2 * v).verdict


def test_kv_cache_hints_name_the_mistake():
    per_layer = 2 * 8 * 128 * 2
    assert "grouped-query" in sc.kv_cache_bytes("Llama 3 70B",
                                                80 * per_layer * 8).verdict
    assert "keys and values" in sc.kv_cache_bytes("Llama 3 70B",
                                                  80 * per_layer / 2).verdict
    assert "one layer" in sc.kv_cache_bytes("Llama 3 70B", per_layer).verdict


def test_the_ratio_is_the_hardware_tables():
    h = hierarchy_gbps("dgx-h100")
    assert sc.nvlink_nic_ratio("dgx-h100", h["nvlink"] / h["nic"]).passed
    assert "two directions" in sc.nvlink_nic_ratio(
        "dgx-h100", 2 * h["nvlink"] / h["nic"]).verdict


def test_nccl_timeout_is_named_as_the_frameworks():
    v = sc.slow_collective_knobs(["NCCL_TIMEOUT"])
    assert "framework" in v.verdict and "TORCH_NCCL" in v.verdict
    assert not sc.slow_collective_knobs(["NCCL_DEBUG"]).passed
    assert "not a knob" in sc.slow_collective_knobs(
        ["NCCL_DEBUG", "NCCL_ALGO", "NCCL_IB_HCA", "NCCL_FAST"]).verdict


def test_crossover_is_where_the_model_times_meet():
    from warmup_kit.model.costs import (
        crossover_bytes, ring_allreduce_s, tree_allreduce_s)
    x = crossover_bytes("ring", "tree", 8, 5e-6, 25e9)
    assert sc.crossover(8, 5e-6, 25e9, x).passed
    assert not sc.crossover(8, 5e-6, 25e9, 2.1 * x).passed
    assert tree_allreduce_s(x / 1.1, 8, 5e-6, 25e9) < \
        ring_allreduce_s(x / 1.1, 8, 5e-6, 25e9)
    assert tree_allreduce_s(x * 1.1, 8, 5e-6, 25e9) > \
        ring_allreduce_s(x * 1.1, 8, 5e-6, 25e9)


def test_hierarchy_loses_or_ties_for_huge_messages_on_full_rails():
    """Chapter 4's fairness point: the flat per-rail ring moves about the
    same cross-node bytes, so hierarchy's edge at 1 GiB is small."""
    v = sc.hierarchical_wins("dgx-h100", 4, 1 << 30, "hierarchical")
    small = sc.hierarchical_wins("dgx-h100", 4, 1 << 20, "hierarchical")
    ratio = lambda verdict: float(verdict.verdict.split("(")[1].split("x")[0])
    assert ratio(small) > 1.5 * ratio(v)


BUDGET = {"model FLOPs at peak (MFU)": 0.4, "kernels below peak": 0.25,
          "tensor-parallel comm": 0.15, "pipeline bubble": 0.12,
          "exposed DP comm": 0.08}


def test_largest_loss():
    assert sc.largest_loss(BUDGET, "kernels below peak").passed
    assert wrong(sc.largest_loss(BUDGET, "exposed DP comm"))
    with pytest.raises(ValueError):
        sc.largest_loss(BUDGET, "slow python")
    with pytest.raises(ValueError):
        sc.largest_loss({**BUDGET, "optimizer": 0.5}, "optimizer")


@pytest.mark.multiproc
def test_byte_count_grades_a_real_run():
    fn = functools.partial(run_lab01, iters=0)
    rows = [r for n in (2, 3) for rank in wk.launch(
        fn, world=n, args=(["ring"], [1000, 4096]), timeout=60)
        for r in rank]
    assert sc.byte_count(rows).passed
    cheat = [dict(r) for r in rows]
    cheat[0]["bytes_sent"] += 800
    assert wrong(sc.byte_count(cheat))
    broken = [dict(r) for r in rows]
    broken[1]["correct"] = False
    assert "correctness" in sc.byte_count(broken).verdict
    with pytest.raises(ValueError):
        sc.byte_count([])
    with pytest.raises(ValueError):
        sc.byte_count([{**rows[0], "algorithm": "tree"}])


def test_the_fault_grader_knows_every_fault_the_bench_makes():
    from warmup_kit.cluster.faults import FAULTS
    from warmup_kit.selfcheck.faults import NAMES
    assert sorted(NAMES) == sorted(FAULTS)
    for name in NAMES:                       # each stored report, graded
        assert sc.emulated_fault(fault_report(name), name).passed
        others = [sc.emulated_fault(fault_report(name), n)
                  for n in NAMES if n != name]
        assert len(others) == 3 and all(wrong(v) for v in others)


def test_fault_evidence_reads_the_reports_numbers():
    ev = sc.fault_evidence(fault_report("throttled-link"))
    inside, = [r for r in ev["runs"] if not r["crosses"]]
    across = [r["ratio"] for r in ev["runs"] if r["crosses"]]
    assert inside["ratio"] > 0.8 and len(across) == 4
    assert all(0.2 < x < 0.35 for x in across)     # a quarter of the link
    ev = sc.fault_evidence(fault_report("slow-node"))
    assert ev["probe_ms"][1] > 5 * ev["probe_ms"][0]
    assert sc.fault_evidence(fault_report("sockets-in-node"))["inside"] \
        == "sockets (TCP)"


@pytest.mark.parametrize("report", [None, {}, {"rows": []}, [1, 2]])
def test_fault_grader_refuses_what_is_not_a_report(report):
    with pytest.raises(ValueError, match="emulated-cluster report"):
        sc.emulated_fault(report, "slow-node")


def test_fault_grader_refuses_a_report_without_its_fault():
    doc = fault_report("slow-node")
    del doc["fault"]
    with pytest.raises(ValueError, match="not a fault report"):
        sc.emulated_fault(doc, "slow-node")
