"""Train, fail, restart from the last complete checkpoint (Chapter 8).

:func:`train` is one attempt on one rank: resume from the newest complete
checkpoint (if any), train to the end, checkpoint every ``every`` steps
asynchronously, and report what happened (a failure is reported, not
raised, with the step it hit). :func:`run_with_restarts` is the agent
around it (what TorchElastic's agent or a scheduler's requeue does):
launch the ranks, and while an attempt fails, launch again, on the same
number of ranks or, elastic, on fewer. Faults are armed in the first
attempt only (:mod:`warmup_kit.failures.inject`): a rank killed at a step
or in the middle of writing its shard.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from warmup_kit.comm.base import Comm
from warmup_kit.comm.launch import launch
from warmup_kit.errors import CollectiveTimeout, PeerLost, RankDied
from warmup_kit.failures import inject
from warmup_kit.failures.checkpoint import Checkpointer
from warmup_kit.failures.job import Job, JobConfig, agree_token, digest
from warmup_kit.failures.verify import NothingVerifies


def train(comm: Comm, cfg: JobConfig, root: str | Path,
          faults: Sequence[dict] = (), fresh: bool = False) -> dict:
    """One attempt of the job on this rank.

    Args:
        faults: each ``{"point": name, "rank": r, "action": "kill", ...}``
            (the rest of the keys are the point's match, e.g. ``step=9``);
            armed on rank ``r`` only.
        fresh: when checkpoints were committed under ``root`` and none
            verifies, start from step 0 (``started_fresh`` says so);
            without it the attempt refuses (``refused``), never ok.

    Returns:
        ``ok``, ``resumed_from``, ``skipped`` (newer checkpoints not
        loaded, with why), ``started_fresh``, ``steps_run``, ``saves``
        (this rank's save history); when ``ok``: the final parameters'
        ``digest`` and ``params``; otherwise ``error``, ``peer`` and
        ``failed_at``, and ``refused`` (true when nothing verified).
    """
    for f in faults:
        f = dict(f)
        if f.pop("rank") == comm.rank:
            inject.arm(f.pop("point"), f.pop("action", "kill"), **f)
    job = step = ckpt = None
    out: dict = {"rank": comm.rank, "world": comm.size, "ok": False}
    try:
        token = agree_token(comm, cfg.timeout)
        writer = agree_token(comm, cfg.timeout)     # this job's nonce
        job = Job(cfg, comm)
        start, skipped = job.resume(Path(root), fresh=fresh)
        out.update(resumed_from=start, skipped=[
            {"step": f.step, "problem": f.problem} for f in skipped],
            started_fresh=start == 0 and any(f.committed for f in skipped))
        ckpt = Checkpointer(root, comm.rank, comm.size, token,
                            writer=writer, commit_timeout_s=cfg.timeout)
        out["saves"] = ckpt.history
        try:
            for step in range(start, cfg.steps):
                inject.point("train.step", rank=comm.rank, step=step)
                job.step()
                ckpt.steps_done += 1
                if job.step_count % cfg.every == 0 and \
                        job.step_count < cfg.steps:
                    ckpt.save(job.step_count, *job.state())
            ckpt.close(cfg.timeout)
        finally:
            out["steps_run"] = 0 if job is None else job.step_count - start
        final = job.full_params()
        out.update(ok=True, digest=digest(final), params=final.tolist(),
                   losses=job.losses)
    except NothingVerifies as exc:
        out.update(error=f"{type(exc).__name__}: {exc}", refused=True,
                   peer=None, failed_at=None)
    except (PeerLost, CollectiveTimeout, TimeoutError, RuntimeError) as exc:
        out.update(error=f"{type(exc).__name__}: {exc}",
                   peer=getattr(exc, "peer", None), failed_at=step)
        if ckpt is not None:           # a save in flight may still commit
            try:
                ckpt.close(timeout=2.0)
            except Exception:  # noqa: BLE001 - the save is abandoned
                pass
    finally:
        inject.disarm_all()
    return out


def run_with_restarts(cfg: JobConfig, world: int, root: str | Path, *,
                      faults: Sequence[dict] = (), transport: str = "sockets",
                      max_restarts: int = 3, elastic_world: int | None = None,
                      timeout: float = 120.0, fresh: bool = False) -> dict:
    """Run the job to the end, restarting after each failed attempt.

    Args:
        faults: armed in the first attempt only (see :func:`train`).
        elastic_world: restart on this many ranks instead of ``world``
            (same global batch: each rank's shard grows).
        fresh: passed to every attempt's :func:`train`: start from step 0
            when no committed checkpoint verifies (else that refuses).

    Raises:
        NothingVerifies: an attempt refused (every committed checkpoint is
            corrupt and not ``fresh``); restarting cannot help.
        RuntimeError: every attempt failed.

    Returns:
        ``attempts`` (one dict per attempt: ``world``, ``resumed_from``,
        ``failed`` and ``culprit`` or the results), ``final`` (rank 0's
        result of the attempt that finished), ``restarts``.
    """
    attempts = []
    for attempt in range(max_restarts + 1):
        w = world if attempt == 0 or elastic_world is None else elastic_world
        t0 = time.monotonic()
        outs = launch(train, w, args=(cfg, str(root),
                                      tuple(faults) if attempt == 0 else (),
                                      fresh),
                      transport=transport, timeout=timeout,
                      return_exceptions=True)
        rec = {"attempt": attempt, "world": w,
               "elapsed_s": time.monotonic() - t0,
               "ranks": [_summary(r, o) for r, o in enumerate(outs)]}
        rec["resumed_from"] = next((o["resumed_from"] for o in outs
                                    if isinstance(o, dict) and
                                    "resumed_from" in o), None)
        attempts.append(rec)
        if all(isinstance(o, dict) and o["ok"] for o in outs):
            return {"attempts": attempts, "final": outs[0],
                    "restarts": attempt}
        refusal = next((o["error"] for o in outs if isinstance(o, dict)
                        and o.get("refused")), None)
        if refusal is not None:
            raise NothingVerifies(refusal.split(": ", 1)[1])
        rec["culprit"] = culprit(outs)
    raise RuntimeError(f"the job failed {max_restarts + 1} times: "
                       f"{attempts[-1]}")


def _summary(rank: int, out) -> dict:
    if isinstance(out, BaseException):
        return {"rank": rank, "ok": False,
                "error": f"{type(out).__name__}: {out}".splitlines()[0],
                "died": isinstance(out, RankDied)}
    keep = ("ok", "resumed_from", "started_fresh", "steps_run", "failed_at",
            "error", "peer", "refused", "digest")
    return {"rank": rank, **{k: out[k] for k in keep if k in out}}


def culprit(outs) -> int | None:
    """The rank to blame for a failed attempt: a rank that died, else the
    rank most survivors name."""
    dead = [r for r, o in enumerate(outs) if isinstance(o, RankDied)]
    if dead:
        return dead[0]
    named = [o.get("peer") for o in outs if isinstance(o, dict)
             and o.get("peer") is not None]
    return max(set(named), key=named.count) if named else None


def uninterrupted(cfg: JobConfig, world: int, root: str | Path, *,
                  transport: str = "sockets") -> dict:
    """The reference: the same job, never failing, in an empty root."""
    return run_with_restarts(replace(cfg), world, root, transport=transport,
                             max_restarts=0)["final"]
