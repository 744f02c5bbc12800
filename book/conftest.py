"""How nbval starts a notebook's kernel (``pytest --nbval book``).

nbval's own start picks the kernel's five TCP ports by binding and
releasing them, then launches the kernel, which binds them again; in
``make test`` that window is shared with pytest's socket transports,
which bind ephemeral ports all the time, and a kernel that finds a port
taken dies at start ("Kernel died before replying to kernel_info": every
cell of that notebook errors, as one clone run's success_criteria did).
Here each kernel talks over Unix sockets of its own (ZeroMQ's ``ipc``
transport, in a fresh temporary folder): no port to lose. Its stderr,
which nbval sends to /dev/null, goes to a file in that folder, so that a
kernel that still dies at start is started once more and, if it dies
again, the error says what it printed.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

try:
    import nbval.kernel as _nbk
    from jupyter_client.manager import KernelManager
except ImportError:                   # (no nbval: nothing to configure)
    _nbk = None

#: starts per kernel before its notebook fails
STARTS = 2


def start_kernel(startup_timeout=60, kernel_name="python", **kwargs):
    """nbval's ``start_new_kernel`` over ``ipc``: (manager, client)."""
    where = tempfile.mkdtemp(prefix="nbval-kernel-")
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    err = open(os.path.join(where, "stderr"), "w+", encoding="utf-8",
               errors="replace")
    atexit.register(err.close)
    kwargs["stderr"] = err
    for start in range(1, STARTS + 1):
        km = KernelManager(kernel_name=kernel_name,
                           kernel_spec_manager=_nbk.NbvalKernelspecManager(),
                           transport="ipc",
                           ip=os.path.join(where, f"k{start}"))
        km.start_kernel(**kwargs)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=startup_timeout)
            return km, kc
        except RuntimeError as exc:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
            err.flush()
            err.seek(0)
            said = err.read()[-2000:].strip() or "(nothing on stderr)"
            if start == STARTS:
                raise RuntimeError(
                    f"kernel {kernel_name!r} died at start {STARTS} times "
                    f"({exc}); its stderr:\n{said}") from None
            print(f"nbval: kernel {kernel_name!r} died at start ({exc}); "
                  f"starting it again. Its stderr:\n{said}", file=sys.stderr)
            err.seek(0)
            err.truncate()


if _nbk is not None:
    _nbk.start_new_kernel = start_kernel
