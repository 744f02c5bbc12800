"""Fit alpha, beta and gamma to measured collectives; predict from schedules.

The round-synchronous alpha-beta-gamma model (Hockney 1994; Thakur,
Rabenseifner and Gropp 2005, section 3; book, Chapter 4): a schedule's
rounds run one after the other, and a round lasts

    alpha + beta * (bytes through the busiest rank's port this round)
          + gamma * (bytes the busiest reducer reduces this round),

so a whole schedule costs ``R * alpha + B * beta + G * gamma`` where R, B, G
(:func:`features`) come from the schedule alone, exactly, for any N and any
size (uneven chunks included). Given measured times of several algorithms
and sizes, :func:`fit` finds the non-negative alpha, beta, gamma that
minimise the *relative* error (small and large messages count alike), and
:func:`crossover_predicted` / :func:`crossover_measured` find where two
algorithms trade places.

beta and gamma can only be told apart if the schedules fitted reduce
different shares of the bytes they move. Ring, trees and Rabenseifner all
reduce exactly half of their port bytes (G = B/2) for any N, so rows of those
alone determine ``beta + gamma/2`` and nothing more: :func:`fit` then fits
that sum (as ``beta``, with ``gamma`` 0) and says so in
:attr:`Fit.gamma_in_beta`, instead of returning an arbitrary split. To split
them, time the reduction on its own and pass ``gamma_s_per_byte``.

This is the port model of :mod:`warmup_kit.model.simulate` reduced to one port per
rank (one host): linear in the three parameters, so a least-squares fit is
exact and the fitted values can be fed back into the topology model.

``python -m warmup_kit.measure.fit bench.json`` fits the rows of a
``warmup-bench --json`` file and prints the parameters and the model error.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from warmup_kit import cliargs
from warmup_kit.algorithms import build
from warmup_kit.schedule import chunk_sizes

ITEMSIZE = {"double": 8, "float": 4, "half": 2, "int8": 1, "uint8": 1,
            "int32": 4, "uint32": 4, "int64": 8, "uint64": 8}


@dataclass
class Fit:
    """Fitted parameters and how well they explain the measurements."""

    alpha_s: float              # latency per round
    beta_s_per_byte: float      # transfer time per byte (1 / bandwidth)
    gamma_s_per_byte: float     # reduction time per byte
    points: int = 0
    rms_rel_error: float = 0.0
    max_rel_error: float = 0.0
    ranks: int | None = None
    #: None: beta and gamma fitted apart. k: every row fitted reduces k
    #: bytes per port byte, so only beta + k * gamma is determined;
    #: ``beta_s_per_byte`` holds that sum and ``gamma_s_per_byte`` is 0.
    gamma_in_beta: float | None = None
    errors: list = field(default_factory=list, repr=False)

    @property
    def bandwidth_gbps(self) -> float:
        """1 / beta in GB/s."""
        return 1e-9 / self.beta_s_per_byte if self.beta_s_per_byte else math.inf

    def as_dict(self) -> dict:
        return {"alpha_us": self.alpha_s * 1e6,
                "beta_ns_per_byte": self.beta_s_per_byte * 1e9,
                "gamma_ns_per_byte": self.gamma_s_per_byte * 1e9,
                "bandwidth_gbps": self.bandwidth_gbps, "points": self.points,
                "rms_rel_error": self.rms_rel_error,
                "max_rel_error": self.max_rel_error, "ranks": self.ranks,
                "gamma_in_beta": self.gamma_in_beta}


@lru_cache(maxsize=256)
def schedule_rounds(collective: str, algorithm: str, n: int):
    s = build(collective, algorithm, n)
    out = []
    for rnd in s.rounds:
        out.append([(t.src, t.dst, t.chunks, t.reduce) for t in rnd])
    return s.chunks, out


def features(algorithm: str, nbytes: int, n: int, *,
             collective: str = "allreduce", itemsize: int = 8
             ) -> tuple[int, float, float]:
    """(R, B, G) of a schedule: rounds that move data, bytes on the critical
    path (per round, the busiest rank's larger of sent and received), and
    bytes reduced on it (per round, the busiest reducer's)."""
    chunks, rounds = schedule_rounds(collective, algorithm, n)
    sizes = np.asarray(chunk_sizes(nbytes // itemsize, chunks)) * itemsize
    R, B, G = 0, 0.0, 0.0
    for rnd in rounds:
        sent, recv, red = np.zeros(n), np.zeros(n), np.zeros(n)
        for src, dst, ch, reduce in rnd:
            b = float(sizes[list(ch)].sum())
            sent[src] += b
            recv[dst] += b
            if reduce:
                red[dst] += b
        peak = max(sent.max(), recv.max())
        if peak == 0:
            continue
        R += 1
        B += peak
        G += red.max()
    return R, B, G


def predict(algorithm: str, nbytes: int, n: int, fit: Fit, *,
            collective: str = "allreduce", itemsize: int = 8) -> float:
    """Predicted seconds of ``algorithm`` on ``n`` ranks for ``nbytes``."""
    R, B, G = features(algorithm, nbytes, n, collective=collective,
                       itemsize=itemsize)
    return (R * fit.alpha_s + B * fit.beta_s_per_byte
            + G * fit.gamma_s_per_byte)


def nnls_rel(X: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Minimise sum(((X p - t) / t)^2) over p >= 0 (3 unknowns: try every
    set of free parameters and keep the best feasible solution)."""
    A = X / t[:, None]
    y = np.ones_like(t)
    best, best_err = np.zeros(X.shape[1]), np.inf
    for k in range(1, X.shape[1] + 1):
        for free in itertools.combinations(range(X.shape[1]), k):
            cols = list(free)
            sol, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
            if (sol < 0).any():
                continue
            p = np.zeros(X.shape[1])
            p[cols] = sol
            err = float(np.sum((A @ p - y) ** 2))
            if err < best_err:
                best, best_err = p, err
    return best


def _usable(rows, min_bytes, max_bytes, algorithms, collective):
    for r in rows:
        if r["algorithm"] == "mpi" or r.get("collective", collective) != \
                collective:
            continue
        if algorithms and r["algorithm"] not in algorithms:
            continue
        if not min_bytes <= r["size"] <= max_bytes or r["time_us"] <= 0:
            continue
        yield r


def fit(rows: list[dict], *, collective: str = "allreduce",
        min_bytes: int = 1 << 10, max_bytes: int = 1 << 40,
        algorithms: tuple[str, ...] | None = None,
        gamma_s_per_byte: float | None = None) -> Fit:
    """Least-squares alpha, beta, gamma from measured rows.

    Args:
        rows: ``warmup-bench --json`` rows (``algorithm``, ``ranks``,
            ``size``, ``type``, ``time_us``); the library's rows ("mpi") are
            ignored: we fit our own schedules.
        collective: the rows' collective.
        min_bytes, max_bytes: the sizes to fit.
        algorithms: restrict to these algorithms (default: all ours).
        gamma_s_per_byte: hold gamma fixed (e.g. from a local ufunc timing)
            and fit alpha and beta only.

    Returns:
        A :class:`Fit`, with per-point relative errors in ``errors``. If
        every row reduces the same share k of its port bytes (G = k B) and
        gamma is not held, beta and gamma cannot be separated: the fit
        returns ``beta_s_per_byte`` = beta + k gamma, ``gamma_s_per_byte``
        = 0 and ``gamma_in_beta`` = k.
    """
    use = list(_usable(rows, min_bytes, max_bytes, algorithms, collective))
    if len(use) < 3:
        raise ValueError(f"need at least 3 measurements to fit, got "
                         f"{len(use)}")
    X = np.array([features(r["algorithm"], r["size"], r["ranks"],
                           collective=collective,
                           itemsize=ITEMSIZE.get(r.get("type"), 8))
                  for r in use], dtype=float)
    t = np.array([r["time_us"] * 1e-6 for r in use])
    k = reduced_share(X)
    if gamma_s_per_byte is None and k is None:
        a, b, g = nnls_rel(X, t)
    elif gamma_s_per_byte is None:          # only beta + k gamma is determined
        a, b = nnls_rel(X[:, :2], t)
        g = 0.0
    else:
        a, b = nnls_rel(X[:, :2], t - X[:, 2] * gamma_s_per_byte)
        g = gamma_s_per_byte
    out = Fit(float(a), float(b), float(g), points=len(use),
              ranks=use[0]["ranks"] if len({r["ranks"] for r in use}) == 1
              else None,
              gamma_in_beta=k if gamma_s_per_byte is None else None)
    out.errors = model_errors(use, out, collective=collective)
    rel = np.array([e["rel_error"] for e in out.errors])
    out.rms_rel_error = float(np.sqrt(np.mean(rel ** 2)))
    out.max_rel_error = float(np.abs(rel).max())
    return out


def reduced_share(X: np.ndarray, rtol: float = 1e-6) -> float | None:
    """k if every row of features ``X`` (columns R, B, G) reduces the same
    share k of its port bytes (G = k B: beta and gamma inseparable), else
    None."""
    moving = X[:, 1] > 0
    if not moving.any():
        return None
    share = X[moving, 2] / X[moving, 1]
    if share.max() - share.min() > rtol * max(share.max(), 1e-300):
        return None
    return float(share.mean())


def model_errors(rows: list[dict], fitted: Fit, *,
                 collective: str = "allreduce") -> list[dict]:
    """Measured against predicted, row by row (our algorithms only)."""
    out = []
    for r in rows:
        if r["algorithm"] == "mpi":
            continue
        pred = predict(r["algorithm"], r["size"], r["ranks"], fitted,
                       collective=collective,
                       itemsize=ITEMSIZE.get(r.get("type"), 8))
        meas = r["time_us"] * 1e-6
        out.append({"algorithm": r["algorithm"], "ranks": r["ranks"],
                    "size": r["size"], "measured_us": meas * 1e6,
                    "predicted_us": pred * 1e6,
                    "rel_error": (pred - meas) / meas})
    return out


# ------------------------------------------------------------- crossover
def crossover_predicted(a: str, b: str, n: int, fitted: Fit, *,
                        collective: str = "allreduce", itemsize: int = 8,
                        lo: int = 8, hi: int = 1 << 30) -> float | None:
    """Smallest size (bytes) above which ``a`` is predicted faster than
    ``b``; None if it never overtakes ``b`` in ``[lo, hi]`` or is faster
    all along."""
    def diff(v: float) -> float:
        nb = max(itemsize, int(v) // itemsize * itemsize)
        return (predict(a, nb, n, fitted, collective=collective,
                        itemsize=itemsize)
                - predict(b, nb, n, fitted, collective=collective,
                          itemsize=itemsize))
    grid = np.geomspace(lo, hi, 400)
    d = [diff(v) for v in grid]
    if d[0] <= 0:
        return None
    for i in range(1, len(grid)):
        if d[i] < 0:
            x0, x1 = grid[i - 1], grid[i]
            for _ in range(40):             # bisection in log space
                mid = math.sqrt(x0 * x1)
                if diff(mid) < 0:
                    x1 = mid
                else:
                    x0 = mid
            return float(x1)
    return None


def crossover_measured(rows: list[dict], a: str, b: str,
                       n: int | None = None) -> float | None:
    """Size (bytes, log-interpolated) where measured ``a`` overtakes ``b``:
    the last sign change of ``t_a - t_b`` from slower to faster."""
    ta = {r["size"]: r["time_us"] for r in rows if r["algorithm"] == a
          and (n is None or r["ranks"] == n)}
    tb = {r["size"]: r["time_us"] for r in rows if r["algorithm"] == b
          and (n is None or r["ranks"] == n)}
    sizes = sorted(set(ta) & set(tb))
    ratio = [math.log(ta[v] / tb[v]) for v in sizes]
    cross = None
    for i in range(1, len(sizes)):
        if ratio[i - 1] > 0 >= ratio[i]:
            x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
            f = ratio[i - 1] / (ratio[i - 1] - ratio[i])
            cross = math.exp(x0 + f * (x1 - x0))
    return cross


# ------------------------------------------------------------------- CLI
def _load(paths) -> list[dict]:
    rows = []
    for p in paths:
        with open(p) as f:
            data = json.load(f)
        rows.extend(data["rows"] if isinstance(data, dict) else data)
    return rows


#: a fit whose rms relative error is above this does not describe the data
MAX_RMS_ERROR = 0.25


def doubts(f: Fit) -> list[str]:
    """What this data cannot tell: a parameter the non-negative fit pinned
    at its bound (0), or an error too large for the parameters to mean
    anything. Empty when the fit can be trusted."""
    out = []
    names = [("alpha", f.alpha_s), ("beta", f.beta_s_per_byte)]
    if f.gamma_in_beta is None:
        names.append(("gamma", f.gamma_s_per_byte))
    for name, value in names:
        if value <= 0:
            out.append(f"{name} sits at its bound (0): not identifiable on "
                       "this data (add sizes or schedules that vary it)")
    if f.rms_rel_error > MAX_RMS_ERROR:
        out.append(f"rms error {f.rms_rel_error:.0%} is above "
                   f"{MAX_RMS_ERROR:.0%}: the model does not describe this "
                   "data; its parameters are not identifiable on it")
    return out


def main(argv=None) -> int:
    """``python -m warmup_kit.measure.fit bench.json [...]``: fit per rank count."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("json", nargs="+", help="warmup-bench --json files")
    p.add_argument("--min-bytes", type=cliargs.byte_size(0), default=1 << 10,
                   help="ignore rows below this size")
    p.add_argument("--max-bytes", type=cliargs.byte_size(1), default=1 << 40,
                   help="ignore rows above this size")
    p.add_argument("--algorithms", default=None,
                   help="fit only these, comma-separated (ring,tree,"
                        "double_tree,rabenseifner: beta + gamma/2 only)")
    args = p.parse_args(argv)
    only = tuple(args.algorithms.split(",")) if args.algorithms else None
    rows = _load(args.json)
    for n in sorted({r["ranks"] for r in rows}):
        mine = [r for r in rows if r["ranks"] == n]
        f = fit(mine, min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                algorithms=only)
        print(f"N = {n}: alpha = {f.alpha_s * 1e6:.2f} us, beta = "
              f"{f.beta_s_per_byte * 1e9:.4f} ns/B ({f.bandwidth_gbps:.2f} "
              f"GB/s), gamma = {f.gamma_s_per_byte * 1e9:.4f} ns/B; "
              f"{f.points} points, rms error {f.rms_rel_error:.1%}, max "
              f"{f.max_rel_error:.1%}")
        if f.gamma_in_beta is not None:
            print(f"  every schedule fitted reduces {f.gamma_in_beta:g} of "
                  f"its port bytes: beta above is beta + "
                  f"{f.gamma_in_beta:g} gamma")
        for doubt in doubts(f):
            print(f"  WARNING: {doubt}")
        if {"ring", "tree"} <= {r["algorithm"] for r in mine}:
            for a, b in (("ring", "tree"),):
                cp = crossover_predicted(a, b, n, f)
                cm = crossover_measured(mine, a, b)
                print(f"  {a} overtakes {b}: predicted "
                      f"{'-' if cp is None else f'{cp:,.0f} B'}, measured "
                      f"{'-' if cm is None else f'{cm:,.0f} B'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
