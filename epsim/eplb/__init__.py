"""Expert-parallel load balancing (EPLB): where each expert's replicas live, which ranks serve,
how tokens pick a replica, what moves in a rebalance and what that costs. One implementation
for the simulator and `live/`.

| module | concept |
|---|---|
| `placement` | `Placement`: slot maps of every layer, ranks and nodes, the alive mask |
| `maps` | the replica table and counts derived from a slot map; the maps' invariants |
| `replicas` | the static dispatch map, replica shares |
| `moves` | `plan_moves(old, new) -> MovePlan`: the one transfer rule of a rebalance |
| `cost` | what a rebalance costs (time per chunk, bytes per link, spare buffer) |
| `host_terms` | a rebalance as SGLang and vLLM run it, term by term (host work, per-layer moves) |
| `recovery` | an elastic-EP failure and rejoin as SGLang + Mooncake EP recover, term by term |
| `survivors` | placing over the alive ranks only (elastic EP) |
| `deepseek`, `sticky`, `registry` | the algorithms, by name (`compute_placement`) |
| `loads`, `inputs` | reading load matrices; the checks every algorithm shares |

`rebalance_experts` mirrors DeepSeek's reference signature and returns its tuple (`phy2log`
names stay there); everything else speaks `Placement` and ranks.
"""

from epsim.eplb.cost import (
    ALGORITHM_US_PER_SLOT, REBALANCE_DEFAULTS, RebalanceCost, algorithm_us, chunk_rank_us,
    rebalance_cost, rebalance_params,
)
from epsim.eplb.deepseek import deepseek_placement, rebalance_experts
from epsim.eplb.loads import read_loads
from epsim.eplb.moves import RELOAD, ExpertMove, MovePlan, plan_moves
from epsim.eplb.placement import Placement, ranks_per_node
from epsim.eplb.registry import ALGORITHMS, compute_placement
from epsim.eplb.sticky import sticky_placement
from epsim.eplb.survivors import fill_lost, place_over_survivors, refill_survivors

__all__ = [
    "ALGORITHMS", "ALGORITHM_US_PER_SLOT", "ExpertMove", "MovePlan", "Placement", "RELOAD",
    "REBALANCE_DEFAULTS", "RebalanceCost", "algorithm_us", "chunk_rank_us", "compute_placement",
    "deepseek_placement", "fill_lost", "place_over_survivors", "plan_moves", "ranks_per_node",
    "read_loads", "rebalance_cost", "rebalance_experts", "rebalance_params", "refill_survivors",
    "sticky_placement",
]
