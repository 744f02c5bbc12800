"""The ring/tree crossover measured on this machine, stored for the book.

Book, Chapter 4 ("the crossover, measured"). One command runs the
nccl-tests-style sweep of :mod:`warmup_kit.bench` under the venv's
``mpiexec`` for each rank count, and writes one small JSON file whose
``label`` says where and when it was measured (CPU model, cores, MPICH
version, date, N, whether the ranks share cores)::

    python -m warmup_kit.measure.crossover --ranks 2 4 --out book/data/crossover.json

Each N is one ``warmup-bench`` job, exactly::

    mpiexec -n N python -m mpi4py -m warmup_kit.bench -b 8 -e 4M -f 2 \\
        -n 40 -w 5 --algorithms ring,tree,double_tree,recursive_doubling,\\
rabenseifner,mpi --json FILE

Only the medians are kept (not every iteration), so the file stays small.
:func:`load` reads it back; :func:`crossovers` fits alpha-beta-gamma
(:func:`warmup_kit.measure.fit.fit`) per N and returns the ring/tree crossover
predicted by the fitted model and the one measured.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from warmup_kit import cliargs
from warmup_kit.machine import cpu_name
from warmup_kit.measure import fit as F
from warmup_kit.comm.mpirun import MPICH_YIELD_ENV, find_mpiexec

ALGORITHMS = ("ring", "tree", "double_tree", "recursive_doubling",
              "rabenseifner", "mpi")
SWEEP = ("-b", "8", "-e", "4M", "-f", "2", "-n", "40", "-w", "5")
KEEP = ("collective", "ranks", "size", "type", "algorithm", "time_us",
        "spread_pct", "algbw_gbps", "busbw_gbps", "wrong")


def bench_args(algorithms=ALGORITHMS, sweep=SWEEP) -> list[str]:
    """The ``warmup-bench`` flags of one stored job."""
    return [*sweep, "--algorithms", ",".join(algorithms)]


def label(ranks: list[int], library: str) -> dict:
    """Machine facts for a stored measurement (no host name)."""
    cores = os.cpu_count() or 1
    return {"date": _dt.date.today().isoformat(), "cpu": cpu_name(),
            "cores": cores, "mpi_library": library,
            "python": platform.python_version(), "ranks": ranks,
            "load_average_1min_before": round(os.getloadavg()[0], 2),
            "shared_cores": {str(n): n > cores for n in ranks},
            "note": (f"all ranks on one host over shared memory; N > "
                     f"{cores} ranks share the {cores} cores (MPICH told "
                     f"to yield: {MPICH_YIELD_ENV})")}


def run_job(n: int, args: list[str], timeout: float = 900.0) -> dict:
    """One ``warmup-bench`` job on ``n`` MPI ranks; its JSON output."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [find_mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py",
               "-m", "warmup_kit.bench", "--json", str(out), *args]
        proc = subprocess.run(cmd, env={**os.environ, **MPICH_YIELD_ENV},
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode})"
                               f":\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def record(ranks: list[int], args: list[str] | None = None) -> dict:
    """Measure every N in ``ranks``; the labelled document to store."""
    args = bench_args() if args is None else args
    tag = label(list(ranks), "")
    rows, library = [], ""
    for n in ranks:
        job = run_job(n, args)
        library = " ".join(job["header"]["machine"].rsplit(", ", 1)[-1]
                           .split())
        rows += [{k: r[k] for k in KEEP} for r in job["rows"]]
    tag["mpi_library"] = library
    return {"label": tag,
            "command": "python -m warmup_kit.measure.crossover --ranks "
                       + " ".join(map(str, ranks)),
            "bench_args": args, "rows": rows}


def load(path: str | os.PathLike) -> dict:
    """A stored measurement (see :func:`record`)."""
    with open(path) as f:
        return json.load(f)


def crossovers(doc: dict, a: str = "ring", b: str = "tree",
               min_bytes: int = 1 << 10) -> list[dict]:
    """Per N: the fitted model and where ``a`` overtakes ``b``.

    Returns rows with ``ranks``, ``fit`` (:class:`warmup_kit.measure.fit.Fit`),
    ``predicted`` and ``measured`` crossover sizes in bytes (None: no
    crossover in the range).
    """
    out = []
    for n in doc["label"]["ranks"]:
        rows = [r for r in doc["rows"] if r["ranks"] == n]
        fitted = F.fit(rows, min_bytes=min_bytes)
        out.append({"ranks": n, "fit": fitted,
                    "predicted": F.crossover_predicted(a, b, n, fitted),
                    "measured": F.crossover_measured(rows, a, b, n)})
    return out


def main(argv=None) -> int:
    """``python -m warmup_kit.measure.crossover --ranks 2 4 --out FILE``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=cliargs.int_range(2, 64), nargs="+",
                   default=[2, 4])
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    doc = record(args.ranks)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for c in crossovers(doc):
        print(f"N = {c['ranks']}: ring overtakes tree, predicted "
              f"{c['predicted']}, measured {c['measured']}")
    return 1 if any(r["wrong"] for r in doc["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
