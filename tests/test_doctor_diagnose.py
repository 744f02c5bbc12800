"""The doctor's verdicts and causes on crafted runs: healthy numbers are
the model's own; each degraded run carries one fault, in the numbers and
(where NCCL would say so) in its INFO lines, and the doctor must name it
first, with the evidence."""
from dataclasses import replace

import pytest

from doctor_samples import info, run_lines
from warmup_kit.doctor import Flags, examine_text
from warmup_kit.doctor.diagnose import BROKEN, HEALTHY
from warmup_kit.doctor.systems import node_system, parse_nic
from warmup_kit.model import hardware

GIB = 1 << 30


def text(lines) -> str:
    return "\n".join(lines) + "\n"


def with_info(lines, msgs):
    at = next(i for i, l in enumerate(lines) if l.startswith("#       size"))
    return lines[:at] + [info(msg=m) for m in msgs] + lines[at:]


def one(lines, **flags):
    d, = examine_text(text(lines), Flags(**flags), "t.log")
    return d


def causes(d):
    return [c.cause for c in d.causes]


def big(factor):
    """``factor`` from 64 MiB up, the model below."""
    return lambda s: factor if s >= 64 << 20 else 1.0


def test_model_numbers_are_healthy_with_no_fault_named():
    d = one(run_lines("dgx-h100", maxb=8 * GIB))
    assert d.verdict == "healthy" and d.ratio == pytest.approx(1, abs=0.02)
    assert all(c.weight <= 20 for c in d.causes), causes(d)
    assert d.rows[-1].algorithm.startswith("NVLS")


@pytest.mark.parametrize("factor,verdict", [
    (HEALTHY + 0.02, "healthy"), (HEALTHY - 0.02, "degraded"),
    (BROKEN + 0.02, "degraded"), (BROKEN - 0.02, "broken")])
def test_thresholds(factor, verdict):
    assert one(run_lines("dgx-a100", maxb=4 * GIB,
                         factor=big(factor))).verdict == verdict


def test_wrong_results_are_broken_whatever_the_speed():
    d = one(run_lines("dgx-a100", maxb=GIB,
                      wrong=lambda s: 5 if s == 1 << 20 else 0))
    assert d.verdict == "broken" and causes(d)[0] == "wrong results"
    assert "#wrong" in d.causes[0].evidence and "line" in \
        d.causes[0].evidence


def test_socket_transport_named_with_its_line():
    lines = with_info(
        run_lines("dgx-h100", hosts=2, maxb=4 * GIB, factor=big(0.06)),
        ["NET/Socket : Using [0]eth0:10.1.0.4<0>",
         "Using network Socket",
         "Channel 00/0 : 15[7] -> 0[0] [receive] via NET/Socket/0"])
    d = one(lines)
    assert d.verdict == "broken"
    assert causes(d)[0] == "network on sockets"
    assert "NET/Socket" in d.causes[0].evidence or "Socket" in \
        d.causes[0].evidence
    assert "line " in d.causes[0].evidence


def test_fewer_nics_than_the_node_has():
    lines = with_info(
        run_lines("dgx-h100", hosts=2, maxb=4 * GIB, factor=big(0.25)),
        ["NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB "
         "eth0:10.0.0.1<0>",
         "Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA"])
    d = one(lines)
    assert d.verdict == "broken"          # 2 of 8 rails: a quarter
    assert causes(d)[0] == "fewer NICs in use than present"
    assert "2 NIC(s) in use of the 8" in d.causes[0].evidence


def test_no_gpudirect_rdma():
    lines = with_info(
        run_lines("dgx-a100", hosts=2, maxb=4 * GIB, factor=big(0.6)),
        ["NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB "
         "[3]mlx5_3:1/IB [4]mlx5_6:1/IB [5]mlx5_7:1/IB [6]mlx5_8:1/IB "
         "[7]mlx5_9:1/IB ; OOB ib0:10.0.0.1<0>",
         "Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0",
         "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0"])
    d = one(lines)
    assert causes(d)[0] == "no GPUDirect RDMA"
    assert "via NET/IB/0" in d.causes[0].evidence


def test_nvls_available_but_ring_numbers():
    lines = with_info(run_lines("dgx-h100", maxb=8 * GIB, algorithm="ring"),
                      ["NVLS multicast support is available on dev 0"])
    d = one(lines)
    assert d.verdict == "degraded"
    assert causes(d)[0] == "NVLS available but the numbers match ring"
    assert "NVLS multicast support is available" in d.causes[0].evidence
    assert d.rows[-1].algorithm.startswith("ring")


def test_pcie_only_path_from_the_numbers():
    s = hardware.SYSTEMS["dgx-a100"]
    pcie = replace(s, nvlink=None)
    from doctor_samples import model_busbw
    from warmup_kit.doctor.expect import Shape, expected

    def factor(size):
        p = expected("allreduce", size, pcie, Shape(8, 1, 8)).best_gbps
        return p / model_busbw("dgx-a100", "allreduce", size, 1, 8)
    d = one(run_lines("dgx-a100", maxb=4 * GIB, factor=factor))
    assert d.verdict in ("degraded", "broken")
    assert causes(d)[0] == "PCIe-only path inside the node"


