"""The doctor's parsers on the formats readers paste: nccl-tests and
rccl-tests output as ``src/common.cu`` prints it (tests/doctor_samples.py),
cut, concatenated, interleaved with NCCL INFO lines, with Windows line
ends, old and new column layouts; the kit's own JSON."""
import json
from pathlib import Path

import pytest

from doctor_samples import GPU, header, info, row, run_lines
from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.doctor.parse import parse_text

ROOT = Path(__file__).resolve().parents[1]


def text(lines) -> str:
    return "\n".join(lines) + "\n"


def test_rows_devices_and_footer_of_a_plain_run():
    runs = parse_text(text(run_lines(maxb=1 << 20)), "a.log")
    assert len(runs) == 1
    r = runs[0]
    assert len(r.rows) == 18 and r.rows[0].nbytes == 8
    assert r.rows[-1].nbytes == 1 << 20
    assert r.hosts == ["node-00"] and len(r.devices) == 8
    assert r.gpu_names == [GPU["dgx-a100"]]
    assert r.collective == "allreduce"
    assert "inferred" in r.collective_how
    assert r.out_of_bounds.value == 0 and r.avg_busbw.value > 0
    assert all(x.wrong == 0 for x in r.rows)
    assert r.rows[-1].inplace_busbw_gbps == r.rows[-1].busbw_gbps


def test_truncated_run_keeps_its_whole_rows():
    lines = run_lines(maxb=1 << 20, footer=False)
    lines[-1] = lines[-1][:30]            # the job was killed mid-line
    r, = parse_text(text(lines), "cut.log")
    assert len(r.rows) == 17 and r.truncated
    assert r.avg_busbw is None


def test_mixed_collectives_named_by_their_markers():
    a = ["# Collective test starting: all_reduce_perf"] + run_lines(
        maxb=1 << 16)
    b = ["$ mpirun -np 8 ./build/all_gather_perf -b 8 -e 64K -f 2"] + \
        run_lines(collective="all_gather", maxb=1 << 16)
    runs = parse_text(text(a + b), "mixed.log")
    assert [r.collective for r in runs] == ["allreduce", "all_gather"]
    assert "Collective test starting" in runs[0].collective_how
    assert "all_gather_perf" in runs[1].collective_how
    assert all(x.collective == "all_gather" for x in runs[1].rows)


@pytest.mark.parametrize("coll,want", [
    ("all_gather", "all_gather"), ("reduce_scatter", "reduce_scatter"),
    ("broadcast", "broadcast"), ("allreduce", "allreduce")])
def test_collective_inferred_from_columns(coll, want):
    r, = parse_text(text(run_lines(collective=coll, maxb=1 << 20)), "x.log")
    assert r.collective == want and "inferred" in r.collective_how


def test_file_name_names_the_collective():
    r, = parse_text(text(run_lines(collective="all_gather", maxb=4096)),
                    "logs/alltoall_perf.out", "alltoall_perf.out")
    assert r.collective == "all_to_all"


def test_multi_node_header_gives_nodes_and_gpus_per_node():
    r, = parse_text(text(run_lines("dgx-h100", hosts=4, per_host=8,
                                   maxb=1 << 20)), "mn.log")
    assert len(r.devices) == 32 and len(r.hosts) == 4


