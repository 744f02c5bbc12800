"""What was made, where to find it again, and how to remove exactly that.

Every cluster has a prefix ``wkc<pid>-<n>`` (the creating process's id and
a counter) carried by every namespace it makes, and a small registry file
``<prefix>.json`` under :func:`registry_dir`, written *before* the first
namespace exists. So whatever kills the creator (an exception, Ctrl-C,
SIGTERM, or SIGKILL, which no handler sees), ``python -m
warmup_kit.cluster down`` finds the leftovers by name and removes them and
nothing else: namespaces whose name does not carry a prefix of ours, or
whose creator is still alive, are left alone.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from warmup_kit.cluster import netns
from warmup_kit.proc import alive

PREFIX_RE = re.compile(r"^(wkc(\d+)-(\d+))-")


def registry_dir() -> Path:
    """``/run/warmup_kit/cluster`` for root, else a per-user /tmp folder."""
    base = Path("/run/warmup_kit/cluster") if os.geteuid() == 0 else Path(
        f"/tmp/warmup_kit-cluster-{os.getuid()}")
    base.mkdir(parents=True, exist_ok=True)
    return base


def record(prefix: str, info: dict) -> Path:
    """Write (or rewrite) the cluster's registry entry."""
    path = registry_dir() / f"{prefix}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=1))
    tmp.replace(path)
    return path


def entries() -> dict[str, dict]:
    """Every registered cluster, by prefix."""
    out = {}
    for p in sorted(registry_dir().glob("wkc*.json")):
        try:
            out[p.stem] = json.loads(p.read_text())
        except (OSError, ValueError):
            out[p.stem] = {"prefix": p.stem, "broken": True}
    return out


def owner_gone(prefix: str, info: dict | None = None,
               detached: bool = True) -> bool:
    """True if nobody holds this cluster any more: its creator died, or
    (with ``detached``) it was left up on purpose by ``up``."""
    info = info or {}
    if info.get("detached"):
        return detached
    m = PREFIX_RE.match(prefix + "-")
    pid = int(info.get("pid") or (m.group(2) if m else 0))
    return not pid or not alive(pid)


def building(prefix: str, info: dict | None = None) -> bool:
    """True if a live process is still building this cluster (its entry
    says so and its creator runs): nobody else may remove it yet."""
    info = info or {}
    if not info.get("building"):
        return False
    m = PREFIX_RE.match(prefix + "-")
    pid = int(info.get("pid") or (m.group(2) if m else 0))
    return alive(pid)


def unregistered() -> dict[str, list[str]]:
    """Namespaces with our prefix but no registry entry, by prefix."""
    known, out = set(entries()), {}
    for ns in netns.netns_list():
        m = PREFIX_RE.match(ns)
        if m and m.group(1) not in known:
            out.setdefault(m.group(1), []).append(ns)
    return out


def ours(prefix: str) -> list[str]:
    """The namespaces named with ``prefix``."""
    return [ns for ns in netns.netns_list() if ns.startswith(prefix + "-")]


def remove(prefix: str) -> list[str]:
    """Delete the namespaces of ``prefix`` and its registry entry; returns
    the namespaces removed."""
    gone = []
    for ns in ours(prefix):
        netns.delete_netns(ns)
        gone.append(ns)
    for suffix in (".json", ".hosts", ".enter", ".tmp"):
        try:
            (registry_dir() / f"{prefix}{suffix}").unlink()
        except FileNotFoundError:
            pass
    return gone


def sweep(force: bool = False, detached: bool = True,
          only: str | None = None) -> dict[str, list[str]]:
    """Remove every cluster of ours whose owner is gone (all, with
    ``force``; without ``detached``, those left up by ``up`` stay):
    registered ones and unregistered namespaces with our prefix; only the
    cluster ``only``, if given. One still being built (:func:`building`)
    is never removed, even with ``force``: its builder would go on adding
    namespaces that nothing records. Returns {prefix: namespaces removed}.
    """
    found = dict(entries())
    for ns in netns.netns_list():
        m = PREFIX_RE.match(ns)
        if m:
            found.setdefault(m.group(1), {})
    return {prefix: remove(prefix) for prefix, info in found.items()
            if (only is None or prefix == only)
            and not building(prefix, info)
            and (force or owner_gone(prefix, info, detached))}