def test_pcie_only_path_from_shm_channels():
    lines = with_info(
        run_lines("dgx-a100", maxb=4 * GIB, factor=big(0.1)),
        ["Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"])
    d = one(lines)
    assert causes(d)[0] == "PCIe-only path inside the node"
    assert "SHM/direct" in d.causes[0].evidence


def test_one_slow_size_is_pointed_at():
    lines = run_lines("dgx-a100", maxb=4 * GIB,
                      factor=lambda s: 0.3 if s == 64 << 20 else 1.0)
    d = one(lines)
    assert d.verdict == "healthy"
    dip = [c for c in d.causes if c.cause.startswith("one size")]
    assert dip and "64 MiB" in dip[0].evidence
    assert "line " in dip[0].evidence


def test_slow_plateau_without_a_logged_reason():
    d = one(run_lines("dgx-h100", hosts=4, maxb=4 * GIB, factor=big(0.5)))
    assert d.verdict == "degraded"
    assert causes(d)[0].startswith("a plateau below the model")


def test_latency_bound_average_is_explained():
    d = one(run_lines("dgx-a100", maxb=4 * GIB))
    c = [c for c in d.causes if c.cause.startswith("Avg bus bandwidth")]
    assert c and "Avg bus bandwidth" in c[0].evidence
    assert "under 1 MiB" in c[0].evidence


def test_unknown_system_said_plainly():
    lines = [l.replace("NVIDIA A100-SXM4-80GB", "NVIDIA Tesla T4")
             for l in run_lines("dgx-a100", maxb=1 << 20)]
    d = one(lines)
    assert d.verdict == "unknown" and d.setup.system is None
    assert causes(d)[0] == "unknown system"
    assert "T4" in d.causes[0].evidence
    assert all(j.expected_gbps is None for j in d.rows)
    d = one(lines, system="dgx-a100")          # a flag names it
    assert d.verdict == "healthy"


def test_nic_flag_prices_a_smaller_network():
    """Numbers of a 2-node DGX A100 with 4x100G NICs: healthy against that
    node, degraded against the reference system's 8x200G."""
    s = node_system("dgx-a100", parse_nic("4x100G"))
    assert s.nic.gbps == pytest.approx(12.5) and s.nics_per_node == 4
    from warmup_kit.doctor.expect import expected, shape
    sh = shape(hardware.Cluster(s, 2), 16, 2)
    from doctor_samples import model_busbw

    def factor(size):
        return expected("allreduce", size, s, sh).best_gbps / \
            model_busbw("dgx-a100", "allreduce", size, 2, 8)
    lines = run_lines("dgx-a100", hosts=2, maxb=4 * GIB, factor=factor)
    assert one(lines, nic="4x100G").verdict == "healthy"
    assert one(lines).verdict in ("degraded", "broken")


def test_nic_counts_that_do_not_divide_the_node_share_it():
    s = node_system("dgx-h100", parse_nic("3x400G"))
    assert s.nics_per_node is None
    assert s.nic.gbps * s.gpus_per_node == pytest.approx(3 * 50)
    s = node_system("dgx-h100", parse_nic("16x400G"))
    assert s.nic.gbps == pytest.approx(100)


def test_emulated_cluster_report_judged_on_its_own_model():
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).resolve().parents[1] / "book" / "data"
                      / "cluster.json").read_text())
    ds = examine_text(json.dumps(doc))
    assert ds and all(d.verdict != "unknown" for d in ds)
    assert all(d.setup.system is None and d.run.own_model for d in ds)
    for r in doc["rows"]:
        if r["variant"] == "flat ring":
            r["measured_ms"] = r["model_ms"] * 3      # a throttled link
    ds = examine_text(json.dumps(doc))
    ring = [d for d in ds if d.run.rows[0].variant == "flat ring"][0]
    assert ring.verdict == "broken" and ring.ratio == pytest.approx(1 / 3)


def test_bench_json_needs_a_system_and_then_gets_one():
    import json
    doc = {"header": {"collective": "allreduce", "ranks": 8,
                      "transport": "shm", "machine": "x"},
           "rows": [{"collective": "allreduce", "ranks": 8, "size": s,
                     "busbw_gbps": 200.0, "time_us": 0.0,
                     "algorithm": "ring", "wrong": 0}
                    for s in (1 << 28, 1 << 29, 1 << 30)]}
    d, = examine_text(json.dumps(doc))
    assert d.verdict == "unknown" and "unknown system" in causes(d)
    d, = examine_text(json.dumps(doc), Flags(system="dgx-a100"))
    assert d.verdict == "healthy" and d.setup.ranks == 8


