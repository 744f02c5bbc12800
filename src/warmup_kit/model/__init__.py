"""The model: hardware figures, placement, schedule simulation, closed-form
costs and NCCL's algorithm choice (book, Chapters 4-6). Never imports a
transport, an executor or mpi4py."""
