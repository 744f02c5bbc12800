"""The hardware table against the published figures it cites, and the NCCL
model against published nccl-tests / rccl-tests runs.

Part 1 pins each line rate of :mod:`warmup_kit.model.hardware` to the
vendor figure its ``source`` names (datasheets state bidirectional NVLink
and Gbit/s NICs; the table holds GB/s one way): exact arithmetic, 0.5%.

Part 2 reads each fixture under ``tests/fixtures/doctor/published/`` (a
verbatim public log + a sidecar with its source, system, nodes and NICs)
and holds the model's bus bandwidth at the largest size against the
measured one. Tolerance: 20% (issue 28). Rows the model misses by more stay
here, marked ``xfail(strict=True)`` with the error and the mechanism the
model lacks; nothing is tuned per row. ``RATIOS`` records measured/model.
"""
import json
import re
from pathlib import Path

import pytest

from warmup_kit.model import nccl
from warmup_kit.model.hardware import (
    FABRICS, SYSTEMS, cluster, hierarchy_gbps, parse_nic)

FIXTURES = Path(__file__).parent / "fixtures" / "doctor" / "published"
BIB = Path(__file__).parent.parent / "book" / "references.bib"
TOL = 0.20

# ------------------------------------------------------------ part 1
#: (what, table value, published figure converted to the table's unit,
#:  bib key of the source the table's ``source`` string cites)
PUBLISHED = [
    ("A100 NVLink 3: 600 GB/s both ways", SYSTEMS["dgx-a100"].nvlink.gbps,
     600 / 2, "nvidia2021a100"),
    ("A100 80GB HBM2e 2,039 GB/s", SYSTEMS["dgx-a100"].gpu.hbm_tbps, 2.039,
     "nvidia2021a100"),
    ("A100 40GB HBM2 1,555 GB/s", SYSTEMS["dgx-a100-40gb"].gpu.hbm_tbps,
     1.555, "nvidia2021a100"),
    ("A100 40GB capacity", SYSTEMS["dgx-a100-40gb"].gpu.hbm_gb, 40,
     "nvidia2021a100"),
    ("A100 BF16 dense 312 TFLOP/s",
     SYSTEMS["dgx-a100-40gb"].gpu.peak_flops("bf16") / 1e12, 312,
     "nvidia2021a100"),
    ("H100 SXM NVLink 4: 900 GB/s both ways", SYSTEMS["dgx-h100"].nvlink.gbps,
     900 / 2, "nvidia2023h100"),
    ("H100 SXM HBM3 3.35 TB/s", SYSTEMS["dgx-h100"].gpu.hbm_tbps, 3.35,
     "nvidia2023h100"),
    ("H100 PCIe BF16 1,513 TFLOP/s sparse",
     SYSTEMS["h100-pcie"].gpu.peak_flops("bf16") / 1e12, 1513 / 2,
     "nvidia2023h100"),
    ("H100 PCIe HBM2e 2.0 TB/s", SYSTEMS["h100-pcie"].gpu.hbm_tbps, 2.0,
     "nvidia2023h100"),
    ("H100 PCIe NVLink bridge 600 GB/s both ways",
     SYSTEMS["h100-pcie-nvlink"].nvlink.gbps, 600 / 2, "nvidia2023h100"),
    ("H100 PCIe Gen5 128 GB/s both ways", SYSTEMS["h100-pcie"].pcie.gbps,
     128 / 2, "nvidia2023h100"),
    ("H200 HBM3e 4.8 TB/s", SYSTEMS["hgx-h200"].gpu.hbm_tbps, 4.8,
     "nvidia2024h200"),
    ("H200 141 GB", SYSTEMS["hgx-h200"].gpu.hbm_gb, 141, "nvidia2024h200"),
    ("H200 NVLink 900 GB/s both ways", SYSTEMS["hgx-h200"].nvlink.gbps,
     900 / 2, "nvidia2024h200"),
    ("B200 NVLink 5: 1.8 TB/s both ways", SYSTEMS["dgx-b200"].nvlink.gbps,
     1800 / 2, "nvidia2024gb200"),
    ("GB200 NVL72: 72 GPUs one NVLink domain",
     SYSTEMS["gb200-nvl72"].nvlink_domain, 72, "nvidia2024gb200"),
    ("MI300X 7 xGMI links x 128 GB/s both ways",
     SYSTEMS["mi300x"].nvlink.gbps, 7 * 128 / 2, "amd2023mi300x"),
    ("MI300X HBM3 5.3 TB/s", SYSTEMS["mi300x"].gpu.hbm_tbps, 5.3,
     "amd2023mi300x"),
    ("MI300X 192 GB", SYSTEMS["mi300x"].gpu.hbm_gb, 192, "amd2023mi300x"),
    ("MI300X BF16 dense 1,307.4 TFLOP/s",
     SYSTEMS["mi300x"].gpu.peak_flops("bf16") / 1e12, 1307.4,
     "amd2023mi300x"),
    ("L40S GDDR6 864 GB/s", SYSTEMS["l40s-8x"].gpu.hbm_tbps, 0.864,
     "nvidia2023l40s"),
    ("L40S BF16 733 TFLOP/s sparse",
     SYSTEMS["l40s-8x"].gpu.peak_flops("bf16") / 1e12, 733 / 2,
     "nvidia2023l40s"),
    ("L40S PCIe Gen4 x16 64 GB/s both ways", SYSTEMS["l40s-8x"].pcie.gbps,
     64 / 2, "nvidia2023l40s"),
    ("HDR 200 Gb/s", FABRICS["ib-hdr"].link.gbps, 200 / 8,
     "nvidia2020dgxa100"),
    ("NDR 400 Gb/s", FABRICS["ib-ndr"].link.gbps, 400 / 8,
     "nvidia2023dgxh100"),
    ("p4d: 4 x 100 Gb/s EFA = 400 Gb/s a node",
     SYSTEMS["p4d"].node_nic_gbps, 400 / 8, "aws2025ec2network"),
    ("p5: 3,200 Gb/s EFA a node", SYSTEMS["p5"].node_nic_gbps, 3200 / 8,
     "aws2025ec2network"),
    ("p5: 32 EFA NICs", SYSTEMS["p5"].nic_count, 32, "aws2025ec2network"),
    ("p5en: 16 x 200 Gb/s EFA", FABRICS["efa-p5en"].nics
     * FABRICS["efa-p5en"].link.gbps, 3200 / 8, "aws2025ec2network"),
    ("p6-b200: 8 x 400 Gb/s EFA", FABRICS["efa-p6-b200"].nics
     * FABRICS["efa-p6-b200"].link.gbps, 3200 / 8, "aws2025ec2network"),
    ("A3 High: 4 x 200 Gb/s GPU NICs (TCPX)", FABRICS["gcp-tcpx"].nics
     * FABRICS["gcp-tcpx"].link.gbps, 800 / 8, "gcp2024tcpx"),
    ("A3 Mega: 8 x 200 Gb/s GPU NICs (TCPXO)", FABRICS["gcp-tcpxo"].nics
     * FABRICS["gcp-tcpxo"].link.gbps, 1600 / 8, "gcp2024tcpx"),
    ("Omni-Path 100 Gb/s", FABRICS["opa-100"].link.gbps, 100 / 8,
     "bekman2024mlengineering"),
    ("Omni-Path CN5000 400 Gb/s", FABRICS["opa-cn5000"].link.gbps, 400 / 8,
     "bekman2024mlengineering"),
    ("EFA v1: 340 of 400 Gb/s in all-reduce tests",
     FABRICS["efa-p4d"].link.efficiency, 340 / 400, "bekman2024mlengineering"),
]


