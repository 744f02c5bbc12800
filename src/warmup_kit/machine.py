"""Facts about this host that measurements are labelled with."""
from __future__ import annotations

import os
import platform


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    """Cores this process may run on (the affinity mask, else cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def llc_bytes() -> int | None:
    """Bytes of the largest CPU cache of CPU 0 (Linux sysfs: its last-level
    cache, shared by the cores listed beside it), or None if unknown."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = None
    try:
        names = os.listdir(base)
    except OSError:
        return None
    for name in names:
        if not name.startswith("index"):
            continue
        try:
            with open(f"{base}/{name}/level") as f:
                level = int(f.read())
            with open(f"{base}/{name}/size") as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * scale
        except ValueError:
            continue
        if best is None or level > best[0]:
            best = (level, size)
    return best[1] if best else None


def cpu_jiffies() -> tuple[int, int] | None:
    """(stolen, total) CPU time since boot in clock ticks, all CPUs
    (``/proc/stat``; a VM's hypervisor counts "steal" while it runs another
    guest on this guest's cores), or None where there is no such file."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    ticks = [int(x) for x in fields[1:9]]   # user .. steal
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int] | None,
                after: tuple[int, int] | None) -> float | None:
    """Fraction of CPU time stolen between two :func:`cpu_jiffies`."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def load_average() -> float | None:
    """The 1-minute load average, or None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


#: entry points of the OpenBLAS builds numpy ships or links (scipy-openblas
#: wheels prefix and suffix the names)
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_",
                 "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
                 "openblas_set_num_threads")


def _openblas():
    """The OpenBLAS library this process has loaded, via ctypes, or None."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if any(hasattr(lib, n) for n in _BLAS_SETTERS):
            return lib
    return None


def blas_threads() -> int | None:
    """Threads of the loaded OpenBLAS, or None where there is none."""
    lib = _openblas()
    for name in ("scipy_openblas_get_num_threads64_",
                 "scipy_openblas_get_num_threads",
                 "openblas_get_num_threads64_", "openblas_get_num_threads"):
        if lib is not None and hasattr(lib, name):
            return int(getattr(lib, name)())
    return None


def limit_blas_threads(n: int = 1) -> bool:
    """Cap the threads of the OpenBLAS this process has loaded (numpy's).

    Ranks forked from a process that already loaded numpy inherit its
    thread count (one per core), so N ranks on C cores run N x C BLAS
    threads that spin against each other; a rank calls this first so that
    the ranks, not thread pools, share the cores. The environment variable
    ``OPENBLAS_NUM_THREADS`` does the same only before numpy is imported.
    Returns False where no OpenBLAS is found (nothing is changed).
    """
    import ctypes
    lib = _openblas()
    for name in _BLAS_SETTERS:
        if lib is not None and hasattr(lib, name):
            getattr(lib, name)(ctypes.c_int(int(n)))
            return True
    return False
