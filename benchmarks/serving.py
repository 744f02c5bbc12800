"""Serving on real ranks: tensor-parallel decode, an MoE layer, a KV hand-off.

Usage::

    python benchmarks/serving.py --check                       # 2 and 4 ranks
    python benchmarks/serving.py --transports sockets --ranks 2
    python benchmarks/serving.py --json book/data/serving.json  # Chapter 9

For each transport (TCP sockets, shared memory, MPI through ``mpiexec``)
and each rank count N, three jobs (:mod:`warmup_kit.serving`):

* **TP decode**: the toy decoder (4 layers, hidden 256, 8 query heads over
  2 KV heads, float64) split over N ranks decodes 4 prompts greedily, two
  all-reduces per layer, once per all-reduce algorithm (ring, the
  default, and recursive doubling), interleaved with lone all-reduces of a
  sweep of sizes; the table shows the median decode step split into
  compute and communication, beside the model: measured compute plus
  ``2 layers x`` the all-reduce cost of the host model
  (:mod:`warmup_kit.measure.fit_host`) fitted to the sweep's all-reduces
  called after the same compute (and, for comparison, back to back);
* **MoE**: a top-2 layer of 8 experts over N ranks, tokens dispatched and
  combined with the uneven all-to-all; bytes counted by the transport
  beside the exact bytes of the routing and the uniform-routing formula;
* **KV hand-off**: N/2 prefill ranks hand their KV shards to N/2 decode
  ranks by point-to-point; bytes and time, and the decode group's own
  prefill for comparison.

Every job checks its result first (tokens equal single-process decoding,
MoE output equal the dense layer, bytes equal their formulas). ``--check``
exits 1 if one fails or if the model misses a measured decode step by
more than 30%. Timings on a shared machine are noisy (the load average is
printed): run it again before believing a miss. Under ``mpiexec`` with
``--worker`` it runs the jobs of one MPI row and prints them as JSON.
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
from warmup_kit.comm.mpirun import launched_by_mpi, run_mpi  # noqa: E402
from warmup_kit.machine import cores, cpu_name, load_average  # noqa: E402
from warmup_kit.serving import handoff as HO  # noqa: E402
from warmup_kit.serving import moe_layer as MO  # noqa: E402
from warmup_kit.serving import run as R  # noqa: E402
from warmup_kit.serving.models.experts import (  # noqa: E402
    expected_dispatch_bytes)
from warmup_kit.serving.models.kv_cache import kv_split  # noqa: E402

MAX_ERROR = 0.30
TIMEOUT_S = 600


def jobs(comm, cfg: R.RunConfig) -> tuple:
    """The three jobs on this rank: (TP record or None, MoE facts, hand-off
    facts)."""
    tp = R.measure(comm, cfg)
    moe = MO.run_job(comm, MO.MoEConfig())
    ho = HO.run_job(comm, HO.HandoffConfig()) if comm.size % 2 == 0 else None
    return tp, moe, ho


def worker(cfg: R.RunConfig) -> int:
    """One MPI row: run under mpiexec, print the record on rank 0."""
    from mpi4py import MPI
    comm = wk.MPIComm()
    tp, moe, ho = jobs(comm, cfg)
    every = MPI.COMM_WORLD.gather((moe, ho), root=0)
    comm.close()
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps({"tp": tp, "moe": [m for m, _ in every],
                          "handoff": [h for _, h in every if h]}))
    return 0


def run_row(transport: str, n: int, cfg: R.RunConfig) -> dict:
    before = load_average()
    if transport == "mpi":
        rec = run_mpi(str(Path(__file__).resolve()), n, args=["--worker"],
                      timeout=TIMEOUT_S)
    else:
        out = wk.launch(jobs, n, args=(cfg,), transport=transport,
                        timeout=TIMEOUT_S)
        rec = {"tp": out[0][0], "moe": [m for _, m, _ in out],
               "handoff": [h for _, _, h in out if h]}
    rec.update(transport=transport, ranks=n, loadavg=before,
               loadavg_after=load_average(), cores=cores())
    # the outputs are checked here and not stored (they are 99% of it)
    rec["moe_matches_reference"] = MO.matches_reference(rec["moe"],
                                                        MO.MoEConfig())
    for r in rec["moe"]:
        r.pop("output")
    return rec


def checks(rec: dict) -> list[str]:
    """What must hold whatever the timings; each failure as a line."""
    bad = []
    n, t = rec["ranks"], rec["transport"]
    for r in R.compare(rec["tp"]):
        if not r["tokens_equal"]:
            bad.append(f"{t} N={n} {r['algorithm']}: tokens differ from "
                       "single-process decoding")
        if r["bytes_per_step"] != [r["formula_bytes_per_step"]] or \
                r["calls_per_step"] != [2 * rec["tp"]["config"]["toy"][
                    "layers"]]:
            bad.append(f"{t} N={n} {r['algorithm']}: bytes per step "
                       f"{r['bytes_per_step']} != formula "
                       f"{r['formula_bytes_per_step']}")
    if not all(rec["tp"]["tokens_same_on_every_rank"].values()):
        bad.append(f"{t} N={n}: ranks generated different tokens")
    if not rec["moe_matches_reference"]:
        bad.append(f"{t} N={n}: MoE output differs from the dense layer")
    for r in MO.byte_rows(rec["moe"]):
        if (r["dispatch_bytes"], r["combine_bytes"]) != (
                r["dispatch_formula"], r["combine_formula"]):
            bad.append(f"{t} N={n} rank {r['rank']}: MoE bytes "
                       f"{r['dispatch_bytes']}/{r['combine_bytes']} != "
                       f"{r['dispatch_formula']}/{r['combine_formula']}")
    hcfg = HO.HandoffConfig()
    for r in HO.rows(rec["handoff"], hcfg):
        per_token = kv_split(hcfg.toy.shape(), r["tp"], 8)
        if not r["tokens_equal"]:
            bad.append(f"{t} N={n}: decode after the hand-off differs")
        if r["bytes"] != [r["formula_bytes"]] or \
                per_token.per_rank_bytes_per_token * hcfg.batch * \
                hcfg.prompt + hcfg.batch * 8 != r["formula_bytes"]:
            bad.append(f"{t} N={n}: hand-off bytes {r['bytes']} != "
                       f"{r['formula_bytes']}")
    return bad


def table(rec: dict) -> list[str]:
    n, t = rec["ranks"], rec["transport"]
    tp = rec["tp"]
    fit = R.host_fit(tp).as_dict()
    lines = [f"N = {n} ranks on {rec['cores']} cores ({t}); load average "
             f"{rec['loadavg']:.1f} before, {rec['loadavg_after']:.1f} after",
             f"  TP decode, batch {tp['config']['batch']}, "
             f"{R.RunConfig().message_bytes} B per all-reduce; host model "
             f"(after compute): call {fit['call_us']:.0f} us, alpha "
             f"{fit['alpha_us']:.0f} us, beta {fit['beta_ns_per_byte']:.3f} "
             f"ns/B (rms {fit['rms_rel_error']:.0%})",
             f"  {'algorithm':>18} {'step ms':>8} {'compute':>8} "
             f"{'comm':>7} {'lag':>6} | {'model':>7} {'error':>6} "
             f"{'latency':>8} | {'b2b model':>9} {'error':>6}"]
    hot = {r["algorithm"]: r for r in R.compare(tp, "back_to_back")}
    for r in R.compare(tp):
        h = hot[r["algorithm"]]
        lines.append(
            f"  {r['algorithm']:>18} {r['step_ms']:8.2f} "
            f"{r['compute_ms']:8.2f} {r['comm_ms']:7.2f} {r['lag_ms']:6.2f} "
            f"| {r['model_step_ms']:7.2f} {r['error']:+6.0%} "
            f"{r['latency_share']:8.0%} | {h['model_step_ms']:9.2f} "
            f"{h['error']:+6.0%}")
    mcfg = MO.MoEConfig()
    rows = MO.byte_rows(rec["moe"])
    exp = expected_dispatch_bytes(mcfg.tokens_per_rank, mcfg.hidden,
                                  mcfg.top_k, rows[0]["ep"], bytes_per=8)
    pad = expected_dispatch_bytes(mcfg.tokens_per_rank, mcfg.hidden,
                                  mcfg.top_k, rows[0]["ep"], bytes_per=8,
                                  capacity_factor=mcfg.capacity_factor,
                                  padded=True)
    lines.append(f"  MoE (top-{mcfg.top_k} of {mcfg.experts}, "
                 f"{mcfg.tokens_per_rank} tokens/rank, capacity "
                 f"{mcfg.capacity_factor}): dispatch bytes per rank "
                 f"measured / routing formula; uniform {exp:,.0f}, padded "
                 f"{pad:,.0f}")
    lines.append("    " + ", ".join(
        f"r{r['rank']} {r['dispatch_bytes']:,}/{r['dispatch_formula']:,} "
        f"({r['dropped']} dropped)" for r in rows))
    for r in HO.rows(rec["handoff"], HO.HandoffConfig()):
        lines.append(f"  KV hand-off to decode rank {r['rank']} (tp "
                     f"{r['tp']}): {r['bytes'][0]:,} B (formula "
                     f"{r['formula_bytes']:,}) in {r['transfer_s'] * 1e3:.2f}"
                     f" ms ({r['gbps']:.2f} GB/s); recompute "
                     f"{r['recompute_s'] * 1e3:.1f} ms")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--ranks", type=cliargs.int_range(2, 64), nargs="+",
                    default=[2, 4],
                    help="rank counts to run")
    ap.add_argument("--transports", nargs="+", default=["sockets", "shm",
                                                        "mpi"],
                    choices=("sockets", "shm", "mpi"),
                    help="how the ranks talk (mpi: under mpiexec)")
    ap.add_argument("--check", action="store_true",
                    help=f"exit 1 if a check fails or the model misses a "
                         f"decode step by > {MAX_ERROR * 100:.0f}%%")
    ap.add_argument("--json", type=Path, help="write the records here")
    ap.add_argument("--worker", action="store_true",
                    help="(internal) run one row under mpiexec")
    args = ap.parse_args(argv)
    cfg = R.RunConfig()
    if args.worker:
        if not launched_by_mpi():
            ap.error("--worker runs under mpiexec")
        return worker(cfg)
    print(f"{cpu_name()}, {cores()} cores")
    records, bad = [], []
    for n in args.ranks:
        for t in args.transports:
            rec = run_row(t, n, cfg)
            records.append(rec)
            print("\n".join(table(rec)), flush=True)
            bad += checks(rec)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "command": " ".join(["python", "benchmarks/serving.py"]
                                + (argv if argv is not None
                                   else sys.argv[1:])),
            "machine": cpu_name(), "cores": cores(),
            "records": records}) + "\n")
    worst = max(abs(r["error"]) for rec in records
                for r in R.compare(rec["tp"]))
    print(f"worst model error {worst:.0%} (limit {MAX_ERROR:.0%}); "
          f"{len(bad)} failed checks")
    for line in bad:
        print("CHECK FAILED:", line)
    if args.check and (bad or worst > MAX_ERROR):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
