"""The Chapter 7 training job as test cases, shared by the sockets, shared
memory and MPI tests (tests/test_train_ranks.py, tests/mpi/train.py): the
job itself is the package's :mod:`warmup_kit.train.check`."""
from warmup_kit.train.check import (  # noqa: F401
    MLP, WIDTHS, flat, reference_params, run_job)