def test_processes_that_each_ran_alone():
    """nccl-tests built without MPI under mpirun -np 2: each process prints
    its own header, devices and rows, interleaved (ranks repeat, sizes
    restart)."""
    from doctor_samples import GPU, header, row
    devs = header(devices=[("n1", 0, GPU["dgx-a100"])])
    lines = devs[:3] + ["#  Rank  0 Group  0 Pid   3591 on         n1 device"
                        "  0 [0x03] " + GPU["dgx-a100"],
                        "#  Rank  0 Group  0 Pid   2451 on         n2 device"
                        "  0 [0x03] " + GPU["dgx-a100"]] + devs[-4:]
    for s in (8, 16, 32):
        for _ in range(2):
            lines.append(row(s, s // 4, "float", "sum", -1,
                             (45.0, 0.0, 0.0, 0), (45.0, 0.0, 0.0, 0)))
    d = one(lines)
    assert causes(d)[0] == "each process ran its own test"
    assert "rank numbers repeat" in d.causes[0].evidence


def test_a_new_table_key_plugs_into_the_gpu_names(monkeypatch):
    """A GPU the table lacks is unknown; once its key is in SYSTEMS, the
    same log resolves to it (no change to the doctor)."""
    from warmup_kit.doctor.systems import resolve_gpu
    assert resolve_gpu("NVIDIA H200")[0] is None or \
        "hgx-h200" in hardware.SYSTEMS
    monkeypatch.setitem(hardware.SYSTEMS, "hgx-h200",
                        replace(hardware.SYSTEMS["dgx-h100"],
                                name="hgx-h200"))
    assert resolve_gpu("NVIDIA H200") == ("hgx-h200", "H200")
    assert resolve_gpu("NVIDIA H100 80GB HBM3")[0] == "dgx-h100"
    assert resolve_gpu("NVIDIA A100-SXM4-80GB")[0] == "dgx-a100"
    assert resolve_gpu("Tesla T4") == (None, "Tesla T4")


def _ramp(steps):
    """Measured/model factors by size from 1 GiB up (``steps``), the
    model's own numbers below."""
    return lambda s: steps.get(s, 1.0 if s < GIB else list(steps.values())[-1])


def test_a_late_plateau_is_judged_on_the_plateau():
    """A run that climbs through 1-2 GiB and levels off at 4 GiB (a whole
    NVL72 rack does) is judged on 4 and 8 GiB; the note says why."""
    late = {GIB: 0.6, 2 * GIB: 0.7, 4 * GIB: 0.85, 8 * GIB: 0.85}
    d = one(run_lines("dgx-h100", maxb=8 * GIB, factor=_ramp(late)))
    assert d.verdict == "healthy" and d.ratio == pytest.approx(0.85, abs=0.02)
    assert any("still climbs" in n and "judged from 4 GiB" in n
               for n in d.notes), d.notes
    low = {GIB: 0.5, 2 * GIB: 0.6, 4 * GIB: 0.7, 8 * GIB: 0.7}
    d = one(run_lines("dgx-h100", maxb=8 * GIB, factor=_ramp(low)))
    assert d.verdict == "degraded"                 # a low plateau stays low


def test_a_run_still_climbing_at_its_largest_size_is_judged_there():
    rising = {GIB: 0.5, 2 * GIB: 0.6, 4 * GIB: 0.7, 8 * GIB: 0.85}
    d = one(run_lines("dgx-h100", maxb=8 * GIB, factor=_ramp(rising)))
    assert d.ratio == pytest.approx(0.85, abs=0.02)
    assert any("sweep larger" in n for n in d.notes), d.notes


def test_a_collapse_is_not_mistaken_for_a_climb():
    """Falling rows are judged whole: only climbing leading rows drop."""
    fall = {GIB: 1.0, 2 * GIB: 0.3, 4 * GIB: 0.3, 8 * GIB: 0.3}
    d = one(run_lines("dgx-h100", maxb=8 * GIB, factor=_ramp(fall)))
    assert d.verdict == "broken" and len([n for n in d.notes
                                          if "climbs" in n]) == 0


@pytest.mark.parametrize("key", sorted(hardware.FABRICS))
def test_nic_flag_takes_every_fabric_key_the_model_does(key):
    """``--nic gcp-tcpx`` builds the node ``cluster(..., nic=key)`` does."""
    assert parse_nic(f" {key.upper()} ") == key
    s = node_system("dgx-h100", parse_nic(key))
    ref = hardware.cluster("dgx-h100", 2, nic=key).system
    assert (s.nic, s.nics_per_node, s.nic_count) == \
        (ref.nic, ref.nics_per_node, ref.nic_count)


def test_nic_counts_the_model_takes_build_the_models_node():
    for spec in ("4x100G", "8x400G", "16x200G", "32x100G"):
        s = node_system("dgx-h100", parse_nic(spec))
        ref = hardware.cluster("dgx-h100", 1, nic=spec).system
        assert (s.nic, s.nics_per_node) == (ref.nic, ref.nics_per_node), spec


def test_a_fabric_flag_prices_the_run():
    lines = run_lines("dgx-h100", hosts=2, maxb=4 * GIB)
    d = one(lines, nic="gcp-tcpx")
    assert d.setup.system.nic.name.startswith("GCP GPUDirect-TCPX")
    assert d.verdict == "healthy"          # the model's 8x400G numbers beat
    assert d.ratio > 1                     # 4 x 200G: faster than expected
