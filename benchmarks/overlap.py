"""Overlap of bucketed all-reduce with the backward pass: measured, modelled.

Usage::

    python benchmarks/overlap.py --check                  # N = 2 and 4, shm
    python benchmarks/overlap.py --ranks 2 --transport sockets
    python benchmarks/overlap.py --json book/data/overlap.json   # Chapter 7

For each N, one job of N ranks (:func:`warmup_kit.launch`) trains the toy
MLP of :class:`warmup_kit.train.run.Config` (8 layers of 512 x 512, float64,
16 MiB of gradients) data-parallel, for every bucket size with overlap on
and off, the settings interleaved step by step; the table shows medians
over the steps: step time, compute, communication and exposed
communication, with the timeline model's step and exposed communication
beside them. The model is fed the per-layer compute, forward and optimizer
times measured *without* overlap in the same pass (the settings of a pass
run back to back, under the same load;
:func:`warmup_kit.train.analysis.compare`) and each bucket's cost from the
host model (:mod:`warmup_kit.measure.fit_host`) fitted to the job's own bucket
all-reduces; the ranks' two threads (compute, communication) share the
cores (:func:`warmup_kit.train.timeline.cpu_share`).

``--check`` exits 1 if the model's step time misses a measured one by more
than 25%. Timings on a shared machine are noisy (the load average is
printed): run it again before believing a miss.
"""
from __future__ import annotations

import os

# one BLAS thread per rank: the ranks, not a thread pool, share the cores
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import warmup_kit as wk  # noqa: E402
from warmup_kit import cliargs  # noqa: E402
from warmup_kit.machine import cores, cpu_name, load_average  # noqa: E402
from warmup_kit.train import analysis as A  # noqa: E402
from warmup_kit.train import run as R  # noqa: E402
from warmup_kit.train.timeline import cpu_share  # noqa: E402
from warmup_kit.units import human_bytes  # noqa: E402

MAX_ERROR = 0.25


def table(record: dict) -> list[str]:
    n, c = record["ranks"], record["cores"]
    fit = A.host_fit(record).as_dict()
    lines = [
        f"N = {n} ranks on {c} cores ({record['transport']}); load average "
        f"{record['loadavg']:.1f} before, {record['loadavg_after']:.1f} "
        f"after; {record['config']['steps']} steps per setting (medians); "
        f"cpu share {cpu_share(c, n):g}",
        f"  host model fitted to the job's all-reduces: call "
        f"{fit['call_us']:.0f} us, beta {fit['beta_ns_per_byte']:.3f} ns/B, "
        f"gamma {fit['gamma_ns_per_byte']:.3f} ns/B, rho "
        f"{fit['rho_us']:.0f} us (rms error {fit['rms_rel_error']:.0%})",
        f"  {'bucket':>8} {'overlap':>7} {'#':>3} {'step ms':>8} "
        f"{'compute':>8} {'comm':>7} {'exposed':>8} | {'model step':>10} "
        f"{'exposed':>8} {'error':>7}"]
    for r in A.table_rows(record):
        lines.append(
            f"  {human_bytes(r['bucket_bytes']):>8} "
            f"{'on' if r['overlap'] else 'off':>7} {r['buckets']:>3} "
            f"{r['step_ms']:8.1f} {r['compute_ms']:8.1f} {r['comm_ms']:7.1f} "
            f"{r['exposed_ms']:8.1f} | {r['model_step_ms']:10.1f} "
            f"{r['model_exposed_ms']:8.1f} {r['error']:+7.0%}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--ranks", type=cliargs.int_range(1, 64), nargs="+",
                    default=[2, 4],
                    help="rank counts to run")
    ap.add_argument("--transport", choices=("shm", "sockets"), default="shm",
                    help="how the ranks talk")
    ap.add_argument("--steps", type=cliargs.positive_int,
                    default=R.Config.steps,
                    help="training steps per setting")
    # (argparse formats help with %: a literal percent sign is %%)
    ap.add_argument("--check", action="store_true",
                    help=f"exit 1 if a prediction misses by > "
                         f"{MAX_ERROR * 100:.0f}%%")
    ap.add_argument("--json", type=Path, help="write the records here")
    args = ap.parse_args(argv)
    cfg = R.Config(steps=args.steps)
    records = []
    print(f"{cpu_name()}, {cores()} cores; transport {args.transport}; "
          f"model {len(cfg.widths) - 1} x {cfg.widths[1]} x {cfg.widths[1]} "
          f"float64, batch {cfg.batch_per_rank} per rank")
    for n in args.ranks:
        before = load_average()
        rec = wk.launch(R.measure, n, args=(cfg,), transport=args.transport,
                        timeout=600, shm_bytes=64 << 20)[0]
        rec.update(transport=args.transport, loadavg=before,
                   loadavg_after=load_average(), cpu=cpu_name())
        records.append(rec)
        print("\n".join(table(rec)), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": " ".join(
            ["python", "benchmarks/overlap.py"] + (argv or sys.argv[1:])),
            "records": records}) + "\n")
    worst = max(abs(r["error"]) for rec in records
                for r in A.table_rows(rec))
    print(f"worst model error {worst:.0%} (limit {MAX_ERROR:.0%})")
    if args.check and worst > MAX_ERROR:
        print("CHECK FAILED: the timeline model misses a measured step by "
              f"more than {MAX_ERROR:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
