"""Goodput at scale: how often to checkpoint when failures are the steady
state (book, Chapter 8).

A synchronous job on N nodes fails whenever any node does: with
independent failures at rate 1/M_node per node, the job's mean time
between failures is ``M = M_node / N``. Every ``tau`` seconds of work it
writes a checkpoint that stalls it for ``delta`` seconds; a failure loses
the work since the last complete checkpoint and costs a restart ``R``
(detect, replace the node, reload), during which another failure may
strike. With hot spares a failed node is swapped at once; without one the
job waits for a repair.

* :func:`young` and :func:`daly`: the first-order optimum interval
  (Young 1974, ``sqrt(2 delta M)``) and Daly's higher-order one (Daly
  2006), and :func:`exact_optimum`, the minimum of Daly's cost
  function itself;
* :func:`expected_wall`: the expected run time of that model, exactly
  (Daly 2006's cost function for whole segments; the last, partial segment writes
  no checkpoint);
* :func:`simulate`: a Monte Carlo run of the same job, failure by failure,
  with a finite pool of hot spares if asked, vectorised over intervals and
  replications with common random numbers (every interval sees the same
  failure times), so that the goodput curve's shape is sharper than its
  level; :func:`sim_optimum` reads the best interval off it, with a
  bootstrap error;
* :func:`nodes_in_repair` (Little's law: failures needing a repair per
  second times the turnaround) and :func:`spares_table`: goodput with and
  without hot spares when failed nodes take a repair turnaround to come
  back, as on clusters without a cloud's pool behind them.

Nothing here imports a transport: it is a model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

HOUR = 3600.0


def young(delta_s: float, mtbf_s: float) -> float:
    """Young's optimum checkpoint interval ``sqrt(2 delta M)`` (seconds of
    work between checkpoints)."""
    _check(delta_s, mtbf_s)
    return math.sqrt(2 * delta_s * mtbf_s)


def daly(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order estimate (2006): for ``delta < 2M``,
    ``sqrt(2 delta M) [1 + sqrt(delta/2M)/3 + (delta/2M)/9] - delta``;
    otherwise ``M``."""
    _check(delta_s, mtbf_s)
    if delta_s >= 2 * mtbf_s:
        return mtbf_s
    x = delta_s / (2 * mtbf_s)
    return math.sqrt(2 * delta_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) \
        - delta_s


def exact_optimum(delta_s: float, mtbf_s: float) -> float:
    """The interval that minimises Daly's expected run time per unit of
    work, ``(exp((tau + delta)/M) - 1) / tau`` (it does not depend on the
    restart cost): the root of ``exp((tau+delta)/M) (tau/M - 1) + 1``,
    by bisection."""
    _check(delta_s, mtbf_s)
    M = mtbf_s

    def f(t: float) -> float:
        return math.exp((t + delta_s) / M) * (t / M - 1) + 1
    lo, hi = 1e-12 * M, M
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def expected_wall(tau_s, delta_s: float, mtbf_s: float, restart_s: float,
                  work_s: float):
    """Expected run time of ``work_s`` seconds of work (exponential
    failures, unlimited spares): per whole segment of ``tau + delta``,
    ``M e^(R/M) (e^((tau+delta)/M) - 1)`` (Daly 2006); the last,
    partial segment writes no checkpoint. ``tau_s`` may be an array."""
    tau = np.asarray(tau_s, dtype=float)
    M = mtbf_s
    n = np.ceil(work_s / tau - 1e-9)
    last = work_s - (n - 1) * tau
    k = M * math.exp(restart_s / M)
    return k * ((n - 1) * np.expm1((tau + delta_s) / M) + np.expm1(last / M))


def _check(delta_s: float, mtbf_s: float) -> None:
    if not (delta_s > 0 and mtbf_s > 0):
        raise ValueError(f"checkpoint cost and MTBF must be > 0, got "
                         f"{delta_s} and {mtbf_s}")


@dataclass(frozen=True)
class Scenario:
    """A job against its failures (seconds throughout).

    Attributes:
        mtbf_s: the job's mean time between failures (node MTBF / nodes).
        ckpt_s: the time a checkpoint stalls training (delta).
        restart_s: detection, rescheduling and reload after a failure (R).
        work_s: the work to do, failure-free.
        spares: hot spares (None: as many as needed, no wait).
        repair_s: how long a failed node takes to come back as a spare.
        needs_repair: the share of failures that take a node away for
            repair (a hardware fault); the others (a software bug, a
            hang) only restart the job on the same nodes.
    """

    mtbf_s: float
    ckpt_s: float
    restart_s: float
    work_s: float
    spares: int | None = None
    repair_s: float = 0.0
    needs_repair: float = 1.0

    @classmethod
    def of_nodes(cls, nodes: int, node_mtbf_s: float, **kw) -> "Scenario":
        """A job on ``nodes`` nodes that fail independently, each with mean
        time between failures ``node_mtbf_s``: the job's MTBF is
        ``node_mtbf_s / nodes`` (the other fields as keywords)."""
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        return cls(mtbf_s=node_mtbf_s / nodes, **kw)

    def __post_init__(self) -> None:
        _check(self.ckpt_s, self.mtbf_s)
        if self.restart_s < 0 or self.work_s <= 0 or self.repair_s < 0:
            raise ValueError("restart and repair must be >= 0, work > 0")
        if self.spares is not None and self.spares < 0:
            raise ValueError("spares must be >= 0 or None")
        if not 0.0 <= self.needs_repair <= 1.0:
            raise ValueError(f"needs_repair is a share in [0, 1], got "
                             f"{self.needs_repair}")


