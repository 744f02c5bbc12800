"""nccl-tests output written the way nccl-tests prints it (``src/common.cu``:
the ``# nThread`` line, ``# Using devices`` lines, the two header lines,
rows as ``%12li  %12li  %8s  %6s  %6i`` then per pass ``  %7s  %6.2f
%6.2f  %5g``), so the doctor's parsers meet the real format. Numbers come
from the model times a factor (a healthy run is the model itself, a
degraded one a fraction of it)."""
from __future__ import annotations

from warmup_kit.doctor.expect import Shape, expected
from warmup_kit.model import hardware
from warmup_kit.model.costs import busbw_factor
from warmup_kit.model.topology import group_shape, spread

BIN = {"allreduce": "all_reduce_perf", "all_gather": "all_gather_perf",
       "reduce_scatter": "reduce_scatter_perf",
       "all_to_all": "alltoall_perf", "broadcast": "broadcast_perf",
       "sendrecv": "sendrecv_perf"}
GPU = {"dgx-a100": "NVIDIA A100-SXM4-80GB", "dgx-h100": "NVIDIA H100 80GB HBM3",
       "dgx-b200": "NVIDIA B200", "gb200-nvl72": "NVIDIA GB200"}


def fmt_time(us: float) -> str:
    if us >= 10000.0:
        return "%7.0f" % us
    if us >= 100.0:
        return "%7.1f" % us
    return "%7.2f" % us


def header(nthread=1, ngpus=1, minb=8, maxb=8 << 30, devices=(),
           legacy=False, gpu_line_group=True) -> list[str]:
    out = [f"# nThread {nthread} nGpus {ngpus} minBytes {minb} maxBytes "
           f"{maxb} step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
           "validation: 1 graph: 0", "#", "# Using devices"]
    for rank, (host, dev, name) in enumerate(devices):
        grp = "Group  0 " if gpu_line_group else ""
        out.append("#  Rank %2d %sPid %6d on %10s device %2d [0x%02x] %s"
                   % (rank, grp, 4000 + rank // max(1, ngpus * nthread),
                      host, dev, 0x07 + 16 * dev, name))
    out.append("#")
    if legacy:
        out.append("#                                                     "
                   "out-of-place                       in-place")
        out.append("# %10s  %12s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  "
                   "%6s  %5s" % ("size", "count", "type", "redop", "time",
                                 "algbw", "busbw", "error", "time", "algbw",
                                 "busbw", "error"))
        return out
    out.append("#                                                          "
               "    out-of-place                       in-place          ")
    out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  "
               "%6s %6s" % ("size", "count", "type", "redop", "root", "time",
                            "algbw", "busbw", "#wrong", "time", "algbw",
                            "busbw", "#wrong"))
    out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  "
               "%6s  %5s" % ("(B)", "(elements)", "", "", "", "(us)",
                             "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                             "(GB/s)", ""))
    return out


def row(size, count, dtype, redop, root, oop, ip=None, legacy=False) -> str:
    s = "%12li  %12li  %8s  %6s" % (size, count, dtype, redop)
    if not legacy:
        s += "  %6i" % root
    for t, alg, bus, wrong in [oop] + ([ip] if ip else []):
        s += "  %7s  %6.2f  %6.2f" % (fmt_time(t), alg, bus)
        s += ("  %5.0e" % wrong) if legacy else ("  %5g" % wrong)
    return s


def devices(hosts: int, per_host: int, name: str) -> list:
    return [(f"node-{h:02d}", d, name) for h in range(hosts)
            for d in range(per_host)]


def model_busbw(system: str, collective: str, size: int, hosts: int,
                per_host: int, algorithm: str | None = None) -> float:
    s = hardware.SYSTEMS[system]
    c = hardware.Cluster(s, hosts)
    N, k = group_shape(c, spread(c, hosts * per_host, hosts))
    e = expected(collective, size, s, Shape(hosts * per_host, N, k))
    return e.best_gbps if algorithm is None else e.gbps(algorithm)


def run_lines(system="dgx-a100", collective="allreduce", hosts=1,
              per_host=8, factor=lambda size: 1.0, minb=8, maxb=8 << 30,
              wrong=lambda size: 0, algorithm=None, dtype="float",
              ngpus=1, nthread=1, inplace=True, footer=True,
              legacy=False) -> list[str]:
    n = hosts * per_host
    lines = header(nthread, ngpus, minb, maxb,
                   devices(hosts, per_host, GPU[system]), legacy=legacy)
    redop = "none" if collective in ("all_gather", "all_to_all",
                                     "broadcast") else "sum"
    root = 0 if collective in ("broadcast", "reduce") else -1
    size, bws = minb, []
    while size <= maxb:
        ws = 4 if dtype == "float" else 2
        count = size // ws
        if collective in ("all_gather", "reduce_scatter", "all_to_all"):
            count //= n
        bus = model_busbw(system, collective, size, hosts, per_host,
                          algorithm) * factor(size)
        f = busbw_factor(collective if collective != "sendrecv"
                         else "broadcast", n)
        alg = bus / f
        t = size / (alg * 1e9) * 1e6
        oop = (t, alg, bus, wrong(size))
        lines.append(row(size, count, dtype, redop, root, oop,
                         oop if inplace else None, legacy=legacy))
        bws += [bus, bus] if inplace else [bus]
        size *= 2
    if footer:
        bad = sum(wrong(s) for s in [minb])
        lines.append(f"# Out of bounds values : {bad} "
                     f"{'OK' if not bad else 'FAILED'}")
        lines.append(f"# Avg bus bandwidth    : {sum(bws) / len(bws):.4g} ")
        lines.append("#")
    return lines


def info(host="node-00", pid=4000, dev=0, msg="") -> str:
    return f"{host}:{pid}:{pid + 12} [{dev}] NCCL INFO {msg}"
