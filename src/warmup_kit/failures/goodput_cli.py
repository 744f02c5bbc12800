"""The simulated best checkpoint interval against Young's and Daly's
(Chapter 8's table), from the command line:

    python -m warmup_kit.failures.goodput_cli [--reps 400] [--seed 0] [--json]

Cases: Daly's three published ones (work 500 h, or 100 h at M = 15 min;
R = 10 min; delta = 5 min; he reports 117, 57 and 9.1 min) and Llama 3's
record (M = 54 days / 419, a 4 GB-per-GPU checkpoint at 2 TB/s, R assumed
10 min). Exit status 1 if the exact optimum or Daly's formula falls
outside three standard errors of the simulated one.
"""
from __future__ import annotations

import argparse
import json
import sys

from warmup_kit import cliargs
from warmup_kit.failures.models.goodput import HOUR, optimum_table
from warmup_kit.failures.models.published import llama3_ckpt_s, llama3_mtbf_s

MIN = 60.0
CASES = {"Daly, M = 24 h": (24 * HOUR, 5 * MIN, 10 * MIN, 500 * HOUR),
         "Daly, M = 6 h": (6 * HOUR, 5 * MIN, 10 * MIN, 500 * HOUR),
         "Daly, M = 15 min": (15 * MIN, 5 * MIN, 10 * MIN, 100 * HOUR),
         "Llama 3 (R = 10 min)": (llama3_mtbf_s(), llama3_ckpt_s(),
                                  10 * MIN, 54 * 24 * HOUR)}
PUBLISHED_MIN = {"Daly, M = 24 h": 117, "Daly, M = 6 h": 57,
                 "Daly, M = 15 min": 9.1}


def agrees(r: dict) -> bool:
    """The exact optimum and Daly's within 3 standard errors of the
    simulated one (Daly's with 0.3% of slack: it is an approximation)."""
    err = 3 * r["sim_err_s"]
    return (abs(r["sim_s"] - r["exact_s"]) < err and
            abs(r["sim_s"] - r["daly_s"]) < err + 0.003 * r["sim_s"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--reps", type=cliargs.positive_int, default=400,
                   help="simulated runs per interval")
    p.add_argument("--seed", type=cliargs.non_negative_int, default=0, help="of the failures")
    p.add_argument("--json", action="store_true", help="print JSON only")
    args = p.parse_args(argv)
    rows = optimum_table(CASES, reps=args.reps, seed=args.seed)
    for r in rows:
        r.pop("result")
        r["agrees"] = agrees(r)
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'case':<22}{'Young':>8}{'Daly':>8}{'exact':>8}"
              f"{'simulated':>16}{'paper':>7}   goodput % at Young/Daly/sim")
        for r in rows:
            sim = f"{r['sim_s'] / MIN:.2f} +- {r['sim_err_s'] / MIN:.2f}"
            g = " / ".join(f"{100 * r['goodput'][k]:.2f}"
                           for k in ("young", "daly", "sim"))
            print(f"{r['case']:<22}{r['young_s'] / MIN:>8.2f}"
                  f"{r['daly_s'] / MIN:>8.2f}{r['exact_s'] / MIN:>8.2f}"
                  f"{sim:>16}{PUBLISHED_MIN.get(r['case'], '-'):>7}   {g}"
                  f"{'' if r['agrees'] else '   OUTSIDE 3 SE'}")
        print("(minutes of work between checkpoints; simulated: 17 "
              f"intervals x {args.reps} runs, common failure times, "
              "bootstrap standard error)")
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
