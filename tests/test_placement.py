"""Chapter 6: TP placement experiments and the chapters' pictures."""
import pytest

from warmup_kit.viz import widgets
from warmup_kit.model.hardware import SYSTEMS
from warmup_kit.parallelism.step import Transformer
from warmup_kit.parallelism.placement import tp_share, tp_spread, with_rails
from warmup_kit.viz.plots_parallelism import (layout_figure, memory_panel,
                                          rank_grids)
from warmup_kit.viz.plots_topology import (hier_vs_flat, hierarchy, placement_view,
                                       tp_allreduce_vs_size)
from warmup_kit.model.topology import Layout

GPT = Transformer(layers=40, hidden=6144, heads=48, seq=2048, vocab=51200)


def test_with_rails():
    h = SYSTEMS["dgx-h100"]
    assert with_rails("dgx-h100") is h and with_rails(h, 8) is h
    one = with_rails("dgx-h100", 1)
    assert one.nic.gbps == pytest.approx(h.nic.gbps / 8)
    assert one.nvlink == h.nvlink and one.gpu == h.gpu
    with pytest.raises(ValueError):
        with_rails("dgx-h100", 9)


@pytest.mark.parametrize("system", ["dgx-a100", "dgx-h100"])
def test_spreading_tp_costs_more_the_fewer_nics_it_gets(system):
    one = tp_spread(GPT, system, span=1)
    assert one["slowdown"] == pytest.approx(1.0)
    runs = [tp_spread(GPT, system, span=s) for s in (2, 4, 8)]
    assert [r["gpus_per_node"] for r in runs] == [4, 2, 1]
    slow = [r["slowdown"] for r in runs]
    assert 1.1 < slow[0] and slow == sorted(slow)
    assert all(r["layer_ratio"] > 1.5 for r in runs)
    assert all(tp_share(r["spread"]) > tp_share(r["inside"]) for r in runs)
    rails = [tp_spread(GPT, system, span=2, rails=k)["slowdown"]
             for k in (8, 4, 2, 1)]
    assert rails == sorted(rails) and rails[-1] > 2


def test_compute_is_the_same_wherever_tp_sits():
    r = tp_spread(GPT, "dgx-h100", span=2)
    assert r["inside"].parts["compute"] == pytest.approx(
        r["spread"].parts["compute"])


@pytest.mark.parametrize("maker", [
    lambda: hierarchy(["dgx-a100", "dgx-h100"]),
    lambda: tp_allreduce_vs_size("dgx-a100"),
    lambda: placement_view(GPT, "dgx-h100", 4, 2),
    lambda: hier_vs_flat([{"nbytes": 2**20, "ranks": r, "flat_ms": r,
                           "hierarchical_ms": 1.0} for r in (16, 32)]),
    lambda: memory_panel("GPT", GPT, recipe="mixed-precision Adam",
                         recompute="full"),
    lambda: layout_figure(GPT, tp=8, pp=2, n_gpus=32, global_batch=64),
    lambda: layout_figure(GPT, tp=1, pp=1, n_gpus=8, global_batch=64),
    lambda: rank_grids(Layout(4, 2, 2))])
def test_views_render_both_ways(maker):
    spec = maker()
    assert widgets.png_bytes(spec)[:4] == b"\x89PNG"
    assert "var fig" in widgets.show(spec).to_html()


def test_rank_grid_labels_every_rank_with_its_group():
    lay = Layout(4, 2, 2)
    fig = rank_grids(lay)
    tp_grid = fig.panels[0].traces[0]
    cells = [c for row in tp_grid.text for c in row]
    assert cells[:5] == ["r0\nTP0", "r1\nTP0", "r2\nTP0", "r3\nTP0",
                         "r4\nTP1"]
    dp_grid = fig.panels[2].traces[0]
    assert dp_grid.text[1][0] == "r8\nDP0"   # rank 8 = dp 1 of rank 0's group
