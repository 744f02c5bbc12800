"""``python -m warmup_kit.doctor`` flags and the run: every error is one
line on stderr and exit status 2; a verdict exits 0 (healthy or unknown),
1 (degraded or broken)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from warmup_kit import cliargs
from warmup_kit.doctor import examine
from warmup_kit.doctor.errors import DoctorInputError
from warmup_kit.doctor.report import document, plot, table
from warmup_kit.doctor.setup import Flags
from warmup_kit.doctor.systems import known, parse_nic
from warmup_kit.model.hardware import FABRICS


def _nic(text: str) -> str:
    try:
        parse_nic(text)
    except DoctorInputError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) \
            from None
    return text


def _system(text: str) -> str:
    if text not in known():
        raise argparse.ArgumentTypeError(
            f"unknown system {text!r}; choose from {', '.join(known())}")
    return text


class _OneLine(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage block)."""

    def error(self, message: str):
        print(f"doctor: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _OneLine(
        prog="python -m warmup_kit.doctor",
        description="Is my busbw normal? Holds nccl-tests / rccl-tests "
                    "output (and NCCL_DEBUG=INFO lines, warmup-bench --json "
                    "files, emulated-cluster reports) against the model's "
                    "expected bus bandwidth; a verdict per run (healthy: "
                    "median measured/expected >= 0.8 over the largest "
                    "sizes; degraded >= 0.4; broken below, or any "
                    "#wrong > 0) and likely causes with their evidence.",
        epilog="Example: python -m warmup_kit.doctor all_reduce.log "
               "--nic 4x100G --json")
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="nccl-tests output, bench --json or cluster report")
    p.add_argument("--gpu", help="GPU name when the log has no '# Using "
                                 "devices' lines, e.g. 'NVIDIA H100 80GB "
                                 "HBM3'")
    p.add_argument("--gpus-per-node", type=cliargs.int_range(1, 1024),
                   help="ranks per node when the log does not say")
    p.add_argument("--nodes", type=cliargs.int_range(1, 100000),
                   help="nodes when the log does not say")
    p.add_argument("--nic", type=_nic, help="NICs per node x Gbit/s each, "
                   "e.g. 4x100G, 8x400G, or a fabric: "
                   f"{', '.join(sorted(FABRICS))}; default: the system's")
    p.add_argument("--system", type=_system,
                   help=f"hardware table key: {', '.join(known())}")
    p.add_argument("--json", action="store_true",
                   help="print the diagnosis as JSON instead of the table")
    p.add_argument("--plot", metavar="FILE",
                   help="write measured vs expected busbw to FILE (.png, "
                        ".svg, .pdf)")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.plot:
        parent = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(parent):
            p.error(f"--plot {args.plot}: no directory {parent}")
        ext = os.path.splitext(args.plot)[1].lower()
        if ext not in (".png", ".svg", ".pdf"):
            p.error(f"--plot {args.plot}: name a .png, .svg or .pdf file")
    flags = Flags(gpu=args.gpu, gpus_per_node=args.gpus_per_node,
                  nodes=args.nodes, nic=args.nic, system=args.system)
    try:
        ds = examine(args.logs, flags)
    except DoctorInputError as exc:
        print(f"doctor: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(document(ds), indent=1))
    else:
        print("\n\n".join(table(d) for d in ds))
    if args.plot:
        try:
            plot(ds, args.plot)
        except OSError as exc:
            print(f"doctor: error: --plot {args.plot}: {exc}",
                  file=sys.stderr)
            return 2
        if not args.json:
            print(f"figure: {args.plot}")
    return 1 if any(d.verdict in ("degraded", "broken") for d in ds) else 0
