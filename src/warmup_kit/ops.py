"""Reduction operators and the dtypes they accept (MPI_SUM, MPI_PROD, ...,
and NCCL's ``ncclAvg``)."""
from __future__ import annotations

import numpy as np

OPS: dict[str, np.ufunc] = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def check_dtype(dtype) -> np.dtype:
    """The dtype if collectives support it, else TypeError.

    Supported: signed and unsigned integers, float16/32/64 (and longdouble),
    complex. Not: bool, strings, objects, records, datetimes.
    """
    if dtype.__class__ in _NUMERIC_CLASSES and dtype in _NUMERIC:
        return dtype                  # checked before: one set lookup
    dt = np.dtype(dtype)
    if dt.kind not in "iufc" or dt.hasobject or dt.fields is not None:
        raise TypeError(f"collectives need a numeric dtype, got {dt}")
    if len(_NUMERIC) < 256:
        _NUMERIC.add(dt)
        _NUMERIC_CLASSES.add(dt.__class__)
    return dt


#: dtypes :func:`check_dtype` has accepted (and their classes: a cheap
#: first test that keeps strings and other objects equal to a dtype out)
_NUMERIC: set = set()
_NUMERIC_CLASSES: set = set()


#: every operator a collective accepts: the ufuncs, and "avg" (the sum
#: divided by the number of ranks; floating-point and complex dtypes only)
REDUCE_OPS = (*OPS, "avg")


def check_op(op: str, dtype) -> str:
    """The operator the executor runs for ``op`` ("sum" for "avg").

    Raises:
        ValueError: an unknown operator.
        TypeError: an operator the dtype does not support.
    """
    if op == "avg":
        dt = check_dtype(dtype)
        if dt.kind not in "fc":
            raise TypeError(f"op 'avg' needs a floating-point or complex "
                            f"dtype, got {dt}")
        return "sum"
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose from "
                         f"{list(REDUCE_OPS)}")
    reduce_ufunc(op, dtype)
    return op


def reduce_ufunc(op: str, dtype) -> np.ufunc:
    """The numpy ufunc for ``op`` on ``dtype``; ValueError/TypeError if none.

    ``max`` and ``min`` are not defined for complex numbers (as in MPI).
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose from {sorted(OPS)}")
    dt = check_dtype(dtype)
    if op in ("max", "min") and dt.kind == "c":
        raise TypeError(f"op {op!r} is not defined for complex dtype {dt}")
    return OPS[op]
