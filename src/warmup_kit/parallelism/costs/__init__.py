"""One cost function per parallel axis (TP, CP, EP, PP, DP/ZeRO).

Each takes the :class:`~.common.Context` of one job and returns an
:class:`~.common.AxisCost`: the compute it puts on the critical path, the
communication it leaves exposed, and the memory it accounts for. The
driver, :func:`warmup_kit.parallelism.step.step`, sums them.
"""
