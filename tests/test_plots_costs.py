"""Chapter 4-5 helpers: closed forms against schedules, the widgets' views,
the stored crossover measurement and MPICH's selection table."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from warmup_kit.measure import crossover
from warmup_kit.measure import fit
from warmup_kit.measure import mpich_tuning
from warmup_kit.viz import plots_costs as pc
from warmup_kit.viz.widgets import Grid, Knob, explore

DATA = Path(__file__).resolve().parents[1] / "book" / "data" / "crossover.json"
UNIT = fit.Fit(5e-6, 1 / 50e9, 1e-10)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 13, 16, 33, 64])
@pytest.mark.parametrize("algorithm", pc.FLAT)
def test_closed_forms_equal_schedules(algorithm, n):
    """Exact up to element-sized rounding of uneven chunks."""
    for nbytes in (8 * 1000, 8 << 20):
        want = fit.predict(algorithm, nbytes, n, UNIT)
        got = pc.allreduce_s(algorithm, nbytes, n, UNIT.alpha_s,
                             1 / UNIT.beta_s_per_byte, UNIT.gamma_s_per_byte)
        assert got == pytest.approx(want, rel=1e-3)   # uneven chunks


def test_crossover_matches_closed_forms():
    a, bw = 5e-6, 50e9
    for n in (4, 16, 1024):
        x = pc.crossover_bytes("ring", "tree", n, a, bw)
        assert pc.allreduce_s("ring", x * 1.01, n, a, bw) < \
            pc.allreduce_s("tree", x * 1.01, n, a, bw)
        assert pc.allreduce_s("ring", x * 0.99, n, a, bw) > \
            pc.allreduce_s("tree", x * 0.99, n, a, bw)
    # grows with N; a two-rank tree never wins
    xs = [pc.crossover_bytes("ring", "tree", n, a, bw) for n in (4, 64, 4096)]
    assert xs == sorted(xs)
    assert pc.crossover_bytes("ring", "tree", 2, a, bw) is None


def test_winner_map_small_and_large():
    g = pc.winner_grid(5e-6, 50e9, algorithms=pc.CONTESTS["ring vs trees"])
    assert isinstance(g, Grid)
    row = g.text[pc.MAP_NS.index(16)]
    assert row[0] == "2tree" and row[-1] == "ring"
    allfive = pc.winner_grid(5e-6, 50e9)
    assert allfive.text[pc.MAP_NS.index(1024)][0] == "rec-dbl"


def test_views_render_every_frame():
    for view, knobs in (
            (pc.cost_view, [Knob("n", [4, 1024]), Knob("alpha_us", [5]),
                            Knob("bw_gbps", [50]),
                            Knob("contest", list(pc.CONTESTS))]),
            (pc.islands_view, [Knob("system", ["dgx-h100"]),
                               Knob("nodes", [2])]),
            (pc.nccl_view, [Knob("system", ["dgx-a100", "dgx-h100"]),
                            Knob("nodes", [1, 16])])):
        fig = explore(view, knobs).plotly_json()
        assert fig["frames"]


def test_hierarchical_vs_flat_rings_across_nodes():
    t = pc.island_times("dgx-h100", 4, [2 ** 20, 2 ** 30])
    # far ahead of the textbook ring at both sizes...
    assert all(4 * h < r for h, r in zip(t["hierarchical"], t["ring"]))
    # ...2x ahead of NCCL's flat ring at 1 MiB (fewer network latencies),
    # within 25% of it at 1 GiB (the same NICs carry nearly the same bytes)
    (h1, h2), (f1, f2) = t["hierarchical"], t["rail_ring"]
    assert 2 * h1 < f1 and h2 < f2 < 1.25 * h2


def test_mpich_rule():
    assert pc.mpich_allreduce_choice(8, 16) == "recursive_doubling"
    assert pc.mpich_allreduce_choice(1 << 20, 16) == "rabenseifner"
    assert pc.mpich_allreduce_choice(1 << 20, 16, predefined_op=False) == \
        "recursive_doubling"


def test_stored_measurement_is_labelled_and_fits():
    doc = crossover.load(DATA)
    lab = doc["label"]
    for key in ("date", "cpu", "cores", "mpi_library", "ranks",
                "shared_cores"):
        assert key in lab
    assert not any(r["wrong"] for r in doc["rows"])
    assert {r["algorithm"] for r in doc["rows"]} == set(crossover.ALGORITHMS)
    for c in crossover.crossovers(doc):
        assert c["fit"].alpha_s > 0 and c["fit"].beta_s_per_byte > 0
    assert pc.measured_vs_fit(doc, lab["ranks"][0]).traces


def test_label_says_when_ranks_share_cores():
    lab = crossover.label([1, 10 ** 6], "MPICH")
    assert lab["shared_cores"] == {"1": False, str(10 ** 6): True}
    json.dumps(lab)


def test_mpich_selection_table_rules():
    table = {"collective=allreduce": {"comm_type=intra": {
        "avg_msg_size<=8": {"algorithm=MPIR_Allreduce_intra_rd": {}},
        "avg_msg_size=any": {"algorithm=MPIR_Allreduce_intra_rsag": {}}}}}
    assert mpich_tuning.rules(table, "allreduce") == [
        "avg_msg_size<=8 -> Allreduce_intra_rd",
        "avg_msg_size=any -> Allreduce_intra_rsag"]
    real = mpich_tuning.selection_table()
    if real is not None:                  # the mpich wheel is installed
        assert mpich_tuning.rules(real, "bcast")