@pytest.mark.parametrize("what,table,published,key", PUBLISHED,
                         ids=[p[0] for p in PUBLISHED])
def test_table_matches_the_published_figure(what, table, published, key):
    assert table == pytest.approx(published, rel=0.005), what
    assert f"{{{key}," in BIB.read_text(encoding="utf-8"), \
        f"{key} missing from book/references.bib"


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_new_systems_name_their_sources(name):
    s = SYSTEMS[name]
    text = " ".join(v for _, v in s.sources + s.gpu.sources)
    text += " ".join(link.source for link in (s.nvlink, s.nic, s.pcie)
                     if link is not None)
    assert "http" in text or "NCCL" in text or "user guide" in text


@pytest.mark.parametrize("key", sorted(FABRICS))
def test_every_fabric_has_a_source_and_a_sane_rate(key):
    f = FABRICS[key]
    assert f.key == key and len(f.source) > 20 and f.link.source
    assert 10 <= f.link.gbps <= 100 and 0.5 < f.link.efficiency <= 1
    assert f.nics is None or f.nics >= 1


def test_pcie_only_boxes_have_no_nvlink_tier():
    for name in ("h100-pcie", "l40s-8x"):
        h = hierarchy_gbps(name)
        assert "nvlink" not in h and h["pcie"] < 100
    # bridged pairs: NVLink islands of 2 inside an 8-GPU node
    c = cluster("h100-pcie-nvlink", 1)
    assert c.system.nvlink_domain == 2 and c.gpus_per_node == 8