@dataclass
class SimResult:
    """Goodput per interval, per replication, and where the time went."""

    taus: np.ndarray              # (T,) intervals, seconds
    goodput: np.ndarray           # (T, reps) work / wall of each run
    parts: dict                   # name -> (T,) mean seconds per run
    failures: np.ndarray          # (T,) mean failures per run

    @property
    def mean(self) -> np.ndarray:
        return self.goodput.mean(axis=1)

    @property
    def stderr(self) -> np.ndarray:
        return self.goodput.std(axis=1, ddof=1) / math.sqrt(
            self.goodput.shape[1])


def simulate(s: Scenario, taus, reps: int = 200, seed: int = 0
             ) -> SimResult:
    """Monte Carlo runs of ``s`` for every interval in ``taus``.

    The run advances failure by failure: after a failure (or at the start)
    the job restarts (``restart_s``, unless it is the start), then works
    and checkpoints in segments of ``tau + ckpt_s`` until the next failure
    lands, losing the part of the segment in flight. Each failure that
    needs a repair (a share ``needs_repair`` of them, drawn at random)
    takes a spare: the one that is back from repair earliest; if none is,
    the job waits for it (failures of idle nodes are not counted).
    """
    taus = np.asarray(taus, dtype=float)
    if taus.ndim != 1 or np.any(taus <= 0):
        raise ValueError("taus must be positive seconds")
    rng = np.random.default_rng(seed)
    T = len(taus)
    tau = taus[:, None] * np.ones((1, reps))
    seg = tau + s.ckpt_s
    n_seg = np.ceil(s.work_s / tau - 1e-9)
    last = s.work_s - (n_seg - 1) * tau
    done = np.zeros((T, reps))            # whole segments committed
    wall = np.zeros((T, reps))
    finished = np.zeros((T, reps), bool)
    restart = np.zeros((T, reps), bool)   # the next stretch restarts first
    acc = {k: np.zeros((T, reps)) for k in ("checkpoint", "lost", "restart",
                                            "spare wait")}
    fails = np.zeros((T, reps))
    slots = (np.zeros((T, reps, s.spares)) if s.spares else None)
    while not finished.all():
        x = rng.exponential(s.mtbf_s, reps)[None, :] * np.ones((T, 1))
        live = ~finished
        r_need = np.where(restart, s.restart_s, 0.0)
        in_restart = live & (x < r_need)
        ok = live & ~in_restart
        avail = x - r_need
        t_end = (n_seg - done - 1) * seg + last
        fin = ok & (avail >= t_end)
        fail = ok & ~fin
        k = np.minimum(np.floor(avail / seg), n_seg - done - 1)
        k = np.where(fail, k, 0.0)
        done += k
        acc["checkpoint"] += k * s.ckpt_s + np.where(
            fin, (n_seg - done - 1) * s.ckpt_s, 0.0)
        acc["lost"] += np.where(fail, avail - k * seg, 0.0)
        acc["restart"] += np.where(in_restart, x, np.where(ok, r_need, 0.0))
        wall += np.where(fin, r_need + t_end, np.where(live, x, 0.0))
        finished |= fin
        failed = fail | in_restart
        fails += failed
        broken = failed                   # failures that take a node away
        if s.needs_repair < 1.0:          # the same draw for every interval
            broken = failed & (rng.random(reps)[None, :] < s.needs_repair)
        wait = _spare_wait(s, slots, wall, broken)
        wall += wait
        acc["spare wait"] += wait
        restart |= failed
    parts = {"work": np.full(T, s.work_s)}
    parts.update({k: v.mean(axis=1) for k, v in acc.items()})
    return SimResult(taus, s.work_s / wall, parts, fails.mean(axis=1))


def _spare_wait(s: Scenario, slots, wall, failed) -> np.ndarray:
    """Wait for a replacement node at each failure (and book the failed
    node's repair)."""
    if s.spares is None:
        return np.zeros_like(wall)
    if s.spares == 0:
        return np.where(failed, s.repair_s, 0.0)
    j = slots.argmin(axis=-1)
    ready = np.take_along_axis(slots, j[..., None], axis=-1)[..., 0]
    wait = np.where(failed, np.maximum(0.0, ready - wall), 0.0)
    back = np.where(failed, wall + s.repair_s, ready)
    np.put_along_axis(slots, j[..., None], back[..., None], axis=-1)
    return wait


