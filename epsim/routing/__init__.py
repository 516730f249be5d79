"""Expert-routing skew: one generator for the simulator's loads and the live bench's top-k.

Popularity is the share of routed token slots per expert, `[layers, experts]`; see
`popularity` for the base shapes, `skew.SkewModel` for layers and drift, `sampling` for draws,
`trace` for recorded loads and `recorded` for the ones epsim ships.
"""

from epsim.routing.popularity import cap_shares, hotset_shares, uniform_shares, zipf_shares
from epsim.routing.sampling import loads_from_topk, sample_loads, sample_topk
from epsim.routing.skew import SkewModel, parse_skew, skew_from_dict
from epsim.routing.stats import balancedness, gini, load_stats, max_over_mean, rank_loads
from epsim.routing.trace import physical_to_logical_counts, read_trace

__all__ = [
    "SkewModel", "balancedness", "cap_shares", "gini", "hotset_shares", "load_stats",
    "loads_from_topk", "max_over_mean", "parse_skew", "physical_to_logical_counts",
    "rank_loads", "read_trace", "sample_loads", "sample_topk", "skew_from_dict",
    "uniform_shares", "zipf_shares",
]