# ------------------------------------------------------------ part 2
def _fixtures():
    return sorted(p.stem for p in FIXTURES.glob("*.log"))


def _meta(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


#: fixtures the model misses by more than 20%: (measured/model, the
#: mechanism the model lacks). Kept as strict xfails: they must fail until
#: the mechanism is modelled, then this entry goes.
MISSES = {
    "dstack-gcp-a3high-tcpx-2node-allgather": (
        0.52, "GPUDirect-TCPX reaches about half of its 4 x 200 Gb/s; the "
        "table has no published TCPX efficiency and assumes NDR's 0.97"),
    "coreweave-gb200-nvl72-2rack": (
        0.78, "NVLS on a 72-GPU NVL72 domain: the model grants 0.74 of "
        "NVLink 5 (tuning.cc's Blackwell nvlsEfficiency); the racks reach "
        "~0.8 of that (the 1-rack run sits at 0.80, just inside)"),
    "coreweave-gb200-nvl72-20rack": (
        0.39, "1,440 GPUs: tree depth and fabric contention at scale, and "
        "the run still rising at 16 GiB; the model has no scale penalty"),
}

#: measured / model (NCCL's best choice) at the largest size, filled by
#: test_model_vs_published_run; printed by -s for the chapter's table.
RATIOS: dict[str, float] = {}


def _params():
    out = []
    for name in _fixtures():
        marks = []
        if name in MISSES:
            ratio, why = MISSES[name]
            marks.append(pytest.mark.xfail(
                strict=True, reason=f"measured/model = {ratio:.2f}: {why}"))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


_TAG = re.compile(r"^\[\d+,\d+\]<stdout>:")       # mpirun --tag-output
_UNIT = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30,
         "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _size(word: str) -> int | None:
    """A result row's first column as bytes (8589934592, 17_179_869_184
    as the ML Engineering book writes it, 1GB or 16GiB), else None."""
    if word.replace("_", "").isdigit():
        return int(word.replace("_", ""))
    m = re.fullmatch(r"(\d+)(B|KB|MB|GB|KiB|MiB|GiB)", word)
    return int(m.group(1)) * _UNIT[m.group(2)] if m else None


def _rows(text: str):
    """(size, words) of each result row; markdown tables ('| 16GiB |
    482.26GBps |') lose their bars and units."""
    for line in text.splitlines():
        words = [w.removesuffix("GBps") for w in
                 re.split(r"[\s|]+", _TAG.sub("", line)) if w]
        if len(words) >= 3 and _size(words[0]) is not None:
            yield _size(words[0]), words


@pytest.mark.parametrize("name", _fixtures())
def test_fixture_is_a_sourced_verbatim_run(name):
    m = _meta(name)
    assert m["source"].startswith("https://github.com/")
    assert f"{{{m['bib']}," in BIB.read_text(encoding="utf-8")
    assert m["health"] in ("healthy", "degraded", "unknown")
    assert m["system"] is None or m["system"] in SYSTEMS
    assert m["nic"] is None or m["nic"] in FABRICS or parse_nic(m["nic"])
    assert m["nodes"] >= 1 and m["gpus_per_node"] >= 1 and len(m["why"]) > 40
    # the largest size is the last row, and its out-of-place busbw is the
    # one the sidecar records
    text = (FIXTURES / f"{name}.log").read_text(encoding="utf-8")
    ranks = [int(r) for r in re.findall(r"#\s+Rank\s+(\d+)", text)]
    if ranks:       # the device list (or its last line) names the ranks
        assert max(ranks) + 1 == m["nodes"] * m["gpus_per_node"], name
    rows = list(_rows(text))
    big = m["largest"]
    assert max(size for size, _ in rows) == big["bytes"]
    assert any(size == big["bytes"] and f"{big['busbw_gbps']:.2f}" in words
               for size, words in rows), name


def _model(m) -> float:
    c = cluster(m["system"], m["nodes"], nic=m["nic"])
    n = m["nodes"] * m["gpus_per_node"]
    return nccl.busbw(m["collective"], m["largest"]["bytes"], c, n)


@pytest.mark.parametrize("name", _params())
def test_model_vs_published_run(name):
    m = _meta(name)
    if m["system"] is None:
        with pytest.raises(ValueError, match="unknown system"):
            cluster("unknown", m["nodes"])
        return
    ratio = m["largest"]["busbw_gbps"] / _model(m)
    RATIOS[name] = ratio
    if m["health"] == "degraded":
        assert ratio < 1 - TOL, f"{name}: degraded run at {ratio:.2f}"
        return
    assert abs(ratio - 1) <= TOL, \
        f"{name}: measured/model = {ratio:.2f} (model {_model(m):.1f} GB/s)"


@pytest.mark.parametrize("name", sorted(MISSES))
def test_recorded_miss_is_the_current_error(name):
    """The error written next to each miss is the model's error today
    (within 0.02), so the table in the report cannot go stale."""
    ratio = _meta(name)["largest"]["busbw_gbps"] / _model(_meta(name))
    assert ratio == pytest.approx(MISSES[name][0], abs=0.02)


def test_fixture_set_covers_the_issue():
    """Single-node A100, H100, GB200 (one NVL72 rack), MI300X; multi-node
    InfiniBand/RoCE and EFA; at least one degraded run."""
    metas = [_meta(n) for n in _fixtures()]
    one = {m["system"] for m in metas if m["system"] and
           m["nodes"] * m["gpus_per_node"]
           <= SYSTEMS[m["system"]].nvlink_domain}
    assert {"dgx-a100", "dgx-a100-40gb", "dgx-h100", "hgx-h200",
            "gb200-nvl72", "mi300x"} <= one
    multi = {(m["system"], m["nic"]) for m in metas if m["nodes"] > 1}
    assert ("p4d", None) in multi and ("dgx-h100", None) in multi
    assert sum(m["health"] == "degraded" for m in metas) >= 2


# --------------------------------------------- new paths, by hand and quoted
def _ring(system, nodes, ranks, nbytes=4 << 30):
    return [ch for ch in nccl.choices("allreduce", nbytes, cluster(system,
                                                                   nodes),
                                      ranks)
            if (ch.algorithm, ch.protocol) == ("ring", "Simple")][0]


def test_xgmi_mesh_uses_only_the_links_to_the_group():
    """MI300X: one xGMI link (64 GB/s a way) to each of 7 peers. Two GPUs
    share one link, eight use all seven. The ML Engineering book measures
    47.671 GB/s (2 GPUs) and 312.912 GB/s (8 GPUs) at 4 GiB
    [bekman2024mlengineering]; the model: 64 x 0.8 and 448 x 0.8."""
    two, eight = _ring("mi300x", 1, 2), _ring("mi300x", 1, 8)
    assert two.busbw_gbps == pytest.approx(64 * 0.8, rel=0.01)
    assert eight.busbw_gbps == pytest.approx(448 * 0.8, rel=0.02)
    assert 47.671 / two.busbw_gbps == pytest.approx(1, abs=TOL)
    assert 312.912 / eight.busbw_gbps == pytest.approx(1, abs=TOL)


def test_pcie_only_and_bridged_boxes():
    """No NVLink: the ring runs at a GPU's PCIe rate x 0.8 (Gen5 51.2,
    Gen4 25.6 GB/s). Bridged H100 PCIe pairs: NVLink inside a pair
    (300 x 20.6/25), the pairs' PCIe links (2 x 51.2) between pairs."""
    assert _ring("h100-pcie", 1, 8).busbw_gbps == pytest.approx(51.2, rel=.01)
    assert _ring("l40s-8x", 1, 8).busbw_gbps == pytest.approx(25.6, rel=.01)
    pair = _ring("h100-pcie-nvlink", 1, 2)
    assert pair.busbw_gbps == pytest.approx(300 * 20.6 / 25, rel=0.01)
    assert _ring("h100-pcie-nvlink", 1, 8).busbw_gbps == \
        pytest.approx(2 * 51.2, rel=0.01)
    # across nodes the NICs join in: never faster than inside one node
    assert _ring("h100-pcie-nvlink", 2, 16).busbw_gbps <= 2 * 51.2


def test_every_bib_key_a_source_names_exists():
    """Source strings cite book/references.bib keys in brackets."""
    import warmup_kit.model.hardware as hw
    bib = BIB.read_text(encoding="utf-8")
    texts = [v for s in SYSTEMS.values() for _, v in s.sources + s.gpu.sources]
    texts += [link.source for s in SYSTEMS.values()
              for link in (s.nvlink, s.nic, s.pcie) if link is not None]
    texts += [f.source for f in FABRICS.values()]
    keys = {k for t in texts for k in re.findall(r"\[([a-z]+\d{4}[a-z0-9]*)\]",
                                                   t)}
    assert len(keys) >= 8 and hw.FABRICS is FABRICS
    missing = [k for k in sorted(keys) if f"{{{k}," not in bib]
    assert not missing, f"cited in hardware.py, not in the bib: {missing}"