def nodes_in_repair(mtbf_s: float, repair_s: float,
                    needs_repair: float = 1.0) -> float:
    """How many of a job's nodes are away for repair at any moment, on
    average, while it runs: Little's law, the rate at which failures send
    nodes to repair (``needs_repair / M``) times the turnaround. Fewer hot
    spares than this and the job waits for repairs."""
    _check(1.0, mtbf_s)
    if repair_s < 0 or not 0.0 <= needs_repair <= 1.0:
        raise ValueError("repair must be >= 0 and needs_repair in [0, 1]")
    return needs_repair * repair_s / mtbf_s


def spares_table(s: Scenario, repairs_s: dict, spares: list, tau_s: float,
                 reps: int = 100, seed: int = 0) -> list:
    """Goodput of job ``s`` at interval ``tau_s`` for every repair
    turnaround (``name -> seconds``) and pool of hot spares: one row per
    turnaround, with the mean goodput and its standard error for each
    entry of ``spares`` (``None``: a replacement is always at hand, as a
    cloud's pool gives) and the nodes away for repair on average. Every
    cell sees the same failure times."""
    rows = []
    for name, repair in repairs_s.items():
        cells = []
        for k in spares:
            r = simulate(Scenario(s.mtbf_s, s.ckpt_s, s.restart_s, s.work_s,
                                  spares=k, repair_s=repair,
                                  needs_repair=s.needs_repair),
                         [tau_s], reps=reps, seed=seed)
            cells.append({"spares": k, "goodput": float(r.mean[0]),
                          "stderr": float(r.stderr[0]),
                          "wait_s": float(r.parts["spare wait"][0])})
        rows.append({"turnaround": name, "repair_s": repair,
                     "in_repair": nodes_in_repair(s.mtbf_s, repair,
                                                  s.needs_repair),
                     "cells": cells})
    return rows


def sim_optimum(r: SimResult, boot: int = 200, seed: int = 1
                ) -> tuple[float, float]:
    """The best interval of a simulated goodput curve and its standard
    error: a parabola in log(tau) through the five points around the
    highest mean, refitted on bootstrap resamples of the replications."""
    rng = np.random.default_rng(seed)
    x = np.log(r.taus)
    reps = r.goodput.shape[1]

    def vertex(g: np.ndarray) -> float:
        i = int(np.clip(np.argmax(g), 2, len(g) - 3))
        a, b, _ = np.polyfit(x[i - 2:i + 3], g[i - 2:i + 3], 2)
        if a >= 0:                       # no maximum: the best point
            return float(r.taus[np.argmax(g)])
        return float(np.exp(np.clip(-b / (2 * a), x[0], x[-1])))
    best = vertex(r.mean)
    draws = [vertex(r.goodput[:, rng.integers(0, reps, reps)].mean(axis=1))
             for _ in range(boot)]
    return best, float(np.std(np.log(draws), ddof=1)) * best


def restart_budget(goodput: float, delta_s: float, mtbf_s: float) -> float:
    """The longest restart that still allows ``goodput`` at the best
    interval (long runs): solves ``tau / (M e^(R/M) (e^((tau+delta)/M) -
    1)) = goodput`` for R; negative if no restart is fast enough."""
    tau = exact_optimum(delta_s, mtbf_s)
    M = mtbf_s
    return M * math.log(tau / (goodput * M * math.expm1((tau + delta_s) /
                                                        M)))


def optimum_table(cases: dict, reps: int = 400, seed: int = 0) -> list:
    """For each case ``name -> (M, delta, R, work)``: Young's, Daly's and
    the exact optimum, the simulated one with its error, and the simulated
    goodput at each (the chapter's comparison)."""
    rows = []
    for name, (M, delta, R, work) in cases.items():
        taus = daly(delta, M) * 2.0 ** np.linspace(-1, 1, 17)
        sim = simulate(Scenario(M, delta, R, work), taus, reps=reps,
                       seed=seed)
        best, err = sim_optimum(sim)
        at = simulate(Scenario(M, delta, R, work),
                      [young(delta, M), daly(delta, M), best], reps=reps,
                      seed=seed)
        rows.append({"case": name, "mtbf_s": M, "ckpt_s": delta,
                     "restart_s": R, "work_s": work,
                     "young_s": young(delta, M), "daly_s": daly(delta, M),
                     "exact_s": exact_optimum(delta, M), "sim_s": best,
                     "sim_err_s": err, "goodput": dict(zip(
                         ("young", "daly", "sim"), at.mean.tolist())),
                     "goodput_err": float(at.stderr.max()), "result": sim})
    return rows
