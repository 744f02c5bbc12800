"""Transports (MPI, TCP sockets, shared memory) and their launchers.

Every transport implements the protocol of :class:`~warmup_kit.comm.Comm`.
``MPIComm`` imports mpi4py only when constructed, so this package works
without MPI installed.
"""
from warmup_kit.comm.base import Comm, Request, TrafficStats
from warmup_kit.comm.launch import TRANSPORTS, launch
from warmup_kit.comm.mpi import MPIComm
from warmup_kit.comm.mpirun import (
    MPICH_YIELD_ENV, find_mpiexec, launched_by_mpi, mpi_command, run_mpi)
from warmup_kit.comm.shm import ShmComm
from warmup_kit.comm.sockets import SocketComm

__all__ = ["Comm", "Request", "TrafficStats", "MPIComm", "SocketComm",
           "ShmComm", "TRANSPORTS", "launch", "run_mpi", "find_mpiexec",
           "mpi_command", "launched_by_mpi", "MPICH_YIELD_ENV"]
