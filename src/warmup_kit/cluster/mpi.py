"""MPI across the emulated nodes: hydra's ssh launcher, without ssh.

``mpiexec -hostfile hosts -n 4 python labs/lab01.py`` starts a proxy on
each host of the hostfile by running ``ssh HOST COMMAND``. Here the
``ssh`` is a small script (:func:`write_enter_script`) that looks the host
up and runs the command inside that node's namespaces instead: its network
namespace, and a UTS namespace of its own whose host name is the node's
(MPICH groups ranks into nodes by host, so every node must have its own
name, or it would use shared memory between "nodes"). ``mpiexec`` itself
runs on node 0, so the proxies reach it at node 0's address (``-iface
eth0``).

MPICH's network module then runs over TCP on the veth links:
``UCX_TLS=tcp,self`` keeps UCX (the wheel's default netmod) from finding
that every rank is on one machine and using shared memory between nodes;
ranks on one node use MPICH's own shared memory, as on a real cluster. The
same settings go in the hydra environment variables :func:`mpi_env`
returns, so inside ``python -m warmup_kit.cluster exec node0 -- bash`` the
README's command works as written.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from warmup_kit.cluster import janitor
from warmup_kit.cluster.netns import in_ns
from warmup_kit.comm.mpirun import MPICH_YIELD_ENV, find_mpiexec

#: the netmod over the veth links, the ranks of a node by shared memory
NETWORK_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0",
               "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0"}


def write_enter_script(info: dict) -> Path:
    """The launcher script of the cluster described by ``info`` (a
    registry entry): ``enter [ssh options] HOST COMMAND...``."""
    cases = "\n".join(
        f"  {shlex.quote(n['name'])}|{n['address']}) "
        f"ns={shlex.quote(n['netns'])}; name={shlex.quote(n['name'])};;"
        for n in info["nodes"])
    text = f"""#!/bin/sh
# hydra's "ssh" for cluster {info['prefix']}: enter HOST's namespaces
while [ "${{1#-}}" != "$1" ]; do shift; done     # ssh options (-x)
host=$1; shift
case "$host" in
{cases}
  *) echo "enter: no node $host in cluster {info['prefix']}" >&2; exit 255;;
esac
exec {' '.join(in_ns('"$ns"', []))} unshare --uts -- \\
    sh -c 'hostname "$1" && eval "$2"' sh "$name" "$*"
"""
    path = janitor.registry_dir() / f"{info['prefix']}.enter"
    path.write_text(text)
    path.chmod(0o700)
    return path


def write_hostfile(info: dict, path: Path | None = None) -> Path:
    """``node0:R`` lines, one per node (R ranks per node)."""
    path = path or janitor.registry_dir() / f"{info['prefix']}.hosts"
    path.write_text("".join(f"{n['name']}:{info['ranks_per_node']}\n"
                            for n in info["nodes"]))
    return path


def mpi_env(info: dict) -> dict:
    """Environment that makes a plain ``mpiexec`` on node 0 use the enter
    script, the cluster's hostfile and the veth interface."""
    return {"HYDRA_LAUNCHER": "ssh",
            "HYDRA_LAUNCHER_EXEC": str(write_enter_script(info)),
            "HYDRA_HOST_FILE": str(write_hostfile(info)),
            "HYDRA_IFACE": "eth0", **NETWORK_ENV, **MPICH_YIELD_ENV}


def mpirun_argv(info: dict, argv: Sequence[str], n: int | None = None
                ) -> list[str]:
    """``mpiexec -hostfile ... -n N argv`` (``python`` is this Python)."""
    argv = [str(a) for a in argv]
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    total = n or len(info["nodes"]) * info["ranks_per_node"]
    return [find_mpiexec(), "-launcher", "ssh", "-launcher-exec",
            str(write_enter_script(info)), "-iface", "eth0", "-hostfile",
            str(write_hostfile(info)), "-n", str(total), *argv]


def mpirun(cl, argv: Sequence[str], *, timeout: float = 300.0,
           env: dict | None = None, n: int | None = None
           ) -> subprocess.CompletedProcess:
    """Run ``argv`` under mpiexec across ``cl``'s nodes, from node 0; the
    whole job is killed past ``timeout``."""
    if not argv:
        raise ValueError("mpirun needs a program to run")
    info = cl.info()
    full = mpirun_argv(info, argv, n)
    p = cl.popen(0, full, env={**mpi_env(info), **(env or {})},
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return cl.wait_all([p], [full], timeout)[0]
