"""Jobs on the emulated cluster: ``python -m warmup_kit.run`` on every node.

Each node's agent is started inside the node (its namespaces) with node 0's
address as the rendezvous master and a fresh job secret in
``WARMUP_KIT_SECRET``: the secret reaches the nodes through their
environment, as a scheduler would hand it to real hosts, never over the
cluster's network.
"""
from __future__ import annotations

import subprocess
import sys
from typing import Sequence

from warmup_kit.comm.mesh import SECRET_ENV, new_secret
from warmup_kit.comm.rendezvous import TRANSPORTS


def agent_argv(cl, node, argv: Sequence[str], transport: str, port: int,
               timeout: float) -> list[str]:
    """The ``warmup_kit.run`` command line of ``node``."""
    return [sys.executable, "-m", "warmup_kit.run",
            "--nnodes", str(len(cl.nodes)), "--node-rank", str(node.index),
            "--nproc-per-node", str(cl.ranks_per_node),
            "--master-addr", cl.nodes[0].address, "--master-port", str(port),
            "--local-addr", node.address, "--transport", transport,
            "--timeout", f"{timeout:g}", *map(str, argv)]


def run_job(cl, argv: Sequence[str], *, timeout: float = 300.0,
            transport: str = "hybrid", port: int = 29400,
            env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Run ``argv`` (a script and its arguments) as one job over every node
    of ``cl``; per node, its agent's CompletedProcess (text output). The
    agents get ``timeout`` minus a margin, and are killed past ``timeout``.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got "
                         f"{transport!r}")
    if not argv:
        raise ValueError("run_job needs a script to run")
    env = dict(env or {}, **{SECRET_ENV: new_secret().hex()})
    inner = max(timeout - 15, timeout * 0.8)
    argvs = [agent_argv(cl, n, argv, transport, port, inner)
             for n in cl.nodes]
    procs = []
    try:
        for n, a in zip(cl.nodes, argvs):
            procs.append(cl.popen(n, a, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True))
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        raise
    return cl.wait_all(procs, argvs, timeout)