def test_rccl_tests_output():
    lines = [
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 1048576 step: 2(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#", "# Using devices"]
    lines += ["#  Rank %2d Group  0 Pid %6d on %10s device %2d [%04x:%02x:%02x]"
              " %s" % (d, 771, "mi300-01", d, 0, 0x0c + d, 0,
                       "AMD Instinct MI300X") for d in range(8)]
    lines += header()[-4:] + [
        row(1048576, 262144, "float", "sum", -1, (45.1, 23.25, 40.69, 0),
            (44.8, 23.41, 40.96, 0)),
        row(2097152, 524288, "float", "sum", -1, (60.3, 34.78, 60.86, 0),
            (60.1, 34.89, 61.06, 0)),
        "# Errors with asterisks indicate errors that have exceeded the "
        "maximum threshold.", "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 50.89 ", "#"]
    r, = parse_text(text(lines), "rccl.log")
    assert r.kind == "rccl-tests" and len(r.rows) == 2
    assert r.gpu_names == ["AMD Instinct MI300X"] and r.ngpus == 8


def test_info_lines_interleaved_with_rows():
    lines = run_lines("dgx-h100", hosts=2, per_host=8, maxb=1 << 20)
    at = next(i for i, l in enumerate(lines) if l.startswith("#       size"))
    lines[at:at] = [
        info(msg="NCCL version 2.18.5+cuda12.2"),
        info(msg="NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB "
                 "[2]mlx5_4:1/IB [3]mlx5_5:1/IB [4]mlx5_6:1/IB "
                 "[5]mlx5_9:1/IB [6]mlx5_10:1/IB [7]mlx5_11:1/IB ; OOB "
                 "eth0:10.0.0.1<0>"),
        info(msg="comm 0x55d0c3a0 rank 0 nRanks 16 nNodes 2 localRanks 8 "
                 "localRank 0 MNNVL 0"),
        info(msg="Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read"),
        info(msg="Channel 00/0 : 15[7] -> 0[0] [receive] via "
                 "NET/IB/0/GDRDMA"),
        info(msg="NVLS multicast support is available on dev 0")]
    mid = at + 12
    lines[mid:mid] = [info(msg="Connected all trees"),
                      "node-01:4011:4023 [3] NCCL INFO comm 0x1 rank 11 "
                      "nranks 16 cudaDev 3 busId 9a000 - Init COMPLETE"]
    r, = parse_text(text(lines), "info.log")
    f = r.facts
    assert len(r.rows) == 18
    assert f.version.value == "2.18.5+cuda12.2"
    assert (f.nranks.value, f.nnodes.value, f.local_ranks.value) == \
        (16, 2, 8)
    assert f.net.value == "IB" and f.nics_in_use.value == 8
    assert f.gdr.value is True and f.nvls.value is True
    assert {"P2P", "NET/IB"} <= set(f.transports)
    assert f.net.line == at + 2        # evidence keeps its 1-based line


def test_windows_line_ends_parse_the_same():
    lines = run_lines(maxb=1 << 20)
    unix = parse_text("\n".join(lines) + "\n", "u.log")[0]
    win = parse_text("\r\n".join(lines) + "\r\n", "w.log")[0]
    assert [(x.nbytes, x.busbw_gbps) for x in unix.rows] == \
        [(x.nbytes, x.busbw_gbps) for x in win.rows]
    assert win.gpu_names == unix.gpu_names      # no '\r' in the name


def test_multi_gpu_per_process_g_and_t():
    lines = run_lines(maxb=1 << 16, ngpus=4, nthread=2)
    r, = parse_text(text(lines), "g.log")
    assert (r.nthread, r.ngpus) == (2, 4) and len(r.devices) == 8
    assert len({d[0] for d in r.devices}) == 8


def test_in_place_differs_and_out_of_place_may_be_absent():
    oop, ip = (1000.0, 4.19, 7.34, 0), (900.0, 4.66, 8.16, 0)
    lines = header(devices=[("h", d, GPU["dgx-a100"]) for d in range(8)]) + [
        row(4194304, 1048576, "float", "sum", -1, oop, ip)]
    r, = parse_text(text(lines), "ip.log")
    assert r.rows[0].busbw_gbps == 7.34
    assert r.rows[0].inplace_busbw_gbps == 8.16
    only_ip = "%12li  %12li  %8s  %6s  %6i" % (4194304, 1048576, "float",
                                              "sum", -1) + " " * 32 + \
        "  %7s  %6.2f  %6.2f  %5g" % ("900.0", 4.66, 8.16, 0)
    r, = parse_text(text(header() + [only_ip]), "o.log")
    assert r.rows[0].busbw_gbps == 8.16 and r.rows[0].inplace_busbw_gbps \
        is None


def test_concatenated_runs_split_at_each_header():
    lines = run_lines(maxb=1 << 12) + run_lines(maxb=1 << 14)
    runs = parse_text(text(lines), "cat.log")
    assert [len(r.rows) for r in runs] == [10, 12]
    assert [r.index for r in runs] == [0, 1]


def test_wrong_counts_and_na():
    lines = run_lines(maxb=1 << 12, wrong=lambda s: 3 if s == 64 else 0)
    r, = parse_text(text(lines), "w.log")
    bad = [x for x in r.rows if x.wrong]
    assert [x.nbytes for x in bad] == [64] and bad[0].wrong == 6
    na = header() + ["%12li  %12li  %8s  %6s  %6i" % (64, 16, "float", "sum",
                                                     -1) +
                     "  %7s  %6.2f  %6.2f    N/A" % ("15.00", 0.0, 0.01) +
                     "  %7s  %6.2f  %6.2f    N/A" % ("15.00", 0.0, 0.01)]
    r, = parse_text(text(na), "na.log")
    assert r.rows[0].wrong is None


def test_legacy_layout_without_root_and_with_error_column():
    r, = parse_text(text(run_lines(maxb=1 << 12, legacy=True)), "old.log")
    assert len(r.rows) == 10 and r.rows[0].wrong is None
    assert r.collective == "allreduce"


def test_mpirun_tagged_output_lines():
    lines = ["[1,0]<stdout>:" + l for l in run_lines(maxb=1 << 12)]
    r, = parse_text(text(lines), "tag.log")
    assert len(r.rows) == 10 and len(r.devices) == 8


def test_socket_efa_and_nvls_info_lines():
    from warmup_kit.doctor.ncclinfo import read_info
    from warmup_kit.doctor.records import Facts
    f = Facts()
    for i, m in enumerate([
            "NET/Socket : Using [0]eth0:172.31.1.5<0> [1]eth1:172.31.2.5<0>",
            "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/1",
            "16 coll channels, 0 collnet channels, 0 nvls channels, 16 p2p "
            "channels, 2 p2p channels per peer",
            "NCCL_COLLNET_ENABLE set by environment to 0."], 1):
        read_info(f, i, info(msg=m))
    assert f.net.value == "Socket" and f.nics_in_use.value == 2
    assert "NET/Socket" in f.transports and f.nvls.value is False
    assert f.gdr.value is False and not (f.collnet and f.collnet.value)
    g = Facts()
    read_info(g, 1, info(msg="NET/OFI Selected Provider is efa (found 4 "
                             "nics)"))
    read_info(g, 2, info(msg="Using network AWS Libfabric"))
    assert g.net.value == "OFI" and g.ofi_provider.value == "efa"
    assert g.nics_in_use.value == 4


def test_bench_json_and_cluster_report():
    doc = {"header": {"collective": "allreduce", "ranks": 4,
                      "transport": "shm", "machine": "x"},
           "rows": [{"collective": "allreduce", "ranks": 4, "size": s,
                     "busbw_gbps": 1.0, "time_us": 10.0, "algorithm": a,
                     "wrong": 0} for s in (1024, 2048)
                    for a in ("ring", "mpi")]}
    runs = parse_text(json.dumps(doc), "bench.json")
    assert [r.kind for r in runs] == ["warmup-bench"] * 2
    assert [len(r.rows) for r in runs] == [2, 2]
    assert runs[0].stated["ranks"] == 4
    rep = parse_text((ROOT / "book" / "data" / "cluster.json").read_text(),
                     "cluster.json")
    assert {r.kind for r in rep} == {"emulated-cluster"}
    assert all(x.expected_gbps > 0 for r in rep for x in r.rows)


@pytest.mark.parametrize("body,msg", [
    ("", "no result rows"),
    ("# nThread 1 nGpus 1\n# Using devices\n#\n", "no result rows"),
    ('{"a": 1}', "neither"),
    ("{not json", "not"),
])
def test_unreadable_text(body, msg):
    with pytest.raises(DoctorInputError, match=msg):
        parse_text(body, "bad.log")


def test_two_systems_in_one_file_refused():
    a = run_lines("dgx-a100", maxb=1 << 12)
    b = run_lines("dgx-h100", maxb=1 << 12)
    with pytest.raises(DoctorInputError, match="mixes two systems"):
        parse_text(text(a + b), "two.log")
    mixed = header(devices=[("h", 0, GPU["dgx-a100"]),
                            ("h", 1, GPU["dgx-h100"])]) + \
        [row(64, 16, "float", "sum", -1, (15.0, 0.0, 0.01, 0))]
    with pytest.raises(DoctorInputError, match="mixes GPU models"):
        parse_text(text(mixed), "two.log")


def test_shapes_seen_in_published_logs():
    """Three shapes of real logs: size-0 rows (printed twice, -b 0), an
    OFI plugin whose name holds a space, and a device list cut to its last
    line (the rank number still counts the ranks)."""
    from warmup_kit.doctor import Flags, resolve
    zero = "%12li  %12li  %8s  %6s  %6i" % (0, 0, "float", "sum", -1) + \
        "  %7s  %6.2f  %6.2f  %5g" % ("3.91", 0, 0, 0) * 2
    lines = header(devices=[("w0", 0, GPU["dgx-a100"]),
                            ("w1", 0, GPU["dgx-a100"])])
    lines += [zero, zero] + run_lines(maxb=1 << 12)[-13:-3]
    lines.insert(5, info(msg="Channel 00 : 1[101d0] -> 8[101c0] [send] via "
                             "NET/AWS Libfabric/1/GDRDMA"))
    r, = parse_text(text(lines), "efa.log")
    assert r.restart is None and r.rows[0].nbytes == 0
    assert r.facts.gdr.value is True
    assert "NET/AWS Libfabric" in r.facts.transports
    cut = ["#  Rank 71 Group  0 Pid  14840 on tray-18 device  3 [0x01] "
           "NVIDIA GB200"] + header()[-4:] + run_lines(maxb=1 << 12)[-13:-3]
    r, = parse_text(text(cut), "nvl72.log")
    s = resolve(r, Flags(nodes=18, gpus_per_node=4))
    assert (s.ranks, s.nodes, s.gpus_per_node) == (72, 18, 4)
