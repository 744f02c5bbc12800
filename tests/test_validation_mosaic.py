"""Step model vs MosaicML's MPT benchmark tables (llm-foundry,
``scripts/train/benchmarking/README.md``): FSDP only (FULL_SHARD), 8-64
GPUs, H100 and A100 80GB, compared on the MFU the tables print, which
counts ``6 N + 12 l d s`` FLOPs per token (the full attention square) over
the dense BF16 peak: the model's ``mfu`` under ``formula="6N+attn"``.

Every row of the two tables that was tried is here (``MOSAIC_ROWS``),
checked as the H100 rows are (:mod:`test_validation_h100`): the recorded
error within a few points, then the 20% tolerance of FSDP runs on fewer
than 512 GPUs, the misses marked xfail with what is known of them.
"""
import pytest

from test_validation_h100 import check, param
from warmup_kit.parallelism import compute
from warmup_kit.parallelism.compute import triton_head_dim
from warmup_kit.parallelism.step import FLOP_FORMULAS
from warmup_kit.parallelism.validation import (MOSAIC_A100, MOSAIC_H100,
                                               MOSAIC_ROWS, MPT,
                                               MPT30B_SUSPECT_RATE, error_pct,
                                               predict, result)


@pytest.mark.parametrize("row", [param(r) for r in MOSAIC_ROWS])
def test_mosaic_row_within_tolerance(row):
    check(row)


def test_every_tried_row_of_both_tables_is_kept():
    assert len(MOSAIC_ROWS) == len(MOSAIC_H100) + len(MOSAIC_A100) == 30
    assert len({r.id for r in MOSAIC_ROWS}) == len(MOSAIC_ROWS)
    for r in MOSAIC_ROWS:
        assert r.quantity == "mfu" and r.formula == "6N+attn"
        assert r.layout["zero"] == 3 and r.axes == ("FSDP",)
        assert r.misses == bool(r.why), r.id


def test_mfu_is_what_the_table_counts():
    # MosaicML: (3 * 2 * n_params * s + 3 * 4 * l * d * s^2) per sequence;
    # the model's 6N+attn per token, over its iteration time and peak
    row = next(r for r in MOSAIC_ROWS if r.id == "mosaic-h100-mpt7b-2k-8gpu")
    res = result(row)
    m = row.model
    n = m.layers * (m.attn_params_per_layer + m.ffn_params_per_layer) \
        + m.vocab * m.hidden
    per_token = 6 * n + 12 * m.layers * m.hidden * m.seq
    tokens = row.layout["global_batch"] * m.seq
    want = per_token * tokens / res.total_s / row.gpus / 989e12
    assert abs(res.mfu - want) / want < 1e-9
    assert predict(row) == pytest.approx(100 * res.mfu)
    assert "6N+attn" in FLOP_FORMULAS


def test_mpt_shapes_match_the_tables_parameter_counts():
    # NumParams column at 2048 tokens (learned positions: s * d of them)
    printed = {"7b": 6658859008, "13b": 12853954560, "1b": 1315950592}
    for name, want in printed.items():
        layers, d, heads = MPT[name]
        row = next(r for r in MOSAIC_ROWS
                   if r.model.hidden == d and r.model.seq == 2048)
        # the model's layers carry biases MPT does not: within 0.2%
        assert abs(row.model.params / want - 1) < 2e-3, name


def test_the_30b_reason_names_the_only_uneven_head_dim():
    # MOSAIC_WHY["30b-8k"]: 112-wide heads are the 30B's alone, and its
    # 8k rows miss on both GPUs while its 2k and 4k rows fit
    uneven = {name for name, (_, d, heads) in MPT.items()
              if triton_head_dim(d // heads) != d // heads}
    assert uneven == {"30b"}
    for r in MOSAIC_ROWS:
        if "mpt30b" in r.id:
            assert r.misses == (r.model.seq == 8192), r.id


def test_the_30b_what_if(monkeypatch):
    # the reason's what-if, not the model: attention at MPT30B_SUSPECT_RATE
    # of the padded rate on the uneven path puts every 30B row within 15%,
    # and leaves the other MPT rows as they are
    rows = {r.id: error_pct(r) for r in MOSAIC_ROWS}
    padded = compute.triton_head_dim
    monkeypatch.setattr(
        compute, "triton_head_dim",
        lambda d: padded(d) / (1 if padded(d) == d else MPT30B_SUSPECT_RATE))
    for r in MOSAIC_ROWS:
        err = error_pct(r)
        if "mpt30b" in r.id:
            assert abs(err) < 15, (r.id, err)
        else:
            assert err == pytest.approx(rows[r.id]), r.id
