"""Expert parallelism (Lepikhin et al. 2020; Fedus et al. 2022): the cost
of one MoE layer for one micro-batch.

The experts are split over ``ep`` ranks; each token goes to ``top_k``
experts, padded up to the capacity factor (the padded FFN work is in the
layer's compute), by an all-to-all before the expert FFN and another after
it (dispatch and combine), in every pass; none of it is overlapped.
Memory: each GPU holds ``experts / ep`` of the experts' weights (counted
in the parameters per GPU).
"""
from __future__ import annotations

from warmup_kit.parallelism.compute import BYTES
from warmup_kit.parallelism.costs.common import AxisCost, Context, \
    collective_s


def all_to_all_s(ctx: Context) -> float:
    """One MoE layer's forward all-to-alls (dispatch + combine) per GPU."""
    lay, model = ctx.layout, ctx.model
    nbytes = (ctx.b * ctx.s * model.top_k * lay.capacity_factor
              * model.hidden * BYTES)
    return 2 * collective_s(ctx.cluster, "all_to_all", nbytes,
                            ctx.shapes["ep"])


def ep_cost(ctx: Context) -> AxisCost:
    """One layer, one micro-batch: the dispatch and combine all-to-alls."""
    if not ctx.model.experts or ctx.layout.ep < 2:
        return AxisCost(per="layer")
    return AxisCost(comm_s=ctx.passes * all_to_all_s(ctx), per="layer")
