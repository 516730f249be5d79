"""Expert-parallel load balancing (EPLB): where each expert's replicas live, and what
changing that costs.

`rebalance_experts` mirrors DeepSeek's reference signature and returns its tuple;
everything else speaks `Placement`. Algorithms are registered by name in `ALGORITHMS`
(the `DeploymentSpec.eplb_algorithm` literals); `compute_placement` runs one by name.
"""

from epsim.eplb.cost import (
    ALGORITHM_US_PER_SLOT, REBALANCE_DEFAULTS, RebalanceCost, TransferPlan, algorithm_us,
    chunk_rank_us, plan_transfers, rebalance_cost, rebalance_params,
)
from epsim.eplb.deepseek import deepseek_placement, rebalance_experts
from epsim.eplb.loads import read_loads
from epsim.eplb.placement import SELECTIONS, Placement
from epsim.eplb.registry import ALGORITHMS, compute_placement
from epsim.eplb.sticky import sticky_placement
from epsim.eplb.survivors import fill_lost

__all__ = [
    "ALGORITHMS", "ALGORITHM_US_PER_SLOT", "Placement", "REBALANCE_DEFAULTS", "RebalanceCost",
    "SELECTIONS", "TransferPlan", "algorithm_us", "chunk_rank_us", "compute_placement",
    "deepseek_placement", "fill_lost", "plan_transfers", "read_loads", "rebalance_cost",
    "rebalance_experts", "rebalance_params", "sticky_placement",
]
