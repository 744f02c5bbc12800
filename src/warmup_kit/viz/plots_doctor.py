"""The cluster doctor's pictures (book, Chapter 5, "Is my busbw normal?").

:func:`expected_view` is the model's expected nccl-tests all-reduce busbw
over size for a system, node count and NICs (the best algorithm and each
algorithm NCCL could run, with the doctor's healthy floor);
:func:`expected_widget` puts it on knobs (a kernel-free twin on the site).
:func:`diagnosis_panel` draws one diagnosed run: measured against expected,
with the healthy band. Numbers come from :mod:`warmup_kit.doctor.expect`,
the same function the doctor judges with.
"""
from __future__ import annotations

from warmup_kit.doctor.diagnose import FAST, HEALTHY, Diagnosis
from warmup_kit.doctor.expect import LABELS, expected, shape
from warmup_kit.doctor.systems import build_cluster, node_system, parse_nic
from warmup_kit.model import hardware
from warmup_kit.viz.widgets import Knob, Line, Panel, explore

SIZES = tuple(2 ** k for k in range(10, 34))            # 1 KiB .. 8 GiB
NODES = (1, 2, 4, 16)
#: "as built": the system's own NICs; else COUNTxSPEED per node
NICS = ("as built", "8x400G", "8x200G", "4x100G")


def expected_curves(system: str, nodes: int, nic: str = "as built",
                    collective: str = "allreduce") -> dict[str, list]:
    """Per algorithm (and "best"): expected busbw (GB/s) at :data:`SIZES`
    for a full-node run of ``nodes`` nodes of ``system``."""
    s = node_system(system, None if nic == "as built" else parse_nic(nic))
    c = build_cluster(s, nodes)
    sh = shape(c, nodes * s.gpus_per_node, nodes)
    out: dict[str, list] = {"best": []}
    for size in SIZES:
        e = expected(collective, size, s, sh)
        out["best"].append(e.best_gbps if e else 0.0)
        for a, _, g in (e.per_algorithm if e else ()):
            out.setdefault(a, []).append(g)
    return {k: v for k, v in out.items() if len(v) == len(SIZES)}


def expected_view(system: str, nodes: int, nic: str = "as built") -> Panel:
    """Expected all-reduce busbw over size, every algorithm, healthy floor."""
    curves = expected_curves(system, nodes, nic)
    x = list(SIZES)
    traces = [Line(x, curves["best"], "expected (NCCL's pick)")]
    traces.append(Line(x, [HEALTHY * g for g in curves["best"]],
                       f"healthy floor ({HEALTHY}x)", dash=True,
                       color="#2ca02c"))
    for a in ("ring", "tree", "nvls", "nvls_tree"):
        y = curves.get(a, [float("nan")] * len(x))
        traces.append(Line(x, y, LABELS[a], dash=True))
    s = hardware.SYSTEMS[system]
    return Panel(traces, title=f"{system}: {nodes} node(s) x "
                 f"{s.gpus_per_node} GPUs, NICs {nic}",
                 xlabel="size (bytes)", ylabel="all-reduce busbw (GB/s)",
                 logx=True, logy=True)


def expected_widget():
    """System, nodes, NICs -> the expected busbw curve (kernel-free on the
    site: every combination precomputed)."""
    systems = sorted(hardware.SYSTEMS)
    return explore(expected_view,
                   [Knob("system", systems, default=("dgx-h100" if
                                                     "dgx-h100" in systems
                                                     else systems[0])),
                    Knob("nodes", NODES, default=2),
                    Knob("nic", NICS, label="NICs per node")],
                   title="What busbw should nccl-tests show?")


def diagnosis_panel(d: Diagnosis) -> Panel:
    """Measured busbw against the model's, with the healthy band."""
    x = [j.row.nbytes for j in d.rows]
    traces = [Line(x, [j.row.busbw_gbps for j in d.rows], "measured",
                   markers=True)]
    ex = [(j.row.nbytes, j.expected_gbps) for j in d.rows
          if j.expected_gbps]
    if ex:
        xs, ys = [a for a, _ in ex], [b for _, b in ex]
        traces += [Line(xs, ys, "expected (model)", dash=True),
                   Line(xs, [HEALTHY * y for y in ys], f"{HEALTHY}x",
                        dash=True, color="#2ca02c"),
                   Line(xs, [FAST * y for y in ys], f"{FAST}x", dash=True,
                        color="#2ca02c")]
    return Panel(traces, title=f"{d.run.collective}: {d.verdict}",
                 xlabel="size (bytes)", ylabel="busbw (GB/s)", logx=True,
                 logy=True)
