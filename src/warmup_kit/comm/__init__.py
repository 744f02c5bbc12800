"""Transports: MPI (mpi4py buffer calls) and TCP sockets, plus launchers.

``MPIComm`` imports mpi4py only when constructed, so this package works
without MPI installed.
"""
from warmup_kit.comm.base import Comm, TrafficStats
from warmup_kit.comm.launch import (
    MPICH_YIELD_ENV, find_mpiexec, launch, mpi_command, run_mpi)
from warmup_kit.comm.mpi import MPIComm
from warmup_kit.comm.sockets import SocketComm

__all__ = ["Comm", "TrafficStats", "MPIComm", "SocketComm", "launch",
           "run_mpi", "find_mpiexec", "mpi_command", "MPICH_YIELD_ENV"]
