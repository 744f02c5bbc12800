"""Measured against modelled on the emulated cluster: the stored run
(``book/data/cluster.json``), its check and its table (book, Chapter 6 and
Lab 02; written by ``benchmarks/cluster.py``).

A stored run is one JSON object:

* ``machine``: CPU model, cores, load average before and after, date;
* ``cluster``: nodes, ranks per node, the link rate (``tc tbf``) and how it
  was chosen, the transports (in a node, across nodes);
* ``tiers``: the calibrated :class:`~warmup_kit.model.emulated.TwoTier`
  (``as_dict``), the tier ratio and the calibration fit's error;
* ``rows``: one per (experiment, variant, size), measured (median of
  ``reps``) and modelled, with the correctness and byte checks.

The book's table and figure are computed from it by :func:`table` and
:func:`~warmup_kit.viz.plots_cluster.measured_vs_model`, never typed in.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from warmup_kit.machine import cores, cpu_name
from warmup_kit.model.emulated import TwoTier, predictions, winners
from warmup_kit.units import human_bytes

#: --check: measured within this fraction of the model ...
TOLERANCE = 0.25
#: ... for messages this large and up
CHECK_MIN_BYTES = 1 << 20
#: variants whose times are within this fraction of each other are tied:
#: either may win (the winner rule of ``--check``)
TIE = 0.10
#: what ``--check`` asks, each with its reason (printed by the benchmark)
RULES = (
    ("every result right, every byte count the schedule's",
     "a fast wrong answer is not an answer, and the bytes are what the "
     "model prices"),
    (f"measured within {TOLERANCE:.0%} of the model at "
     f"{human_bytes(CHECK_MIN_BYTES)} and up",
     "from there the bytes dominate, which the calibrated tiers price; "
     "smaller calls are mostly latency, which four ranks on two cores "
     "stretch by a scheduler's time slice"),
    (f"the same winner per experiment and size, variants within "
     f"{TIE:.0%} of each other tied",
     "a gap under 10% is inside the fast tier's run-to-run noise on shared "
     "cores; the model should name the winner where the gap is larger"))
KEYS = ("machine", "cluster", "tiers", "rows")
ROW_KEYS = ("experiment", "variant", "algorithm", "nbytes", "measured_ms",
            "model_ms", "error_pct", "correct", "bytes_match")


def machine_facts() -> dict:
    """What a reader needs to judge the run: CPU, cores, load, date."""
    return {"cpu": cpu_name(), "cores": cores(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def merge(measured: list[dict], tt: TwoTier) -> list[dict]:
    """The measured rows with the model's time and the error
    (measured over modelled, percent) beside each."""
    sizes = sorted({r["nbytes"] for r in measured})
    model = {(p["experiment"], p["variant"], p["nbytes"]): p["model_ms"]
             for p in predictions(tt, sizes)}
    out = []
    for r in measured:
        m = model[(r["experiment"], r["variant"], r["nbytes"])]
        out.append(dict(r, model_ms=m,
                        error_pct=(r["measured_ms"] / m - 1) * 100))
    return out


def tied(rows: list[dict], key: str, tie: float = TIE
         ) -> dict[tuple[str, int], set[str]]:
    """Per (experiment, size): the variants whose ``key`` ("measured_ms" or
    "model_ms") is within ``tie`` of the fastest's (at most ``1 + tie``
    times it): all of them count as the winner."""
    best: dict[tuple[str, int], float] = {}
    for r in rows:
        if r.get(key) is None:
            continue
        k = (r["experiment"], r["nbytes"])
        best[k] = min(best.get(k, r[key]), r[key])
    out: dict[tuple[str, int], set[str]] = {k: set() for k in best}
    for r in rows:
        k = (r["experiment"], r["nbytes"])
        if r.get(key) is not None and r[key] <= (1 + tie) * best[k]:
            out[k].add(r["variant"])
    return out


def same_winner(rows: list[dict], tie: float = TIE
                ) -> dict[tuple[str, int], bool]:
    """Per (experiment, size): whether measurement and model name the same
    winner, counting variants within ``tie`` of each other as tied: the
    model's fastest is tied for the measured win, or the measured fastest
    for the modelled one."""
    wm, wp = winners(rows, "measured_ms"), winners(rows, "model_ms")
    tm, tp = tied(rows, "measured_ms", tie), tied(rows, "model_ms", tie)
    return {k: wp[k] in tm[k] or wm[k] in tp[k] for k in wm if k in wp}


def failures(rows: list[dict], *, tolerance: float = TOLERANCE,
             min_bytes: int = CHECK_MIN_BYTES, tie: float = TIE
             ) -> list[str]:
    """Why ``--check`` fails (empty: it passes): a wrong result or byte
    count anywhere, a measured time off the model by more than
    ``tolerance`` at ``min_bytes`` and up, or another winner at any size
    (variants within ``tie`` of each other tied: :func:`same_winner`)."""
    out = []
    for r in rows:
        what = f"{r['experiment']} {r['variant']} {human_bytes(r['nbytes'])}"
        if not r["correct"]:
            out.append(f"{what}: wrong result")
        if not r["bytes_match"]:
            out.append(f"{what}: bytes differ from the schedule's")
        if r["nbytes"] >= min_bytes and \
                abs(r["error_pct"]) > tolerance * 100:
            out.append(f"{what}: measured {r['measured_ms']:.3g} ms vs "
                       f"model {r['model_ms']:.3g} ms "
                       f"({r['error_pct']:+.0f}%)")
    wm, wp = winners(rows, "measured_ms"), winners(rows, "model_ms")
    agree = same_winner(rows, tie)
    for k in sorted(agree):
        if not agree[k]:
            out.append(f"{k[0]} {human_bytes(k[1])}: measured winner "
                       f"{wm[k]}, modelled {wp[k]} (more than {tie:.0%} "
                       "apart both ways)")
    return out


def table(doc: dict) -> tuple[list[str], list[list]]:
    """Headers and rows of the measured-vs-modelled table of a stored run:
    size, experiment, variant, measured ms, modelled ms, error %, and the
    winner measured / modelled (on each size's first row; "tied" where
    they differ but within :data:`TIE`, :func:`same_winner`)."""
    rows = doc["rows"]
    wm, wp = winners(rows, "measured_ms"), winners(rows, "model_ms")
    agree = same_winner(rows)
    order = {"allreduce": 0, "tp": 1}
    out, seen = [], set()
    for r in sorted(rows, key=lambda r: (order[r["experiment"]],
                                         r["nbytes"])):
        k = (r["experiment"], r["nbytes"])
        win = "" if k in seen else f"{wm[k]} / {wp[k]}" + (
            f" (within {TIE:.0%}: tied)" if wm[k] != wp[k] and agree[k]
            else "")
        seen.add(k)
        out.append([human_bytes(r["nbytes"]), r["experiment"], r["variant"],
                    round(r["measured_ms"], 3), round(r["model_ms"], 3),
                    f"{r['error_pct']:+.0f}%", win])
    return (["size", "experiment", "variant", "measured ms", "model ms",
             "error", "winner measured / model"], out)


def tiers_table(doc: dict) -> tuple[list[str], list[list]]:
    """Headers and rows: each tier's calibrated latency and bandwidth."""
    tt = TwoTier.from_dict(doc["tiers"]["model"])
    return (["tier", "latency µs", "bandwidth MB/s per direction"],
            [["inside a node (shared memory)", round(tt.intra.alpha_s * 1e6, 1),
              round(tt.intra.bw_bytes_per_s / 1e6)],
             ["across nodes (node uplink)", round(tt.inter.alpha_s * 1e6, 1),
              round(tt.inter.bw_bytes_per_s / 1e6)],
             ["ratio fast / slow", "", round(tt.ratio, 1)]])


def validate(doc: dict) -> None:
    """Raise ValueError unless ``doc`` is a stored run of this schema."""
    missing = [k for k in KEYS if k not in doc]
    if missing:
        raise ValueError(f"stored run lacks {missing}")
    for k in ("cpu", "cores", "loadavg", "date"):
        if k not in doc["machine"]:
            raise ValueError(f"machine facts lack {k!r}")
    for k in ("nodes", "ranks_per_node", "link", "transports"):
        if k not in doc["cluster"]:
            raise ValueError(f"cluster facts lack {k!r}")
    TwoTier.from_dict(doc["tiers"]["model"])
    if not doc["rows"]:
        raise ValueError("stored run has no rows")
    for r in doc["rows"]:
        lost = [k for k in ROW_KEYS if k not in r]
        if lost:
            raise ValueError(f"row {r} lacks {lost}")


def load(path: str | Path) -> dict:
    """A stored run, validated."""
    doc = json.loads(Path(path).read_text())
    validate(doc)
    return doc
